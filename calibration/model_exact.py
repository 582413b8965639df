"""Model-exact calibration: the largest eps_dp whose exact IP level under a declared model meets epsilon.

The level of a fixed model is non-decreasing in eps_dp (more noise is less noise plus an
independent mixture, a post-processing: docs/theory.md, "Model-exact calibration"), so a
bisection finds the largest eps_dp, and the returned value is re-audited before it is used.
The result never exceeds the tight map's eps_dp times an owner cap (default 10), so a prior
that makes little noise look private cannot remove the noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import CalibrationError
from .household import household_eta
from .inversion import invert
from .model import DependenceModel
from .model_household import (
    HouseholdModel,
    grouped_household_level,
    household_level,
    require_weights,
)
from .model_markov import MarkovModel, chain_eta, markov_levels
from .validation import require_epsilon, require_int, require_positive, shown

DEFAULT_CAP = 10.0
"""Default owner cap: model-exact eps_dp is at most 10 times the tight map's eps_dp."""

RHO_GRID_POINTS = 9
"""Points of the rho grid (both ends included) over which the worst level is taken."""

CACHE_SIZE = 256
"""Calibrations kept per process (each a few hundred bytes), so a repeated query is free."""

RELATIVE_PRECISION = 1e-6
"""Bisection stops when the bracket [low, high] has high <= low (1 + this): a 1e-6 relative
loss of eps_dp, always on the private side."""


@dataclass(frozen=True)
class ModelCalibration:
    """One model-exact calibration: the eps_dp chosen and the numbers that justify it.

    level is the re-audited worst level at eps_dp (<= epsilon); tight_eps_dp is the tight
    map's eps_dp for the model's (k, eta); capped says whether the cap, not the model,
    set eps_dp; worst_rho is the rho of the worst level (None for a chain).
    """

    epsilon: float
    eps_dp: float
    level: float
    tight_eps_dp: float
    cap: float
    capped: bool
    worst_rho: float | None


def rho_grid(model: HouseholdModel) -> tuple[float, ...]:
    """RHO_GRID_POINTS evenly spaced values over [rho_low, rho_high] (one for a point)."""
    if model.rho_low == model.rho_high:
        return (model.rho_low,)
    return tuple(float(r) for r in np.linspace(model.rho_low, model.rho_high, RHO_GRID_POINTS))


def largest_within(level: Callable[[float], float], epsilon: float, start: float,
                   ceiling: float) -> float:
    """Largest eps_dp in [0, ceiling] with level(eps_dp) <= epsilon, for a non-decreasing level.

    start is a value believed private (the tight map's eps_dp); it is checked, and 0 (no
    answer, level 0) is the fallback lower end. The bracket halves geometrically until it is
    RELATIVE_PRECISION wide; the lower end always satisfies the target.
    """
    if level(ceiling) <= epsilon:
        return ceiling
    low = start if 0.0 < start < ceiling and level(start) <= epsilon else 0.0
    high = ceiling
    while high > low * (1.0 + RELATIVE_PRECISION):
        middle = math.sqrt(low * high) if low > 0.0 else 0.5 * high
        if middle <= low or middle >= high:
            break
        if level(middle) <= epsilon:
            low = middle
        else:
            high = middle
    return low


def _finish(epsilon: float, level: Callable[[float], float], tight: float, cap: float,
            worst: Callable[[float], float | None]) -> ModelCalibration:
    """Bisect, refuse zero noise, re-audit, and package the result."""
    ceiling = tight * cap
    eps_dp = largest_within(level, epsilon, tight, ceiling)
    if eps_dp <= 0.0:
        raise CalibrationError(
            f"the model certifies no eps_dp > 0 for epsilon={epsilon:g}; use tight or group"
        )
    audited = level(eps_dp)
    if audited > epsilon:
        raise CalibrationError(
            f"model-exact eps_dp={eps_dp:g} re-audits at level {audited:.6g} > epsilon="
            f"{epsilon:g}; use tight"
        )
    return ModelCalibration(epsilon=epsilon, eps_dp=eps_dp, level=audited, tight_eps_dp=tight,
                            cap=cap, capped=eps_dp == ceiling, worst_rho=worst(eps_dp))


def household_tight_eps_dp(model: HouseholdModel, epsilon: float) -> float:
    """The tight map's eps_dp for k = the largest household, eta = the worst over the rho grid."""
    marginal = np.array(model.marginal)
    eta = max(household_eta(model.max_size, rho, marginal) for rho in rho_grid(model))
    return invert("tight", epsilon, DependenceModel(k=model.max_size, eta=eta))


def calibrate_household(model: HouseholdModel, epsilon: float, weights: object,
                        sensitivity: float = 1.0, cap: float = DEFAULT_CAP,
                        groups: object = None) -> ModelCalibration:
    """Largest eps_dp for a COUNT/SUM (weights) or grouped COUNT (groups, weights unused)
    meeting epsilon; cached, since a grouped calibration can take a minute.

    The answer's noise rate is eps_dp / sensitivity (the engine's scale Delta / eps_dp). The
    level is the worst over the rho grid: a grid, so between its points the level is not
    proved; tests/test_model_exact.py checks on a fine grid that the level is increasing in
    rho for the models benchmarked, which makes the grid's top end (rho_high) the worst case.
    """
    target = require_epsilon("epsilon", epsilon)
    delta = require_positive("sensitivity", sensitivity)
    limit = _require_cap(cap)
    domain = len(model.marginal)
    if groups is None:
        query = ("weights", tuple(int(v) for v in require_weights(weights, domain)))
    else:
        labels = require_weights(groups, domain)
        if labels.min() < 0:
            raise CalibrationError(f"groups must be integers >= 0, got {shown(groups)}")
        query = ("groups", tuple(int(v) for v in labels))
    return _household(model, target, query, delta, limit)


@lru_cache(maxsize=CACHE_SIZE)
def _household(model: HouseholdModel, target: float, query: tuple[str, tuple[int, ...]],
               delta: float, limit: float) -> ModelCalibration:
    """calibrate_household on validated, hashable inputs (a pure function, so cached)."""
    kind, values = query
    if kind == "weights":
        def one(rho: float, eps_dp: float) -> float:
            return household_level(model, rho, values, eps_dp / delta)
    else:
        def one(rho: float, eps_dp: float) -> float:
            return grouped_household_level(model, rho, values, eps_dp / delta)

    grid = rho_grid(model)

    def level(eps_dp: float) -> float:
        return 0.0 if eps_dp == 0.0 else max(one(rho, eps_dp) for rho in grid)

    def worst(eps_dp: float) -> float:
        return max(grid, key=lambda rho: one(rho, eps_dp))

    return _finish(target, level, household_tight_eps_dp(model, target), limit, worst)


def calibrate_chain(model: MarkovModel, epsilon: float, times: int,
                    cap: float = DEFAULT_CAP) -> ModelCalibration:
    """Largest eps_dp per time point when every one of `times` points gets one eps_dp answer
    (cached).

    Each record changes only its own time point's answer, so the transcript is eps_dp-DP per
    record and the tight map (k = times, eta = chain_eta) gives the floor's eps_dp.
    """
    return _chain(model, require_epsilon("epsilon", epsilon), require_int("times", times, 1),
                  _require_cap(cap))


@lru_cache(maxsize=CACHE_SIZE)
def _chain(model: MarkovModel, target: float, count: int, limit: float) -> ModelCalibration:
    """calibrate_chain on validated inputs (a pure function, so cached)."""
    def level(eps_dp: float) -> float:
        return 0.0 if eps_dp == 0.0 else float(markov_levels(model, [eps_dp] * count).max())

    tight = invert("tight", target, DependenceModel(k=count, eta=chain_eta(model, count)))
    return _finish(target, level, tight, limit, lambda _: None)


def _require_cap(cap: object) -> float:
    """The owner cap: a finite number >= 1 (1 means never less noise than the tight map)."""
    limit = require_positive("cap", cap)
    if limit < 1.0:
        raise CalibrationError(f"cap must be a finite number >= 1, got {shown(cap)}")
    return limit
