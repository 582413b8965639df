"""How the commands print what they return: an answer (table, JSON or CSV), an explanation, the
history, on a terminal as wide as it is (rich is imported only when a table is drawn)."""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING

import click

from .display import csv_text, visible
from .display import number as _number
from .errors import InputError
from .result import Explanation, HistoryEntry, QueryResult, answer_ids, from_clause

if TYPE_CHECKING:
    from rich.console import Console


def show_result(result: QueryResult, fmt: str) -> None:
    """Print an answer (fresh or from history) in the chosen format."""
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), allow_nan=False))
    elif fmt == "csv":
        click.echo(answer_csv(result), nl=False)
    else:
        print_result(result)


def show_entry(entry: HistoryEntry, fmt: str) -> None:
    """One stored answer, printed as it was when released."""
    if entry.answer is None:
        raise InputError(f"answer {entry.id} has no stored answer (it was charged before answers "
                         "were stored, in a schema version 2 ledger); only its charge is recorded")
    if fmt == "json":
        click.echo(json.dumps(entry.answer, allow_nan=False))
    elif "answers" in entry.answer:  # a workload's answers (dpsql query --file)
        from .workload_cli import print_stored

        print_stored(entry.answer)
    else:
        print_result(QueryResult.from_dict(entry.answer, entry.id))


def print_history(entries: tuple[HistoryEntry, ...]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Released answers (dpsql history --id N prints one again)")
    for name in ("id", "time", "sql", "epsilon", "epsilon_dp", "cost"):
        table.add_column(name)
    for e in entries:
        cost = "-" if e.answer is None else _number(e.answer["cost"])
        table.add_row(str(e.id), e.time[:19], Text(visible(e.sql)), _number(e.epsilon),
                      _number(e.epsilon_dp), cost)
    terminal().print(table)


def show_explanation(explanation: Explanation, fmt: str) -> None:
    """Print an explanation in the chosen format."""
    if fmt == "json":
        click.echo(json.dumps(explanation.to_dict(), allow_nan=False))
    else:
        print_explanation(explanation)


def print_result(result: QueryResult) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for name in result.table.columns:
        header = visible(str(name))  # as wide as its longest word: cells wrap, names do not
        table.add_column(Text(header), justify="right",
                         min_width=min(max(map(len, header.split() or [""])), 30))
    intervals, intervals_note = result.shown_intervals_table()
    for row in result.cells(intervals):
        table.add_row(*(Text(text) for text in row))
    console = terminal()
    console.print(Text(visible(result.sql)))
    console.print(table)
    console.print(intervals_note)
    for line in result.interval_notes():
        console.print(Text(visible(line)))
    console.print(
        f"epsilon {_number(result.epsilon)} (information privacy under k={result.k}, "
        f"eta={_number(result.eta)}{from_clause(result.eta_from)}) -> epsilon_dp "
        f"{_number(result.epsilon_dp)} via the {result.mode} bound"
    )
    console.print(Text(f"columns read: {', '.join(result.columns_read) or 'none'}; the "
                       f"transcript's eta is now {_number(result.budget.eta)}"
                       f"{from_clause(result.budget.eta_from)}"))
    b = result.budget
    console.print(
        f"cost {_number(result.cost)}: transcript level {_number(result.level_before)} -> "
        f"{_number(b.spent_ip)} of budget {_number(b.total)}; {result.largest_line()}"
        + ("" if result.id is None else f" (answer id {result.id}: dpsql history --id {result.id})")
    )
    if result.derived_from:  # with the released noise its cells carry (summed, for a marginal)
        console.print(derived_line(result.derived_from))
        for info in result.aggregates:
            console.print(Text(visible(info.describe())))


def derived_line(ids: tuple[int, ...]) -> str:
    """What an answer given from released ones says of where it came from."""
    return (f"derived from {answer_ids(ids)}; cost 0: post-processing of "
            "released answers, nothing charged")


def print_explanation(ex: Explanation) -> None:
    from rich.table import Table
    from rich.text import Text

    console = terminal()
    unit = f"privacy unit {ex.privacy_unit}, at most {ex.max_rows_per_unit} row(s) each" \
        if ex.privacy_unit else "each row is one individual"
    console.print(Text(f"table {ex.table} ({unit}); groups: {', '.join(ex.group_by) or 'none'} "
                       f"({ex.groups} output row(s))"))
    console.print(Text(f"epsilon {_number(ex.epsilon)} -> epsilon_dp {_number(ex.epsilon_dp)} "
                       f"via {ex.mode} ({ex.justification}); k={ex.k}, eta={_number(ex.eta)}"
                       f"{from_clause(ex.eta_from)}"))
    console.print(Text(f"columns read: {', '.join(ex.columns_read) or 'none'}; the transcript's "
                       f"eta once answered: {_number(ex.transcript_eta)}"))
    if ex.model:
        moved = "; ".join(f"{c.change}: {_number(c.level)}" for c in ex.model_checks)
        console.print(Text(f"declared model: {ex.model}; epsilon_dp {_number(ex.epsilon_dp)} "
                           f"against the tight map's {_number(ex.tight_epsilon_dp)}; the "
                           f"answer's level if the model is off: {moved}"))
    console.print("noisy aggregates:")
    items = Table.grid(padding=(0, 1))  # a list with hanging indents: wraps between words at 80
    items.add_column(no_wrap=True)
    items.add_column()
    for a in ex.aggregates:
        items.add_row("-", Text(
            f"{visible(ex.owner(a))}: {a.function}, {a.mechanism.replace('_', ' ')} noise, "
            f"sensitivity {_number(a.sensitivity)}, epsilon_dp {_number(a.epsilon_dp)}, scale "
            f"{_number(a.scale)}, its own 95% error ±{_number(a.ci95_halfwidth)}"))
    console.print(items)
    if ex.errors:
        console.print("expected 95% error of each output:")
        errors = Table.grid(padding=(0, 1))
        errors.add_column(no_wrap=True)
        errors.add_column()
        for e in ex.errors:
            errors.add_row("-", Text(visible(e.describe())))
        console.print(errors)
    console.print(f"cost {_number(ex.cost)}: transcript level {_number(ex.level_before)} -> "
                  f"{_number(ex.level_after)} of budget {_number(ex.budget.total)}: "
                  + ("admissible" if ex.admissible else "would be REFUSED (over budget)")
                  + f"; largest epsilon this query can still ask: {_number(ex.largest_epsilon)}")
    if ex.derived_from:
        console.print(f"{derived_line(ex.derived_from)} (it is at least as accurate as asked)")
    if ex.flattened_sql:
        console.print("flattened SQL (the CTEs and subqueries merged into one SELECT):")
        console.print(Text(visible(ex.flattened_sql)))
    console.print("rewritten SQL:")
    console.print(Text(visible(ex.rewritten_sql)))


def answer_csv(result: QueryResult) -> str:
    """The answer with, after each noisy column, its 95% half-width ("no interval" where there
    is none) and the interval [low, high] cut to what its statistic can be. An answer built
    without pandas is written by the csv module as pandas writes it (numbers as their shortest
    repr, text cells neutralised, missing values empty); one with timestamps or read through
    pandas is written by pandas (it formats timestamps by their column)."""
    kinds = result.table.kinds
    if kinds is None or "TIMESTAMP" in kinds.values():
        return _frame_csv(result)
    widths, bounds = result.ci95_table.floats(), result.bounds(result.ci95_table)
    rows = result.table.rows()
    columns = {name: [row[j] for row in rows] for j, name in enumerate(result.table.columns)}
    for j, (name, possible) in enumerate(zip(result.table.columns, result.ranges(), strict=True)):
        if possible is None:
            continue
        columns[f"{name}_ci95"] = [w[j] if w[j] == w[j] else "no interval" for w in widths]
        ends = [b[j] for b in bounds]
        columns[f"{name}_ci95_low"] = [None if end is None else end[0] for end in ends]
        columns[f"{name}_ci95_high"] = [None if end is None else end[1] for end in ends]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([csv_text(str(name)) for name in columns])
    writer.writerows(zip(*([_csv_cell(v) for v in values] for values in columns.values()),
                         strict=True))
    return text.getvalue()


def _csv_cell(value) -> str:
    """One CSV cell as pandas' `to_csv` writes it: empty for a missing value, a float by its
    shortest repr, text neutralised (`csv_text`)."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    value = csv_text(value)
    return repr(value) if isinstance(value, float) else str(value)


def _frame_csv(result: QueryResult) -> str:
    """`answer_csv` through pandas, for an answer held as a frame."""
    frame = result.df.copy()
    bounds = result.bounds(result.ci95)
    for j, (name, possible) in enumerate(zip(result.df.columns, result.ranges(), strict=True)):
        if possible is None:
            continue
        frame[f"{name}_ci95"] = [c if c == c else "no interval" for c in result.ci95[name]]
        ends = [b[j] for b in bounds]
        frame[f"{name}_ci95_low"] = [None if end is None else end[0] for end in ends]
        frame[f"{name}_ci95_high"] = [None if end is None else end[1] for end in ends]
    frame.columns = [csv_text(str(name)) for name in frame.columns]
    return frame.map(csv_text).to_csv(index=False)  # text cells only; numbers stay numbers


def terminal() -> Console:
    """The terminal's own width (80 when it cannot be told), so lines wrap between words."""
    from rich.console import Console

    return Console(highlight=False)
