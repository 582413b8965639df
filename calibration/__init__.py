"""Calibration: dependence model (k, eta), guarantee maps, composition and the exact audit.

Turns an analyst's information-privacy epsilon into the DP eps_dp that sets the noise,
for records that depend on each other within groups of at most k (THEORY.md).
"""

if __name__ == "calibration":  # imported from a checkout by the folder's own name
    from dpsql._checkout import alias

    alias(__name__)  # the very modules of dpsql.calibration, never second copies

from .audit import Audit, exact_audit
from .composition import admits, dp_budget, transcript_level
from .errors import CalibrationError
from .household import household_pmf
from .information import mutual_information_bound
from .inversion import Calibration, ModeOption, calibrate, compare_modes
from .maps import MODES, guarantee
from .model import DependenceModel

__all__ = [
    "MODES",
    "Audit",
    "Calibration",
    "CalibrationError",
    "DependenceModel",
    "ModeOption",
    "admits",
    "calibrate",
    "compare_modes",
    "dp_budget",
    "exact_audit",
    "guarantee",
    "household_pmf",
    "mutual_information_bound",
    "transcript_level",
]
