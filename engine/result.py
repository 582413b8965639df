"""Typed values returned to users: query results, explanations and budget status."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from .display import cell, html_paragraphs, html_table, number


@dataclass(frozen=True)
class BudgetStatus:
    """The ledger's state in information-privacy (IP) and DP terms."""

    total: float  # the policy's IP budget
    spent_ip: float  # transcript level L(spent_dp) under the policy's dependence model
    spent_dp: float  # sum of epsilon_dp of every released answer
    remaining: float  # total - spent_ip
    remaining_dp: float  # the DP epsilon still admissible: L^-1(total) - spent_dp


@dataclass(frozen=True)
class AggregateInfo:
    """How one noisy quantity was produced."""

    column: str  # the output column (or, for a hidden HAVING/ORDER BY aggregate, its label)
    function: str  # COUNT, SUM or COUNT(DISTINCT unit)
    mechanism: str  # discrete_laplace or laplace
    sensitivity: float
    epsilon_dp: float  # this aggregate's share of the query's epsilon_dp
    scale: float
    ci95_halfwidth: float


@dataclass(frozen=True)
class QueryResult:
    """A private answer: the noisy table, its 95% intervals and what it cost."""

    df: pd.DataFrame
    ci95: pd.DataFrame  # per-cell 95% half-widths (NaN where none applies)
    # Half-widths holding for every group of a column at once with probability >= 95%, so
    # also for rows chosen by their noisy values.
    ci95_simultaneous: pd.DataFrame
    # False when HAVING or ORDER BY used a noisy value: ci95 is then the interval before
    # selection and under-covers the rows shown; ci95_simultaneous stays valid.
    selection_adjusted: bool
    sql: str
    epsilon: float
    epsilon_dp: float
    mode: str
    k: int
    eta: float
    aggregates: tuple[AggregateInfo, ...]
    budget: BudgetStatus
    level_before: float
    level_after: float

    def to_dict(self) -> dict:
        """The JSON form documented in DESIGN.md."""
        return {
            "sql": self.sql,
            "columns": list(self.df.columns),
            "rows": [[_plain(v) for v in row] for row in self.df.itertuples(index=False)],
            "ci95": [[_plain(v) for v in row] for row in self.ci95.itertuples(index=False)],
            "ci95_simultaneous": [[_plain(v) for v in row]
                                  for row in self.ci95_simultaneous.itertuples(index=False)],
            "selection_adjusted": self.selection_adjusted,
            "epsilon": self.epsilon,
            "epsilon_dp": self.epsilon_dp,
            "mode": self.mode,
            "k": self.k,
            "eta": self.eta,
            "transcript_level_before": self.level_before,
            "transcript_level_after": self.level_after,
            "aggregates": [asdict(a) for a in self.aggregates],
            "budget": asdict(self.budget),
        }

    def shown_intervals(self) -> tuple[pd.DataFrame, str]:
        """The half-widths a display prints beside the values, and the line saying what they
        are: per cell, or simultaneous when rows were chosen by noise (the per-cell ones would
        then under-cover exactly the rows shown)."""
        if self.selection_adjusted:
            return self.ci95, "± is the 95% interval half-width of the noise."
        return self.ci95_simultaneous, (
            "± holds for all groups at once with 95% probability (simultaneous): rows were "
            "chosen or ordered by noisy values, so the per-cell interval would under-cover them."
        )

    def _repr_html_(self) -> str:
        """Jupyter's view: the answer as a table of `value ± ci` cells, then what it cost."""
        intervals, note = self.shown_intervals()
        rows = [[cell(v, c) for v, c in zip(row, ci, strict=True)]
                for row, ci in zip(self.df.itertuples(index=False), intervals.itertuples(index=False),
                                   strict=True)]
        b = self.budget
        return html_table([str(c) for c in self.df.columns], rows, caption=self.sql) + html_paragraphs(
            note,
            f"epsilon {number(self.epsilon)} (information privacy under k={self.k}, "
            f"eta={number(self.eta)}) -> epsilon_dp {number(self.epsilon_dp)} via the {self.mode} bound",
            f"budget: transcript level {number(b.spent_ip)} of {number(b.total)} (was "
            f"{number(self.level_before)}); remaining {number(b.remaining)}",
        )


@dataclass(frozen=True)
class Explanation:
    """What a query would do and cost, computed without touching the data or the budget."""

    sql: str
    table: str
    privacy_unit: str | None
    max_rows_per_unit: int
    group_by: tuple[str, ...]
    groups: int
    rewritten_sql: str
    epsilon: float
    epsilon_dp: float
    mode: str
    justification: str
    k: int
    eta: float
    aggregates: tuple[AggregateInfo, ...]
    budget: BudgetStatus
    level_before: float
    level_after: float
    admissible: bool

    def to_dict(self) -> dict:
        out = asdict(self)
        out["aggregates"] = [asdict(a) for a in self.aggregates]
        return out

    def _repr_html_(self) -> str:
        """Jupyter's view: the noise of each aggregate as a table, the cost and the SQL run."""
        rows = [[a.column, a.function, a.mechanism, number(a.sensitivity), number(a.epsilon_dp),
                 number(a.scale), f"±{number(a.ci95_halfwidth)}"] for a in self.aggregates]
        headers = ["output", "aggregate", "mechanism", "sensitivity", "epsilon_dp", "scale",
                   "expected 95% error"]
        verdict = "admissible" if self.admissible else "would be REFUSED"
        return html_paragraphs(
            f"epsilon {number(self.epsilon)} -> epsilon_dp {number(self.epsilon_dp)} via {self.mode} "
            f"({self.justification}); k={self.k}, eta={number(self.eta)}",
        ) + html_table(headers, rows, caption=self.sql) + html_paragraphs(
            f"transcript level {number(self.level_before)} -> {number(self.level_after)} of budget "
            f"{number(self.budget.total)}: {verdict}",
            f"rewritten SQL: {self.rewritten_sql}",
        )


def _plain(value):
    """JSON-friendly cell: numpy scalars to Python, NaN and ±inf to None (JSON has neither)."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
