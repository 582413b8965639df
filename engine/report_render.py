"""Render a budget Report as a terminal table (rich), Markdown, or one self-contained HTML page.

Analysts' SQL and names are untrusted text: they are never interpreted as rich markup,
are escaped for Markdown, and go through html.escape in the page.
"""

from __future__ import annotations

import base64
import html
import io
import re

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .display import number, visible
from .report import Report, ReportTotals, names_read
from .report_plot import plot_png
from .result import from_clause

ENTRY_HEADERS = ("#", "time (UTC)", "analyst", "SQL", "ε asked", "ε_dp", "mode", "k", "η",
                 "columns read", "level after", "aggregates: mechanism, sensitivity, noise scale")
AGGREGATE_HEADERS = ("#", "column = aggregate", "mechanism", "sensitivity", "ε_dp share", "noise scale")
ANALYST_HEADERS = ("analyst", "answers", "Σε asked", "Σε_dp", "own level L(Σε_dp)", "share of Σε_dp")


def totals_rows(t: ReportTotals) -> list[tuple[str, str, str]]:
    """(field, label, shown value) for every total, in reading order."""
    return [
        ("answers", "answers released", str(t.answers)),
        ("epsilon_asked", "Σε asked (sum of per-answer levels)", number(t.epsilon_asked)),
        ("spent_dp", "DP spent: Σε_dp", number(t.spent_dp)),
        ("transcript_level", f"transcript IP level L(Σε_dp) under k={t.k}, η={number(t.eta)}"
         f"{from_clause(t.eta_from)}", number(t.transcript_level)),
        ("information_nats", "bound on I(X_i; Y), nats", number(t.information_nats)),
        ("information_bits", "bound on I(X_i; Y), bits", number(t.information_bits)),
        ("budget", "budget (IP)", number(t.budget)),
        ("largest_epsilon", "largest ε a query reading no column (COUNT(*)) can still ask: "
         "L(L⁻¹(budget) − Σε_dp)", number(t.largest_epsilon)),
        ("remaining", "level headroom (IP): budget − L(Σε_dp)",
         number(t.remaining)),
        ("dp_budget", "budget in DP terms: L⁻¹(budget)", number(t.dp_budget)),
        ("remaining_dp", "remaining (DP): L⁻¹(budget) − Σε_dp", number(t.remaining_dp)),
    ]


def entry_rows(report: Report, separator: str = "; ") -> list[tuple[str, ...]]:
    """The shown answers as text cells matching ENTRY_HEADERS; aggregates joined by separator."""
    return [
        (str(a.id), a.time.strftime("%Y-%m-%d %H:%M:%S"), visible(a.analyst), visible(a.sql),
         number(a.cost.epsilon), number(a.cost.epsilon_dp), visible(a.cost.mode), str(a.cost.k),
         number(a.cost.eta), visible(names_read(a.columns)),
         number(report.levels[i]), separator.join(visible(g.describe()) for g in a.aggregates))
        for i, a in ((i, report.answers[i]) for i in report.shown)
    ]


def aggregate_rows(report: Report) -> list[tuple[str, ...]]:
    """One row per noisy aggregate of the shown answers, matching AGGREGATE_HEADERS."""
    return [
        (str(answer.id), visible(f"{a.column} = {a.function}"), visible(a.mechanism.replace("_", " ")),
         number(a.sensitivity),
         number(a.epsilon_dp), number(a.scale))
        for answer in (report.answers[i] for i in report.shown) for a in answer.aggregates
    ]


def analyst_rows(report: Report) -> list[tuple[str, ...]]:
    """Per-analyst subtotals as text cells matching ANALYST_HEADERS."""
    return [
        (visible(r.analyst), str(r.answers), number(r.epsilon_asked), number(r.spent_dp), number(r.own_level),
         f"{100 * r.share_dp:.1f}%")
        for r in report.analysts.itertuples(index=False)
    ]


def _heading(report: Report) -> str:
    t = report.totals
    return (f"Ledger {report.ledger}, generated {report.generated:%Y-%m-%d %H:%M:%S} UTC; "
            f"policy budget {number(t.budget)}, dependence model k={t.k}, η={number(t.eta)}, "
            f"accounted with mode {t.mode}.")


def render_table(report: Report, width: int = 120) -> str:
    """Plain-text tables for a terminal or a text file; at 80 columns they wrap between words."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False)
    console.print(Text("dpsql budget report"), Text(_heading(report)), sep="\n")
    totals = Table(title="Totals (whole ledger)", show_header=False)
    totals.add_column("quantity")
    totals.add_column("value", justify="right")
    for _, label, value in totals_rows(report.totals):
        totals.add_row(Text(label), Text(value))
    console.print(totals)
    for note in report.notes():
        console.print(Text(f"* {note}"))
    entries = entry_rows(report)
    sql_at, aggregates_at = ENTRY_HEADERS.index("SQL"), len(ENTRY_HEADERS) - 1
    # The terminal shows the SQL and the aggregates in tables of their own, so each fits 80 columns.
    k_at, eta_at = ENTRY_HEADERS.index("k"), ENTRY_HEADERS.index("η")
    read_at = ENTRY_HEADERS.index("columns read")
    hidden = (sql_at, eta_at, read_at, aggregates_at)
    answers = [tuple(f"{c}, {row[eta_at]}" if i == k_at else c for i, c in enumerate(row)
                     if i not in hidden) for row in entries]
    answer_headers = tuple("k, η" if i == k_at else h for i, h in enumerate(ENTRY_HEADERS)
                           if i not in hidden)
    for title, headers, rows in (("Per analyst", ANALYST_HEADERS, analyst_rows(report)),
                                 ("Answers", answer_headers, answers),
                                 ("SQL of each answer", ("#", "SQL", "columns read"),
                                  [(row[0], row[sql_at], row[read_at]) for row in entries]),
                                 ("Noisy aggregates of each answer", AGGREGATE_HEADERS,
                                  aggregate_rows(report))):
        if rows:
            table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
            for header in headers:
                table.add_column(header, ratio=1 if header == "SQL" else None, overflow="fold",
                                 no_wrap=header == "#")
            for row in rows:
                table.add_row(*(Text(cell) for cell in row))
            console.print(table)
    return buffer.getvalue()


def render_markdown(report: Report) -> str:
    """A Markdown document with the same tables (GitHub-flavoured pipe tables)."""
    lines = ["# dpsql budget report", "", _md_text(_heading(report)), "", "## Totals (whole ledger)",
             "", "| quantity | value |", "|---|---:|"]
    lines += [f"| {_md_text(label)} | {value} |" for _, label, value in totals_rows(report.totals)]
    lines.append("")
    lines += [f"- {_md_text(note)}" for note in report.notes()]
    for title, headers, rows in (("Per analyst", ANALYST_HEADERS, analyst_rows(report)),
                                 ("Answers", ENTRY_HEADERS, entry_rows(report))):
        if rows:
            lines += ["", f"## {title}", "", "| " + " | ".join(map(_md_text, headers)) + " |",
                      "|" + "---|" * len(headers)]
            sql_at = headers.index("SQL") if "SQL" in headers else -1
            lines += ["| " + " | ".join(_md_code(c) if i == sql_at else _md_text(c)
                                        for i, c in enumerate(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render_html(report: Report) -> str:
    """One self-contained page: inline CSS, the plot as a data URI, no scripts or links."""
    plot = base64.b64encode(plot_png(report)).decode("ascii")
    totals = "".join(f'<tr data-key="{key}"><th>{_h(label)}</th><td>{_h(value)}</td></tr>'
                     for key, label, value in totals_rows(report.totals))
    notes = "".join(f"<li>{_h(note)}</li>" for note in report.notes())
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "img-src data:; style-src 'unsafe-inline'\">",
        "<title>dpsql budget report</title>", f"<style>{_CSS}</style></head><body>",
        "<h1>dpsql budget report</h1>", f"<p class=\"heading\">{_h(_heading(report))}</p>",
        f"<h2>Totals (whole ledger)</h2><table id=\"totals\">{totals}</table>",
        f"<ul id=\"notes\">{notes}</ul>" if notes else "",
        "<h2>Cumulative spend</h2>",
        f"<img id=\"spend-plot\" alt=\"transcript level and sum of epsilon asked over time, with the "
        f"budget line\" src=\"data:image/png;base64,{plot}\">",
        _html_table("Per analyst", "analysts", ANALYST_HEADERS, analyst_rows(report)),
        _html_table("Answers", "entries", ENTRY_HEADERS, entry_rows(report, separator="\n")),
        "</body></html>\n",
    ]
    return "\n".join(part for part in parts if part)


def render_fragment(report: Report) -> str:
    """The page's heading, totals, notes and tables without the plot: an HTML fragment."""
    totals = "".join(f'<tr data-key="{key}"><th>{_h(label)}</th><td>{_h(value)}</td></tr>'
                     for key, label, value in totals_rows(report.totals))
    notes = "".join(f"<li>{_h(note)}</li>" for note in report.notes())
    parts = [f"<p>{_h(_heading(report))}</p>", f"<table>{totals}</table>",
             f"<ul>{notes}</ul>" if notes else "",
             _html_table("Per analyst", "analysts", ANALYST_HEADERS, analyst_rows(report)),
             _html_table("Answers", "entries", ENTRY_HEADERS, entry_rows(report))]
    return "\n".join(part for part in parts if part)


def _html_table(title: str, ident: str, headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{_h(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td><code>{_h(c)}</code></td>" if h == "SQL" else f"<td>{_h(c)}</td>"
                         for h, c in zip(headers, row, strict=True)) + "</tr>"
        for row in rows
    )
    return f"<h2>{_h(title)}</h2><table id=\"{ident}\"><thead><tr>{head}</tr></thead>" \
           f"<tbody>{body}</tbody></table>"


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:90em}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:0.3em 0.6em;text-align:left;vertical-align:top}"
    "thead th{background:#f0f3f8}#totals th{font-weight:normal}#totals td{text-align:right}"
    "code{white-space:pre-wrap;font-size:0.9em}#entries td:last-child{white-space:pre-line}"
    "img{max-width:100%;height:auto}"
    ".heading{color:#555}"
)

_MD_SPECIAL = frozenset("\\`*_[]<>|~&")


def _h(text: str) -> str:
    return html.escape(text, quote=True)


def _md_text(text: str) -> str:
    """Markdown text with inline-syntax characters escaped and lines joined."""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in " ".join(text.split()))


def _md_code(text: str) -> str:
    """A Markdown code span that survives any backticks or pipes in the text."""
    flat = " ".join(text.split()).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", flat)), default=0) + 1)
    return f"{fence} {flat} {fence}"
