"""Calibration: dependence model (k, eta), guarantee maps, composition and the exact audit.

Turns an analyst's information-privacy epsilon into the DP eps_dp that sets the noise,
for records that depend on each other within groups of at most k (docs/theory.md).
"""

from __future__ import annotations

from dpsql.lazy_names import first_use

# typing is not imported at run time (type checkers read the name TYPE_CHECKING as true).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from .audit import Audit, exact_audit, exact_audit_vector
    from .columns import Column, Factor, HouseholdColumns, column_set_eta
    from .composition import (
        admits,
        dp_budget,
        mode_dominates,
        only_residue,
        transcript_level,
        within_budget,
    )
    from .errors import CalibrationError
    from .household import household_pmf
    from .information import mutual_information_bound
    from .inversion import Calibration, ModeOption, calibrate, compare_modes
    from .maps import MODE_CHOICES, MODEL_BASE, MODEL_MODE, MODES, applies, guarantee
    from .model import DependenceModel
    from .model_exact import ModelCalibration, calibrate_chain, calibrate_household
    from .model_household import HouseholdModel
    from .model_markov import MarkovModel, markov_levels
    from .validation import (
        BUDGET_RANGE,
        EPSILON_RANGE,
        MAX_K,
        EpsilonOutOfRange,
        require_budget,
        require_epsilon,
    )

# Each public name is imported from its module on first use (PEP 562): a query process loads the
# modules its calibration needs, not the exact audit, the household and series models or the
# information bound (issue 26: a `dpsql query` process's start-up is most of its cost).
_HOMES = {
    **dict.fromkeys(("Audit", "exact_audit", "exact_audit_vector"), ".audit"),
    **dict.fromkeys(("Column", "Factor", "HouseholdColumns", "column_set_eta"), ".columns"),
    **dict.fromkeys(("admits", "dp_budget", "mode_dominates", "only_residue", "transcript_level",
                     "within_budget"), ".composition"),
    "CalibrationError": ".errors",
    "household_pmf": ".household",
    "mutual_information_bound": ".information",
    **dict.fromkeys(("Calibration", "ModeOption", "calibrate", "compare_modes"), ".inversion"),
    **dict.fromkeys(("MODE_CHOICES", "MODEL_BASE", "MODEL_MODE", "MODES", "applies", "guarantee"),
                    ".maps"),
    "DependenceModel": ".model",
    **dict.fromkeys(("ModelCalibration", "calibrate_chain", "calibrate_household"), ".model_exact"),
    "HouseholdModel": ".model_household",
    **dict.fromkeys(("MarkovModel", "markov_levels"), ".model_markov"),
    **dict.fromkeys(("BUDGET_RANGE", "EPSILON_RANGE", "MAX_K", "EpsilonOutOfRange", "require_budget",
                     "require_epsilon"), ".validation"),
}


__getattr__ = first_use(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "BUDGET_RANGE",
    "EPSILON_RANGE",
    "MAX_K",
    "MODES",
    "MODE_CHOICES",
    "MODEL_BASE",
    "MODEL_MODE",
    "Audit",
    "Calibration",
    "CalibrationError",
    "Column",
    "DependenceModel",
    "EpsilonOutOfRange",
    "Factor",
    "HouseholdColumns",
    "HouseholdModel",
    "MarkovModel",
    "ModeOption",
    "ModelCalibration",
    "admits",
    "applies",
    "calibrate",
    "calibrate_chain",
    "calibrate_household",
    "column_set_eta",
    "compare_modes",
    "dp_budget",
    "exact_audit",
    "exact_audit_vector",
    "guarantee",
    "household_pmf",
    "markov_levels",
    "mode_dominates",
    "mutual_information_bound",
    "only_residue",
    "require_budget",
    "require_epsilon",
    "transcript_level",
    "within_budget",
]
