"""dpsql: differentially private SQL on DuckDB for dependent records (the public Python API).

The installed package is `dpsql`, with the engine as `dpsql.engine` and the calibration layer as
`dpsql.calibration` (packaging maps the repository's `engine/` and `calibration/` folders to
those names; they have no other import name).
"""

from __future__ import annotations

__version__ = "0.1.0"

from .lazy_names import first_use

# typing is not imported at run time: `dpsql --version` loads this module and nothing heavier
# (type checkers read the name TYPE_CHECKING as true).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from .calibration import (
        MODES,
        Audit,
        Calibration,
        CalibrationError,
        DependenceModel,
        ModeOption,
        admits,
        calibrate,
        compare_modes,
        dp_budget,
        exact_audit,
        exact_audit_vector,
        guarantee,
        household_pmf,
        mutual_information_bound,
        transcript_level,
    )
    from .engine import (
        AccessDenied,
        AggregateInfo,
        BudgetExhausted,
        BudgetStatus,
        DpsqlError,
        EngineHalted,
        Explanation,
        InputError,
        LedgerError,
        Policy,
        PolicyError,
        PrivateDatabase,
        QueryRefused,
        QueryResult,
        Report,
        ReportTotals,
        load_policy,
    )
    from .engine.service import connect

# Each public name is imported from its module on first use (PEP 562), so that `dpsql --version`
# and other light commands do not load DuckDB, pandas and OpenDP.
_HOMES = {
    **dict.fromkeys(("MODES", "Audit", "Calibration", "CalibrationError", "DependenceModel",
                     "ModeOption", "admits", "calibrate", "compare_modes", "dp_budget",
                     "exact_audit", "exact_audit_vector", "guarantee", "household_pmf",
                     "mutual_information_bound", "transcript_level"), ".calibration"),
    **dict.fromkeys(("AccessDenied", "AggregateInfo", "BudgetExhausted", "BudgetStatus",
                     "DpsqlError", "EngineHalted", "Explanation", "InputError", "LedgerError",
                     "Policy", "PolicyError", "PrivateDatabase", "QueryRefused", "QueryResult",
                     "Report", "ReportTotals", "load_policy"), ".engine"),
    "connect": ".engine.service",
    "engine": ".engine",
    "calibration": ".calibration",
}


__getattr__ = first_use(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "MODES",
    "AccessDenied",
    "AggregateInfo",
    "Audit",
    "BudgetExhausted",
    "BudgetStatus",
    "Calibration",
    "CalibrationError",
    "DependenceModel",
    "DpsqlError",
    "EngineHalted",
    "Explanation",
    "InputError",
    "LedgerError",
    "ModeOption",
    "Policy",
    "PolicyError",
    "PrivateDatabase",
    "QueryRefused",
    "QueryResult",
    "Report",
    "ReportTotals",
    "__version__",
    "admits",
    "calibrate",
    "compare_modes",
    "connect",
    "dp_budget",
    "exact_audit",
    "exact_audit_vector",
    "guarantee",
    "household_pmf",
    "load_policy",
    "mutual_information_bound",
    "transcript_level",
]
