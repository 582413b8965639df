"""Typed values returned to users: query results, explanations, budget status and history."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd


@dataclass(frozen=True)
class BudgetStatus:
    """The ledger's state in information-privacy (IP) and DP terms."""

    total: float  # the policy's IP budget
    spent_ip: float  # transcript level L(spent_dp) under the policy's dependence model
    spent_dp: float  # sum of epsilon_dp of every released answer
    remaining: float  # total - spent_ip: headroom of the level, NOT an epsilon one can ask
    remaining_dp: float  # the DP epsilon still admissible: L^-1(total) - spent_dp
    largest_epsilon: float  # the largest epsilon a query can still ask: L(L^-1(total) - spent_dp)
    mode: str  # the policy's mode, whose map L accounts for the transcript


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
    cost: float  # how much this answer raised the transcript level: level_after - level_before
    id: int | None = None  # the ledger entry holding this answer (`history(id)` fetches it again)

    def to_dict(self) -> dict:
        """The JSON form documented in DESIGN.md; every value is plain JSON (non-finite
        numbers and missing values become null), so encoding it cannot fail."""
        return _json_ready({
            "sql": self.sql,
            "columns": [str(c) for c in self.df.columns],
            "rows": [list(row) for row in self.df.itertuples(index=False)],
            "ci95": [list(row) for row in self.ci95.itertuples(index=False)],
            "epsilon": self.epsilon,
            "epsilon_dp": self.epsilon_dp,
            "mode": self.mode,
            "k": self.k,
            "eta": self.eta,
            "cost": self.cost,
            "transcript_level_before": self.level_before,
            "transcript_level_after": self.level_after,
            "aggregates": [asdict(a) for a in self.aggregates],
            "budget": asdict(self.budget),
        })

    @classmethod
    def from_dict(cls, answer: dict, id: int | None = None) -> QueryResult:
        """Rebuild a result from its stored JSON form (as `history` returns it)."""
        columns = answer["columns"]
        ci95 = pd.DataFrame(answer["ci95"], columns=columns, dtype=float)
        return cls(
            df=pd.DataFrame(answer["rows"], columns=columns), ci95=ci95, sql=answer["sql"],
            epsilon=answer["epsilon"], epsilon_dp=answer["epsilon_dp"], mode=answer["mode"],
            k=answer["k"], eta=answer["eta"],
            aggregates=tuple(AggregateInfo(**a) for a in answer["aggregates"]),
            budget=BudgetStatus(**answer["budget"]), level_before=answer["transcript_level_before"],
            level_after=answer["transcript_level_after"], cost=answer["cost"], id=id,
        )


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
    cost: float  # how much the answer would raise the transcript level, at today's spending
    admissible: bool

    def to_dict(self) -> dict:
        out = asdict(self)
        out["aggregates"] = [asdict(a) for a in self.aggregates]
        return _json_ready(out)


def _json_ready(value):
    """Plain JSON values all the way down: numpy scalars to Python, NaN, ±inf and missing
    values (None, pandas NA/NaT) to None, other objects to their text."""
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)):
        return value
    return str(value)
