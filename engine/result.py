"""Typed values returned to users: query results, explanations, budget status and history."""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from ..calibration.declared import DeclaredModel
from .answer_table import Table
from .display import cell, cut, html_paragraphs, html_table, number

if TYPE_CHECKING:
    import pandas as pd


def answer_ids(ids: tuple[int, ...]) -> str:
    """Released answers named by id, as a derived answer cites them: "answer 3", "answers 1, 2"."""
    return ("answer " if len(ids) == 1 else "answers ") + ", ".join(map(str, ids))


@dataclass(frozen=True)
class BudgetStatus:
    """The ledger's state in information-privacy (IP) and DP terms."""

    total: float  # the policy's IP budget
    spent_ip: float  # transcript level L(spent_dp) under the policy's dependence model
    spent_dp: float  # sum of epsilon_dp of every released answer
    remaining: float  # total - spent_ip: headroom of the level, NOT an epsilon one can ask
    remaining_dp: float  # the DP epsilon still admissible: L^-1(total) - spent_dp
    # The largest epsilon a query reading no column (COUNT(*)) can still ask on every table:
    # L_q(L^-1(total) - spent_dp), L_q the map that calibrates it (under mode model, a table's
    # household model); a given query's own is in its explanation and each answer.
    largest_epsilon: float
    mode: str  # the policy's mode, whose map L accounts for the transcript
    # The eta of the transcript: that of the union of the columns every charged answer read,
    # and the policy declaration it comes from (docs/theory.md §11).
    eta: float | None = None
    eta_from: str = ""


@dataclass(frozen=True)
class AnswerCost:
    """What one released answer spends: the level asked, the DP level its noise was calibrated
    to, and the mode and model that certify it. The ledger stores it with each charge, reports
    read it back, and results and explanations show it."""

    epsilon: float  # the information-privacy level asked for this answer
    epsilon_dp: float  # the DP level its noise was calibrated to
    mode: str
    k: int
    eta: float


@dataclass(frozen=True)
class AggregateRecord:
    """How one noisy aggregate of an answer was produced: what the ledger stores with a charge
    and reports show (the one record of an aggregate's metadata)."""

    column: str  # the output column (or, for a hidden HAVING/ORDER BY aggregate, its label)
    function: str  # e.g. COUNT(*), SUM(income), COUNT(DISTINCT unit)
    mechanism: str  # discrete_laplace or laplace
    sensitivity: float
    epsilon_dp: float  # this aggregate's share of the query's epsilon_dp
    scale: float

    def describe(self) -> str:
        """One readable phrase: the column, its aggregate, mechanism, sensitivity and scale."""
        return (f"{self.column} = {self.function}: {self.mechanism}, sensitivity "
                f"{number(self.sensitivity)}, scale {number(self.scale)}")

    def record(self) -> dict:
        """The ledger's JSON form: the fields of this record only."""
        return {f.name: getattr(self, f.name) for f in fields(AggregateRecord)}

    @classmethod
    def from_record(cls, item: dict) -> AggregateRecord:
        """Read `record()`'s form back (KeyError, TypeError or ValueError if it is not one)."""
        return cls(column=str(item["column"]), function=str(item["function"]),
                   mechanism=str(item["mechanism"]), sensitivity=float(item["sensitivity"]),
                   epsilon_dp=float(item["epsilon_dp"]), scale=float(item["scale"]))


@dataclass(frozen=True)
class AggregateInfo(AggregateRecord):
    """An aggregate's record in a result or explanation, with its expected error."""

    ci95_halfwidth: float


@dataclass(frozen=True)
class ExpectedError:
    """An output column's expected 95% error, known before the data is read: a half-width, or
    for an AVG the one its group's row count n and mean give, (sum_error + |mean| ·
    count_error) / (n − count_error), from its SUM's and COUNT's noise (each at 2.5%)."""

    column: str
    function: str  # e.g. AVG(income)
    halfwidth: float | None = None  # when it does not depend on the data
    sum_error: float | None = None  # an AVG's SUM half-width at 2.5%
    count_error: float | None = None  # an AVG's COUNT half-width at 2.5%
    widest: float | None = None  # an AVG's largest |value|: max(|lower|, |upper|)

    def at(self, rows: float, mean: float) -> float | None:
        """An AVG's half-width over `rows` rows averaging `mean` (None when not an AVG, or
        when the COUNT's noise reaches 0 rows)."""
        if self.sum_error is None or self.count_error is None or rows <= self.count_error:
            return None
        return (self.sum_error + abs(mean) * self.count_error) / (rows - self.count_error)

    def describe(self) -> str:
        """One readable phrase: the column, its aggregate and its expected 95% error."""
        named = self.column if self.function == self.column else f"{self.column} = {self.function}"
        head = f"{named}: expected 95% error "
        if self.halfwidth is not None:
            return head + f"±{number(self.halfwidth)}"
        if self.sum_error is None or self.count_error is None:
            return head + "depends on the data (the answer gives its interval)"
        example = self.at(1000.0, self.widest or 0.0)
        return head + (f"±({number(self.sum_error)} + |mean|·{number(self.count_error)}) / "
                       f"(n − {number(self.count_error)}) over a group of n rows"
                       + ("" if example is None else
                          f", e.g. ±{number(example)} for 1,000 rows at the largest |mean| "
                          f"{number(self.widest)}"))


@dataclass(frozen=True)
class ModelCheck:
    """An answer's level under a declared model moved by one stated change (a model that is
    off), so a reader sees how much the guarantee leans on the model (docs/theory.md §14)."""

    change: str  # e.g. "rho 0.45" or "P(True | False) 0.25"
    level: float


def model_fields(declared: DeclaredModel | None, epsilon_dp: float, times: tuple[int, ...] | None,
                 tight_dp: float | None) -> dict:
    """What a result or explanation says of the declared model that calibrated an answer of
    eps_dp reading the time points `times` (if any): the model, the tight map's eps_dp and the
    levels if the model is off."""
    if declared is None:
        return {}
    checks = declared.checks(epsilon_dp, times or ())
    return {"model": declared.describe(), "tight_epsilon_dp": tight_dp,
            "model_checks": tuple(ModelCheck(change, level) for change, level in checks)}


@dataclass(frozen=True)
class QueryResult:
    """A private answer: the noisy table, its 95% intervals and what it cost. The tables are
    held without pandas (`df`, `ci95` and `ci95_simultaneous` build their DataFrames on first
    use), so printing an answer imports no pandas."""

    table: Table  # the answer's cells (`df`)
    ci95_table: Table  # per-cell 95% half-widths (`ci95`)
    simultaneous_table: Table  # simultaneous 95% half-widths (`ci95_simultaneous`)
    # False when HAVING or ORDER BY used a noisy value: ci95 is then the interval before
    # selection and under-covers the rows shown; ci95_simultaneous stays valid.
    selection_adjusted: bool
    sql: str
    epsilon: float
    epsilon_dp: float
    mode: str
    k: int
    eta: float  # the eta of the columns this answer read (column-scoped, docs/theory.md §11)
    aggregates: tuple[AggregateInfo, ...]
    budget: BudgetStatus
    level_before: float
    level_after: float
    cost: float  # how much this answer raised the transcript level: level_after - level_before
    id: int | None = None  # the ledger entry holding this answer (`history(id)` fetches it again)
    eta_from: str = ""  # the policy declaration the eta comes from
    columns_read: tuple[str, ...] = ()  # the policy columns the exact query read (table.column)
    model: str = ""  # the declared model that calibrated the answer (mode model), else ""
    tight_epsilon_dp: float | None = None  # the tight map's epsilon_dp, beside the model's
    model_checks: tuple[ModelCheck, ...] = ()  # the answer's level if the model is off
    # The largest epsilon the same query can still ask once this answer is charged (what
    # explain would say next): its own calibration, declared model and time points included.
    largest_epsilon: float | None = None
    # Per column, what its exact statistic can be (a count >= 0, an AVG within its operand's
    # bounds; +-inf unbounded), which shown intervals are cut to; None for a group key.
    possible: tuple[tuple[float, float] | None, ...] = ()
    # The noisy columns without an interval in some or all rows, with why (never shown bare).
    no_interval: tuple[tuple[str, str], ...] = ()
    # The released answers this one was derived from by post-processing, at no charge (its
    # values and intervals are theirs, docs/theory.md §22); () for an answer charged itself.
    derived_from: tuple[int, ...] = ()

    @functools.cached_property
    def df(self) -> pd.DataFrame:
        """The noisy answer as a DataFrame."""
        return self.table.frame()

    @functools.cached_property
    def ci95(self) -> pd.DataFrame:
        """Per-cell 95% half-widths (NaN where none applies)."""
        return self.ci95_table.frame()

    @functools.cached_property
    def ci95_simultaneous(self) -> pd.DataFrame:
        """Half-widths holding for every group of a column at once with probability >= 95%,
        so also for rows chosen by their noisy values."""
        return self.simultaneous_table.frame()

    def ranges(self) -> list[tuple[float, float] | None]:
        """`possible` per column, or (older answers) unbounded for every column with an
        interval somewhere and None for the others."""
        columns = self.table.columns
        if len(self.possible) == len(columns):
            return list(self.possible)
        widths = self.ci95_table.floats()
        return [(-math.inf, math.inf) if any(row[j] == row[j] for row in widths) else None
                for j in range(len(columns))]

    def bounds(self, intervals: pd.DataFrame | Table) -> list[list[list[float] | None]]:
        """Per cell, the interval shown: [low, high] within what the statistic can be."""
        ranges = self.ranges()
        return [[None if r is None else cut(v, c, r) for v, c, r in zip(row, ci, ranges, strict=True)]
                for row, ci in zip(self.table.rows(), _floats(intervals), strict=True)]

    @property
    def answer_cost(self) -> AnswerCost:
        """What this answer spent, as the ledger records it."""
        return AnswerCost(self.epsilon, self.epsilon_dp, self.mode, self.k, self.eta)

    def to_dict(self) -> dict:
        """The JSON form documented in DESIGN.md; every value is plain JSON (non-finite
        numbers and missing values become null), so encoding it cannot fail."""
        return _json_ready({
            "sql": self.sql,
            "columns": [str(c) for c in self.table.columns],
            "rows": self.table.object_rows(),
            "ci95": self.ci95_table.object_rows(),
            "ci95_simultaneous": self.simultaneous_table.object_rows(),
            "ci95_bounds": self.bounds(self.ci95_table),
            "possible": [None if r is None else list(r) for r in self.possible],
            "no_interval": dict(self.no_interval),
            "selection_adjusted": self.selection_adjusted,
            "epsilon": self.epsilon,
            "epsilon_dp": self.epsilon_dp,
            "mode": self.mode,
            "k": self.k,
            "eta": self.eta,
            "eta_from": self.eta_from,
            "columns_read": list(self.columns_read),
            "cost": self.cost,
            "transcript_level_before": self.level_before,
            "transcript_level_after": self.level_after,
            "aggregates": [_flat(a) for a in self.aggregates],
            "budget": _flat(self.budget),
            "model": self.model,
            "tight_epsilon_dp": self.tight_epsilon_dp,
            "model_checks": [_flat(c) for c in self.model_checks],
            "largest_epsilon": self.largest_epsilon,
        } | ({"derived_from": list(self.derived_from)} if self.derived_from else {}))

    @classmethod
    def from_dict(cls, answer: dict, id: int | None = None) -> QueryResult:
        """Rebuild a result from its stored JSON form (as `history` returns it)."""
        columns = answer["columns"]
        return cls(
            table=Table.of_stored(answer["rows"], columns),
            ci95_table=Table.of_stored(answer["ci95"], columns, numbers=True),
            simultaneous_table=Table.of_stored(answer["ci95_simultaneous"], columns, numbers=True),
            selection_adjusted=answer["selection_adjusted"], sql=answer["sql"],
            epsilon=answer["epsilon"], epsilon_dp=answer["epsilon_dp"], mode=answer["mode"],
            k=answer["k"], eta=answer["eta"],
            aggregates=tuple(AggregateInfo(**a) for a in answer["aggregates"]),
            budget=BudgetStatus(**answer["budget"]), level_before=answer["transcript_level_before"],
            level_after=answer["transcript_level_after"], cost=answer["cost"], id=id,
            eta_from=answer.get("eta_from", ""), columns_read=tuple(answer.get("columns_read", ())),
            model=answer.get("model", ""), tight_epsilon_dp=answer.get("tight_epsilon_dp"),
            model_checks=tuple(ModelCheck(**c) for c in answer.get("model_checks", ())),
            largest_epsilon=answer.get("largest_epsilon"),
            possible=tuple(None if r is None else (-math.inf if r[0] is None else float(r[0]),
                                                   math.inf if r[1] is None else float(r[1]))
                           for r in answer.get("possible", ())),
            no_interval=tuple(answer.get("no_interval", {}).items()),
            derived_from=tuple(answer.get("derived_from", ())),
        )

    def shown_intervals(self) -> tuple[pd.DataFrame, str]:
        """The half-widths a display prints beside the values, and the line saying what they
        are: per cell, or simultaneous when rows were chosen by noise (the per-cell ones would
        then under-cover exactly the rows shown)."""
        table, note = self.shown_intervals_table()
        return table.frame(), note

    def shown_intervals_table(self) -> tuple[Table, str]:
        """`shown_intervals` without a DataFrame (what the command line prints)."""
        if self.selection_adjusted:
            return self.ci95_table, "± is the 95% interval half-width of the noise."
        return self.simultaneous_table, (
            "± holds for all groups at once with 95% probability (simultaneous): rows were "
            "chosen or ordered by noisy values, so the per-cell interval would under-cover them."
        )

    def _repr_html_(self) -> str:
        """Jupyter's view: the answer as a table of `value ± ci` cells, then what it cost."""
        intervals, note = self.shown_intervals_table()
        rows = self.cells(intervals)
        b = self.budget
        return html_table([str(c) for c in self.table.columns], rows, caption=self.sql) + html_paragraphs(
            note, *self.interval_notes(),
            f"epsilon {number(self.epsilon)} (information privacy under k={self.k}, "
            f"eta={number(self.eta)}{from_clause(self.eta_from)}) -> epsilon_dp "
            f"{number(self.epsilon_dp)} via the {self.mode} bound",
            f"budget: transcript level {number(b.spent_ip)} of {number(b.total)} (was "
            f"{number(self.level_before)}); {self.largest_line()}",
            *([f"derived from {answer_ids(self.derived_from)}; cost 0: "
               "post-processing of released answers, nothing charged"]
              if self.derived_from else []),
        )

    def cells(self, intervals: pd.DataFrame | Table) -> list[list[str]]:
        """Each cell as displays show it: `value ± half-width`, `value [low, high]` cut to what
        the statistic can be, `value (no interval)`, or a key."""
        ranges = self.ranges()
        return [[cell(v, c, r) for v, c, r in zip(row, ci, ranges, strict=True)]
                for row, ci in zip(self.table.rows(), _floats(intervals), strict=True)]

    def largest_line(self) -> str:
        """The largest epsilon still askable: this query's own once charged, or (answers stored
        before it was kept) that of a query reading no column."""
        if self.largest_epsilon is not None:
            return f"largest epsilon this query can still ask: {number(self.largest_epsilon)}"
        return ("largest epsilon a query reading no column can still ask: "
                f"{number(self.budget.largest_epsilon)}")

    def interval_notes(self) -> list[str]:
        """One line per noisy column without an interval somewhere, saying why."""
        return [f"{column}: {why}" for column, why in self.no_interval]


@dataclass(frozen=True)
class HistoryEntry:
    """One released answer as the ledger stored it with its charge."""

    id: int
    time: str  # ISO 8601, UTC
    analyst: str
    sql: str
    epsilon: float
    epsilon_dp: float
    mode: str
    answer: dict | None  # the JSON form printed when released; None for answers charged
    # before answers were stored (ledgers migrated from schema version 2)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Explanation:
    """What a query would do and cost, computed without touching the data or the budget."""

    sql: str
    table: str
    privacy_unit: str | None
    max_rows_per_unit: int  # rows of one unit the aggregates read (m1 · m2 joined on the unit)
    group_by: tuple[str, ...]
    groups: int
    rewritten_sql: str
    epsilon: float
    epsilon_dp: float
    mode: str
    justification: str
    k: int
    eta: float  # the eta of the columns the query reads
    aggregates: tuple[AggregateInfo, ...]
    budget: BudgetStatus
    level_before: float
    level_after: float
    cost: float  # how much the answer would raise the transcript level, at today's spending
    admissible: bool
    eta_from: str = ""  # the policy declaration the eta comes from
    columns_read: tuple[str, ...] = ()  # the policy columns the exact query reads
    transcript_eta: float | None = None  # the transcript's eta once this answer is charged
    largest_epsilon: float | None = None  # the largest epsilon this query can still ask
    flattened_sql: str = ""  # the one-table SELECT the query's CTEs/subqueries flatten to
    model: str = ""  # the declared model that calibrates the query (mode model), else ""
    tight_epsilon_dp: float | None = None  # the tight map's epsilon_dp, beside the model's
    model_checks: tuple[ModelCheck, ...] = ()  # the answer's level if the model is off
    # Each noisy output's own expected error (an AVG's is not its SUM's), in output order.
    errors: tuple[ExpectedError, ...] = ()
    # The released answers this query would be answered from at no charge (docs/theory.md §22).
    derived_from: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        """Read `errors` back from their JSON form (as the service's client passes them)."""
        object.__setattr__(self, "errors", tuple(
            e if isinstance(e, ExpectedError) else ExpectedError(**e) for e in self.errors))

    def owner(self, aggregate: AggregateInfo) -> str:
        """The output a measurement is (its column), or the one it is a part of, e.g. "part of
        mean_income" for the SUM of an AVG: its error is not that output's."""
        if not self.errors or any(e.column == aggregate.column and e.function == aggregate.function
                                  for e in self.errors):
            return aggregate.column
        return f"part of {aggregate.column}"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["aggregates"] = [asdict(a) for a in self.aggregates]
        out["model_checks"] = [asdict(c) for c in self.model_checks]
        out["errors"] = [asdict(e) for e in self.errors]
        if not self.derived_from:
            del out["derived_from"]
        return _json_ready(out)

    def _repr_html_(self) -> str:
        """Jupyter's view: the noise of each aggregate as a table, the cost and the SQL run."""
        rows = [[self.owner(a), a.function, a.mechanism, number(a.sensitivity), number(a.epsilon_dp),
                 number(a.scale), f"±{number(a.ci95_halfwidth)}"] for a in self.aggregates]
        headers = ["output", "aggregate", "mechanism", "sensitivity", "epsilon_dp", "scale",
                   "its own 95% error"]
        verdict = "admissible" if self.admissible else "would be REFUSED"
        return html_paragraphs(
            f"epsilon {number(self.epsilon)} -> epsilon_dp {number(self.epsilon_dp)} via {self.mode} "
            f"({self.justification}); k={self.k}, eta={number(self.eta)}"
            f"{from_clause(self.eta_from)}",
            f"columns read: {', '.join(self.columns_read) or 'none'}",
        ) + html_table(headers, rows, caption=self.sql) + html_paragraphs(
            *(e.describe() for e in self.errors),
            f"transcript level {number(self.level_before)} -> {number(self.level_after)} of budget "
            f"{number(self.budget.total)}: {verdict}",
            *([f"flattened SQL: {self.flattened_sql}"] if self.flattened_sql else []),
            f"rewritten SQL: {self.rewritten_sql}",
        )


def from_clause(eta_from: str) -> str:
    """' from <declaration>' when the source of an eta is known (older answers do not say)."""
    return f" from {eta_from}" if eta_from else ""


def _flat(record: Any) -> dict:
    """A dataclass of plain values (no nested dataclass or container) as `asdict` gives it,
    without its deep copy: every charge stores an answer's records."""
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    return {name: getattr(record, name) for name in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # each dataclass's field names, in order


_PLAIN = frozenset({str, int, bool})  # exactly these types are JSON as they are


def _json_ready(value):
    """Plain JSON values all the way down: numpy scalars to Python, NaN, ±inf and missing
    values (None, pandas NA/NaT) to None, other objects to their text."""
    kind = type(value)  # the plain types first, exactly (a subclass takes the general way)
    if kind in _PLAIN:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):  # plain values kept without a call each, as in a list
        return {str(k): v if (t := type(v)) in _PLAIN or (t is float and math.isfinite(v))
                else _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a row's plain cells kept without a call each
        return _json_list(value)
    if value is None or _pandas_missing(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)):
        return value
    return str(value)


def _json_list(values: list | tuple) -> list:
    """`_json_ready` of each item: plain values kept, a float made None unless finite, a list
    (a table's row) done the same way, anything else by `_json_ready`."""
    return [v if (t := type(v)) in _PLAIN else (v if math.isfinite(v) else None) if t is float
            else _json_list(v) if t is list else _json_ready(v) for v in values]


def _pandas_missing(value) -> bool:
    """Whether `value` is pandas' NA or NaT (only a loaded pandas can have made one)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and (value is pandas.NA or value is pandas.NaT)


def _floats(intervals: pd.DataFrame | Table) -> list[list[float]]:
    """Half-widths as rows of floats, from a table or (as callers of the API pass) a frame."""
    if isinstance(intervals, Table):
        return intervals.floats()
    return intervals.to_numpy(dtype=float).tolist()
