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
    return within_budget(transcript_level(total, model, mode), budget)


def within_budget(level: float, ip_budget: float) -> bool:
    """Whether a transcript's IP level is within the budget, up to the float slack of sums:
    the one comparison that admission and reports both make."""
    return level <= ip_budget * (1.0 + ADMISSION_TOLERANCE)


def only_residue(room_dp: float, total_dp: float) -> bool:
    """Whether the DP room left of a DP budget `total_dp` is only float residue of spending
    it all (so nothing more can be admitted)."""
    return room_dp <= total_dp * ADMISSION_TOLERANCE


def mode_dominates(new: str, old: str, model: DependenceModel) -> bool:
    """True if the accounting map of mode `new` is >= that of `old` at every eps_dp >= 0.

    Then switching a ledger from `old` to `new` never counts past spending as less. The order
    (docs/theory.md §4): independent (eps) <= tight = auto <= group (k eps) and <= theorem2
    (ln 2 + max(eps, k eps - b)); theorem2 >= group everywhere only when b = -ln eta <= ln 2
    (eta >= 1/2) or k = 1, and group is never >= theorem2 near 0 (theorem2 starts at ln 2).
    Under an independent model (k = 1 or eta = 0) independent, tight and auto are one map.
    """
    same = {"auto", "tight"} | ({"independent"} if model.is_independent else set())
    if new == old or {new, old} <= same:
        return True
    if old == "independent" or old in same:
        return new in ("group", "theorem2") or new in same
    if (new, old) == ("theorem2", "group"):
        return model.eta >= 0.5 or model.k == 1
    return False

