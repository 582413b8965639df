"""What a workload returns: one answer per statement in the shape of a single answer, the
strategy that measured them and the one charge they cost; and its explanation."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from .result import AggregateInfo, BudgetStatus, _json_ready


@dataclass(frozen=True)
class WorkloadAnswer:
    """One statement's answer: values, 95% half-widths per cell and for all its cells at once,
    and how it was answered (by the workload's least squares, or alone and why)."""

    sql: str
    df: pd.DataFrame
    ci95: pd.DataFrame
    ci95_simultaneous: pd.DataFrame
    answered: str  # "least squares from the workload's strategy" or "alone: <why>"
    epsilon_dp: float  # the share of the workload's epsilon_dp this answer's noise used
    aggregates: tuple[AggregateInfo, ...]

    def to_dict(self) -> dict:
        return {
            "sql": self.sql,
            "columns": [str(c) for c in self.df.columns],
            "rows": self.df.to_numpy(dtype=object).tolist(),
            "ci95": self.ci95.to_numpy(dtype=object).tolist(),
            "ci95_simultaneous": self.ci95_simultaneous.to_numpy(dtype=object).tolist(),
            "answered": self.answered,
            "epsilon_dp": self.epsilon_dp,
            "aggregates": [asdict(a) for a in self.aggregates],
        }

    @classmethod
    def from_dict(cls, d: dict) -> WorkloadAnswer:
        """Rebuild an answer from its JSON form (as the service sends it)."""
        columns = d["columns"]
        return cls(sql=d["sql"], df=pd.DataFrame(d["rows"], columns=columns),
                   ci95=pd.DataFrame(d["ci95"], columns=columns, dtype=float),
                   ci95_simultaneous=pd.DataFrame(d["ci95_simultaneous"], columns=columns,
                                                  dtype=float),
                   answered=d["answered"], epsilon_dp=d["epsilon_dp"],
                   aggregates=tuple(AggregateInfo(**a) for a in d["aggregates"]))


@dataclass(frozen=True)
class WorkloadResult:
    """Every statement's answer and the workload's one charge."""

    answers: tuple[WorkloadAnswer, ...]
    strategy: str  # the strategy measured, in words ("" when every statement was alone)
    sensitivity: float  # the strategy measurement's L1 sensitivity
    epsilon: float
    epsilon_dp: float
    mode: str
    k: int
    eta: float
    budget: BudgetStatus
    level_before: float
    level_after: float
    cost: float
    columns_read: tuple[str, ...] = ()
    id: int | None = None

    def to_dict(self) -> dict:
        """The JSON form: one answer per statement, then the workload's total cost."""
        return _json_ready({
            "answers": [a.to_dict() for a in self.answers],
            "strategy": self.strategy,
            "sensitivity": self.sensitivity,
            "epsilon": self.epsilon,
            "epsilon_dp": self.epsilon_dp,
            "mode": self.mode,
            "k": self.k,
            "eta": self.eta,
            "columns_read": list(self.columns_read),
            "cost": self.cost,
            "transcript_level_before": self.level_before,
            "transcript_level_after": self.level_after,
            "budget": asdict(self.budget),
            "id": self.id,
        })

    @classmethod
    def from_dict(cls, d: dict, id: int | None = None) -> WorkloadResult:
        """Rebuild a workload's result from its JSON form (as the service sends it)."""
        return cls(answers=tuple(WorkloadAnswer.from_dict(a) for a in d["answers"]),
                   strategy=d["strategy"], sensitivity=d["sensitivity"], epsilon=d["epsilon"],
                   epsilon_dp=d["epsilon_dp"], mode=d["mode"], k=d["k"], eta=d["eta"],
                   budget=BudgetStatus(**d["budget"]), level_before=d["transcript_level_before"],
                   level_after=d["transcript_level_after"], cost=d["cost"],
                   columns_read=tuple(d["columns_read"]), id=d["id"] if id is None else id)


@dataclass(frozen=True)
class QueryError:
    """One statement's expected per-cell error in the workload against asked alone."""

    sql: str
    answered: str
    rmse_workload: float  # root mean squared error per cell, in the workload
    rmse_separate: float  # the same, asked alone at epsilon / (number of statements)


ADMITTED_LIMIT = 1000  # an explanation counts the workloads the budget admits up to this


@dataclass(frozen=True)
class WorkloadExplanation:
    """The strategy, each statement's expected error against asking them separately, and the
    cost; computed without reading data."""

    strategy: str
    candidates: tuple[tuple[str, float], ...]  # each strategy's per-cell RMSE (whole workload)
    sensitivity: float
    errors: tuple[QueryError, ...]
    epsilon: float
    epsilon_dp: float
    mode: str
    k: int
    eta: float
    level_before: float
    level_after: float
    cost: float
    admissible: bool
    # How many workloads like this one the budget left admits in a row, this one included (each
    # priced on the books the ones before it would leave); at most ADMITTED_LIMIT is counted.
    admitted: int = 0

    def to_dict(self) -> dict:
        return _json_ready(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> WorkloadExplanation:
        """Rebuild an explanation from its JSON form (as the service sends it)."""
        return cls(**{**d, "candidates": tuple((name, rmse) for name, rmse in d["candidates"]),
                      "errors": tuple(QueryError(**e) for e in d["errors"])})
