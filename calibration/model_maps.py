"""Query-agnostic guarantee maps of declared models, and the capped calibration that uses them.

A map `L(spend)` bounds the IP level of EVERY transcript of answers covered by the model
(docs/theory.md §14, "Model maps"; §21 for the Gaussian household model, whose map covers
transcripts of plain SUMs of its column only): for a binary household column it is the level of a noisy
COUNT of the column's 1s at eps_dp = S (the worst eps_dp-DP mechanism on the column); for a
chain it is the largest per-record level of `markov_levels` at the per-time-point spending,
or of `series_levels` once an answer read several time points together.

A model never replaces the tight map: an answer's eps_dp and a transcript's DP budget are the
larger of the tight map's and the model's, the model's never above `cap` times the tight
map's, so a prior that makes little noise look private cannot remove the noise.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from .model_exact import largest_within, rho_grid
from .model_gaussian import GaussianHousehold, gaussian_level, group_level
from .model_household import HouseholdModel, household_level
from .model_markov import MarkovModel, markov_levels
from .model_series import pair_bounds, series_levels

CACHE_SIZE = 4096
"""Model levels kept per process (one float each), so repeated admissions are free."""


@lru_cache(maxsize=CACHE_SIZE)
def household_column_level(model: HouseholdModel, total_dp: float) -> float:
    """L(S) of a binary household column: the worst level over the rho grid of a COUNT of the
    column's 1s with geometric noise of rate S, which dominates every S-DP mechanism on the
    column (docs/theory.md §14). 0 for an empty transcript."""
    if total_dp == 0.0:
        return 0.0
    return max(household_level(model, rho, (0, 1), total_dp) for rho in rho_grid(model))


@lru_cache(maxsize=CACHE_SIZE)
def gaussian_column_level(model: GaussianHousehold, total_dp: float) -> float:
    """L(S) of a Gaussian household column: min(L_G(S), m S) for a transcript of plain SUMs of
    the column and answers reading no column (docs/theory.md §21). 0 for an empty transcript."""
    if total_dp == 0.0:
        return 0.0
    return min(gaussian_level(model, total_dp), group_level(model, total_dp))


@lru_cache(maxsize=CACHE_SIZE)
def chain_level(model: MarkovModel, spend: tuple[float, ...]) -> float:
    """L(E) of a chain: the largest record level when time point t's answers spent E_t."""
    if not any(spend):
        return 0.0
    return float(markov_levels(model, list(spend)).max())


def capped_inverse(level: Callable[[float], float], target: float, tight_dp: float,
                   cap: float) -> float:
    """The largest eps_dp with min(L_tight, L_model) <= target, where the model counts only up
    to cap * tight_dp (tight_dp = L_tight^-1(target)): never below tight_dp, never above
    cap * tight_dp, so never infinite and never zero when tight_dp is not."""
    if tight_dp <= 0.0:
        return 0.0
    return max(tight_dp, largest_within(level, target, tight_dp, tight_dp * cap))


@lru_cache(maxsize=CACHE_SIZE)
def series_level(model: MarkovModel, spend: tuple[float, ...]) -> float:
    """L(E) of a chain whose answers may read several time points together: the largest
    record level of `series_levels` (any transcript E_t-DP in the records of time t)."""
    if not any(spend):
        return 0.0
    return float(series_levels(model, list(spend)).max())


@lru_cache(maxsize=CACHE_SIZE)
def series_ratio_level(model: MarkovModel, spend: tuple[float, ...]) -> float:
    """The largest quilt bound on ln P(y | x) / P(y | x') (a Pufferfish level, which bounds
    the IP level and, unlike it, never levels off at the prior's -ln pi_min)."""
    if not any(spend):
        return 0.0
    return float(pair_bounds(model, list(spend)).max())
