"""Transcripts and budgets (Corollary 4): compose in DP space, then convert with L."""

from __future__ import annotations

import math

from .inversion import calibrate_checked
from .maps import AUTO, guarantee, require_mode, require_model
from .model import DependenceModel
from .validation import require_budget, require_nonnegative

ADMISSION_TOLERANCE = 1e-12
"""Relative slack on the IP budget in admits(): absorbs float rounding of sums, nothing more."""


def transcript_level(total_dp: float, model: DependenceModel, mode: str = AUTO) -> float:
    """IP level of a transcript whose DP levels sum to total_dp: L(total_dp), never sum of L.

    Basic composition (Lemma 1) makes the transcript one total_dp-DP mechanism, so the
    mode's map applies to the sum. An empty transcript (total_dp = 0) reveals nothing: 0.
    A level beyond the float range is reported as inf, which no budget admits.
    """
    total = require_nonnegative("total_dp", total_dp)
    level = guarantee(mode, total, model)
    return 0.0 if total == 0.0 else level


def dp_budget(ip_budget: float, model: DependenceModel, mode: str = AUTO) -> float:
    """S_max = L^-1(ip_budget): the most DP level a whole transcript may spend (private side).

    ip_budget is a total, so it must lie in BUDGET_RANGE (calibration.validation).
    """
    requested = require_mode(mode)
    budget = require_budget("ip_budget", ip_budget)
    return calibrate_checked(budget, require_model(model), requested).epsilon_dp


def admits(
    spent_dp: float, new_dp: float, ip_budget: float, model: DependenceModel, mode: str = AUTO
) -> bool:
    """True if adding a new_dp answer keeps the transcript within ip_budget: the admission test.

    Prefer it to comparing spent_dp + new_dp with dp_budget(ip_budget) by hand: it applies
    the same map that reports the transcript's level, so admission and report cannot
    disagree.

    Checks transcript_level(spent_dp + new_dp) <= ip_budget * (1 + 1e-12): the relative
    slack only absorbs the rounding of float sums of eps_dp (a query calibrated to spend
    exactly the remaining budget must not be refused by a last-bit error).
    """
    spent = require_nonnegative("spent_dp", spent_dp)
    new = require_nonnegative("new_dp", new_dp)
    budget = require_budget("ip_budget", ip_budget)
    require_mode(mode)
    require_model(model)
    total = spent + new
    if math.isinf(total):  # two finite totals whose sum overflows: far over any budget
        return False
    return transcript_level(total, model, mode) <= budget * (1.0 + ADMISSION_TOLERANCE)
