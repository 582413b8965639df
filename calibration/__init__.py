"""Calibration: dependence model (k, eta), guarantee maps, composition and the exact audit.

Turns an analyst's information-privacy epsilon into the DP eps_dp that sets the noise,
for records that depend on each other within groups of at most k (docs/theory.md).
"""

from calibration.audit import Audit, exact_audit, exact_audit_vector
from calibration.composition import admits, dp_budget, transcript_level
from calibration.errors import CalibrationError
from calibration.household import household_pmf
from calibration.information import mutual_information_bound
from calibration.inversion import Calibration, ModeOption, calibrate, compare_modes
from calibration.maps import MODES, guarantee
from calibration.model import DependenceModel
from calibration.validation import (
    BUDGET_RANGE,
    EPSILON_RANGE,
    MAX_K,
    EpsilonOutOfRange,
    require_budget,
    require_epsilon,
)

__all__ = [
    "BUDGET_RANGE",
    "EPSILON_RANGE",
    "MAX_K",
    "MODES",
    "Audit",
    "Calibration",
    "CalibrationError",
    "DependenceModel",
    "EpsilonOutOfRange",
    "ModeOption",
    "admits",
    "calibrate",
    "compare_modes",
    "dp_budget",
    "exact_audit",
    "exact_audit_vector",
    "guarantee",
    "household_pmf",
    "mutual_information_bound",
    "require_budget",
    "require_epsilon",
    "transcript_level",
]
