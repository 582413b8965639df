"""dpsql engine: SQL in, private answers out (parse, plan, calibrate, rewrite, run, noise)."""

from .database import PrivateDatabase
from .errors import (
    AccessDenied,
    BudgetExhausted,
    DpsqlError,
    EngineHalted,
    InputError,
    LedgerError,
    PolicyError,
    QueryInterrupted,
    QueryRefused,
    QueryTooLarge,
    ResourceLimitExceeded,
)
from .policy import Policy, load_policy
from .report import Report, ReportTotals
from .result import AggregateInfo, BudgetStatus, Explanation, HistoryEntry, QueryResult

__all__ = [
    "AccessDenied",
    "AggregateInfo",
    "BudgetExhausted",
    "BudgetStatus",
    "DpsqlError",
    "EngineHalted",
    "Explanation",
    "HistoryEntry",
    "InputError",
    "LedgerError",
    "Policy",
    "PolicyError",
    "PrivateDatabase",
    "QueryInterrupted",
    "QueryRefused",
    "QueryResult",
    "QueryTooLarge",
    "Report",
    "ReportTotals",
    "ResourceLimitExceeded",
    "load_policy",
]
