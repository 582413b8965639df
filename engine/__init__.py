"""dpsql engine: SQL in, private answers out (parse, plan, calibrate, rewrite, run, noise)."""

from .database import PrivateDatabase
from .errors import (
    AnswerFailed,
    BudgetExhausted,
    DpsqlError,
    InputError,
    LedgerError,
    PolicyError,
    QueryRefused,
)
from .policy import Policy, load_policy
from .report import Report, ReportTotals
from .result import AggregateInfo, BudgetStatus, Explanation, HistoryEntry, QueryResult

__all__ = [
    "AggregateInfo",
    "AnswerFailed",
    "BudgetExhausted",
    "BudgetStatus",
    "DpsqlError",
    "Explanation",
    "HistoryEntry",
    "InputError",
    "LedgerError",
    "Policy",
    "PolicyError",
    "PrivateDatabase",
    "QueryRefused",
    "QueryResult",
    "Report",
    "ReportTotals",
    "load_policy",
]
