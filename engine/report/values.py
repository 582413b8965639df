"""A budget report's values (totals, per-analyst subtotals, the answers) and the text cells
each shows as, with the HTML fragment Jupyter displays; engine/report/build.py computes them
from a ledger, engine/report/render.py lays them out for a terminal, Markdown or a page.

Answers compose in DP space (docs/theory.md §7): the transcript's information-privacy
level is L(sum of epsilon_dp), never the sum of per-answer levels, and the budget
counts only that global level.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from datetime import datetime

import pandas as pd

from ...calibration import within_budget
from ..display import number, visible
from ..result import from_clause
from .ledger import LedgerAnswer

LEVELS_DO_NOT_ADD = (
    "An analyst's own level is L of that analyst's DP spending; levels do not add up, so the "
    "budget counts only the level of the whole transcript."
)


@dataclass(frozen=True)
class ReportTotals:
    """The whole ledger's spending in DP and information-privacy terms."""

    answers: int
    budget: float  # the policy's information-privacy (IP) budget B
    k: int
    eta: float  # the transcript's eta: that of the union of the columns its answers read
    mode: str  # the policy's mode: its map L accounts for the transcript
    epsilon_asked: float  # sum of the per-answer IP levels analysts asked for
    spent_dp: float  # sum of epsilon_dp: the transcript is one spent_dp-DP mechanism
    transcript_level: float  # L(spent_dp): the transcript's IP level under (k, eta)
    information_nats: float  # bound on I(X_i; Y) implied by the transcript level
    information_bits: float
    remaining: float  # B - transcript_level
    dp_budget: float  # L^-1(B): the most DP level the whole transcript may spend
    remaining_dp: float  # dp_budget - spent_dp
    # The largest epsilon any query reading only columns already read can still ask.
    largest_epsilon: float
    difference: str | None  # why epsilon_asked and transcript_level differ, when they do
    eta_from: str = ""  # the policy declaration the transcript's eta comes from


@dataclass(frozen=True)
class AnalystTotals:
    """One analyst's share of the spending."""

    analyst: str
    answers: int
    epsilon_asked: float
    spent_dp: float
    own_level: float  # L(this analyst's spent_dp); not a share of the budget
    share_dp: float  # fraction of the ledger's spent_dp


@dataclass(frozen=True)
class Report:
    """A ledger's answers, totals and per-analyst subtotals, optionally showing one analyst."""

    ledger: str
    generated: datetime
    analyst: str | None  # when set, entries and subtotals show only this analyst
    answers: tuple[LedgerAnswer, ...]  # every answer, in ledger order
    cumulative_dp: tuple[float, ...]  # the ledger's spent_dp after each answer
    levels: tuple[float, ...]  # the transcript level after each answer
    totals: ReportTotals
    subtotals: tuple[AnalystTotals, ...]

    @property
    def shown(self) -> tuple[int, ...]:
        """Positions in `answers` of the answers this report shows."""
        return tuple(i for i, a in enumerate(self.answers)
                     if self.analyst is None or a.analyst == self.analyst)

    @property
    def entries(self) -> pd.DataFrame:
        """One row per shown answer; aggregates as readable text; the global level after it."""
        rows = [self._entry(i, "; ".join(a.describe() for a in self.answers[i].aggregates))
                for i in self.shown]
        frame = pd.DataFrame(rows, columns=ENTRY_COLUMNS)
        frame["time"] = pd.to_datetime(frame["time"], utc=True)
        return frame

    @property
    def analysts(self) -> pd.DataFrame:
        """Per-analyst subtotals (only the selected analyst when filtered)."""
        rows = [asdict(s) for s in self.subtotals if self.analyst in (None, s.analyst)]
        return pd.DataFrame(rows, columns=ANALYST_COLUMNS)

    def notes(self) -> tuple[str, ...]:
        """Plain sentences a reader needs to interpret the numbers."""
        notes = []
        if not self.answers:
            notes.append("The ledger has no answers yet: nothing has been spent.")
        if self.analyst is not None:
            known = ", ".join(s.analyst for s in self.subtotals) or "none"
            notes.append(
                f"Showing only the {len(self.shown)} answer(s) of analyst {self.analyst} out of "
                f"{len(self.answers)} (analysts in this ledger: {known}); the totals are for the "
                "whole ledger, which is what the budget counts."
            )
        t = self.totals
        if not within_budget(t.transcript_level, t.budget):
            notes.append(f"The transcript's level {t.transcript_level:.4g} is over the budget of "
                         f"{t.budget:g}: the ledger holds more spending than the accountant "
                         "admits, so no further answer can be admitted.")
        if t.difference:
            notes.append(t.difference)
        if self.subtotals:
            notes.append(LEVELS_DO_NOT_ADD)
        return tuple(notes)

    def _repr_html_(self) -> str:
        """Jupyter's view: the report's tables (`render_html` makes the whole page, with the plot)."""
        return render_fragment(self)

    def to_dict(self) -> dict:
        """JSON-ready form whose keys do not depend on the ledger's contents."""
        return {
            "ledger": self.ledger,
            "generated": self.generated.isoformat(),
            "analyst": self.analyst,
            "totals": asdict(self.totals),
            "analysts": [asdict(s) for s in self.subtotals if self.analyst in (None, s.analyst)],
            "entries": [
                {**self._entry(i, [asdict(a) for a in self.answers[i].aggregates]),
                 "time": self.answers[i].time.isoformat()}
                for i in self.shown
            ],
            "notes": list(self.notes()),
        }

    def _entry(self, i: int, aggregates: object) -> dict:
        """The i-th answer with the ledger's cumulative spending and level after it."""
        answer = self.answers[i]
        return {
            "id": answer.id, "time": answer.time, "analyst": answer.analyst, "sql": answer.sql,
            "epsilon": answer.cost.epsilon, "epsilon_dp": answer.cost.epsilon_dp,
            "mode": answer.cost.mode, "k": answer.cost.k, "eta": answer.cost.eta,
            "columns_read": names_read(answer.columns), "aggregates": aggregates,
            "cumulative_epsilon_dp": self.cumulative_dp[i], "transcript_level": self.levels[i],
        }


ENTRY_COLUMNS = ["id", "time", "analyst", "sql", "epsilon", "epsilon_dp", "mode", "k", "eta",
                 "columns_read", "aggregates", "cumulative_epsilon_dp", "transcript_level"]
EVERY_COLUMN = "(every column: recorded before ledgers kept the columns read)"


def names_read(columns: frozenset[str] | None) -> str:
    """The columns an answer read, as a report shows them."""
    return EVERY_COLUMN if columns is None else ", ".join(sorted(columns)) or "(none)"
ANALYST_COLUMNS = ["analyst", "answers", "epsilon_asked", "spent_dp", "own_level", "share_dp"]


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


def heading(report: Report) -> str:
    t = report.totals
    return (f"Ledger {report.ledger}, generated {report.generated:%Y-%m-%d %H:%M:%S} UTC; "
            f"policy budget {number(t.budget)}, dependence model k={t.k}, η={number(t.eta)}, "
            f"accounted with mode {t.mode}.")


def render_fragment(report: Report) -> str:
    """The page's heading, totals, notes and tables without the plot: an HTML fragment."""
    totals = "".join(f'<tr data-key="{key}"><th>{escape(label)}</th><td>{escape(value)}</td></tr>'
                     for key, label, value in totals_rows(report.totals))
    notes = "".join(f"<li>{escape(note)}</li>" for note in report.notes())
    parts = [f"<p>{escape(heading(report))}</p>", f"<table>{totals}</table>",
             f"<ul>{notes}</ul>" if notes else "",
             html_section("Per analyst", "analysts", ANALYST_HEADERS, analyst_rows(report)),
             html_section("Answers", "entries", ENTRY_HEADERS, entry_rows(report))]
    return "\n".join(part for part in parts if part)


def html_section(title: str, ident: str, headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A titled HTML table of text cells (the SQL as code), every cell escaped; "" without rows."""
    if not rows:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td><code>{escape(c)}</code></td>" if h == "SQL" else f"<td>{escape(c)}</td>"
                         for h, c in zip(headers, row, strict=True)) + "</tr>"
        for row in rows
    )
    return f"<h2>{escape(title)}</h2><table id=\"{ident}\"><thead><tr>{head}</tr></thead>" \
           f"<tbody>{body}</tbody></table>"


def escape(text: str) -> str:
    """Text as HTML, quotes included."""
    return html.escape(text, quote=True)
