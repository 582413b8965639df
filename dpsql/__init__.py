"""dpsql: differentially private SQL on DuckDB for dependent records (the public Python API).

The installed package is `dpsql`, with the engine as `dpsql.engine` and the calibration layer as
`dpsql.calibration` (the repository's `engine/` and `calibration/` folders). In a checkout the
folders' own names `engine` and `calibration` still import, as the very same modules.
"""

from pathlib import Path

__version__ = "0.1.0"

_here = Path(__file__).resolve().parent
if not (_here / "engine").is_dir() and (_here.parent / "engine" / "__init__.py").is_file():
    # A checkout that is not installed (or installed in compat mode): the engine and calibration
    # folders sit beside this one, so look for the subpackages there too.
    __path__.append(str(_here.parent))

from .calibration import (  # noqa: E402
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
from .engine import (  # noqa: E402
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
from .engine.service import connect  # noqa: E402

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
