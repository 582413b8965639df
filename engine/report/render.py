"""Render a budget Report as a terminal table (rich), Markdown, or one self-contained HTML page.

Analysts' SQL and names are untrusted text: they are never interpreted as rich markup,
are escaped for Markdown, and go through html.escape in the page.
"""

from __future__ import annotations

import base64
import io
import re

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .plot import plot_png
from .values import (
    AGGREGATE_HEADERS,
    ANALYST_HEADERS,
    ENTRY_HEADERS,
    Report,
    aggregate_rows,
    analyst_rows,
    entry_rows,
    escape,
    heading,
    html_section,
    totals_rows,
)


def render_table(report: Report, width: int = 120) -> str:
    """Plain-text tables for a terminal or a text file; at 80 columns they wrap between words."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False)
    console.print(Text("dpsql budget report"), Text(heading(report)), sep="\n")
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
    lines = ["# dpsql budget report", "", _md_text(heading(report)), "", "## Totals (whole ledger)",
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
    totals = "".join(f'<tr data-key="{key}"><th>{escape(label)}</th><td>{escape(value)}</td></tr>'
                     for key, label, value in totals_rows(report.totals))
    notes = "".join(f"<li>{escape(note)}</li>" for note in report.notes())
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "img-src data:; style-src 'unsafe-inline'\">",
        "<title>dpsql budget report</title>", f"<style>{_CSS}</style></head><body>",
        "<h1>dpsql budget report</h1>", f"<p class=\"heading\">{escape(heading(report))}</p>",
        f"<h2>Totals (whole ledger)</h2><table id=\"totals\">{totals}</table>",
        f"<ul id=\"notes\">{notes}</ul>" if notes else "",
        "<h2>Cumulative spend</h2>",
        f"<img id=\"spend-plot\" alt=\"transcript level and sum of epsilon asked over time, with the "
        f"budget line\" src=\"data:image/png;base64,{plot}\">",
        html_section("Per analyst", "analysts", ANALYST_HEADERS, analyst_rows(report)),
        html_section("Answers", "entries", ENTRY_HEADERS, entry_rows(report, separator="\n")),
        "</body></html>\n",
    ]
    return "\n".join(part for part in parts if part)


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


def _md_text(text: str) -> str:
    """Markdown text with inline-syntax characters escaped and lines joined."""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in " ".join(text.split()))


def _md_code(text: str) -> str:
    """A Markdown code span that survives any backticks or pipes in the text."""
    flat = " ".join(text.split()).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", flat)), default=0) + 1)
    return f"{fence} {flat} {fence}"
