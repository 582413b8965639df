"""dpsql engine: SQL in, private answers out (parse, plan, calibrate, rewrite, run, noise)."""

from __future__ import annotations

from dpsql.lazy_names import first_use

# typing is not imported at run time: `dpsql --version` loads this module and nothing heavier
# (type checkers read the name TYPE_CHECKING as true).
TYPE_CHECKING = False

if TYPE_CHECKING:
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
    from .policy import Policy
    from .policy_yaml import load_policy
    from .report.values import Report, ReportTotals
    from .result import AggregateInfo, BudgetStatus, Explanation, HistoryEntry, QueryResult

# Imported from their modules on first use (PEP 562): importing any part of the engine (the
# command line's entry point among them) does not load numpy, DuckDB, pandas and OpenDP with it.
_HOMES = {
    "PrivateDatabase": ".database", "Policy": ".policy", "load_policy": ".policy_yaml",
    "Report": ".report.values", "ReportTotals": ".report.values",
    **dict.fromkeys(("AccessDenied", "BudgetExhausted", "DpsqlError", "EngineHalted", "InputError",
                     "LedgerError", "PolicyError", "QueryInterrupted", "QueryRefused", "QueryTooLarge",
                     "ResourceLimitExceeded"), ".errors"),
    **dict.fromkeys(("AggregateInfo", "BudgetStatus", "Explanation", "HistoryEntry",
                     "QueryResult"), ".result"),
}


__getattr__ = first_use(__name__, globals(), _HOMES)


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
