"""Asking by accuracy: the smallest epsilon whose 95% half-width on every noisy cell is at most
a target, by bisection over the calibration (docs/theory.md §18). Reads no data."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..calibration import EPSILON_RANGE
from .errors import InputError

STEPS = 60  # bisection steps on log epsilon: the range spans 8 decades, 60 halvings reach 1e-16
DIGITS = 4  # the epsilon asked is rounded up to this many significant digits


@dataclass(frozen=True)
class AccuracyPlan:
    """The epsilon an accuracy target asks for, and what it gives."""

    target: float  # the 95% half-width asked for every noisy cell
    epsilon: float  # the smallest epsilon (rounded up to DIGITS significant digits) meeting it
    halfwidth: float  # the largest 95% half-width of a noisy cell at that epsilon
    explanation: str


def smallest_epsilon(halfwidth_at: Callable[[float], float], target: object,
                     what: str) -> AccuracyPlan:
    """Bisection for the smallest epsilon in EPSILON_RANGE with halfwidth_at(epsilon) <= target.

    `halfwidth_at` is non-increasing in epsilon: the calibration's eps_dp is non-decreasing in
    epsilon (every guarantee map is increasing, so its inverse is) and each noise scale is a
    sensitivity over a fixed share of eps_dp. The result is rounded up, which keeps it valid."""
    if isinstance(target, bool) or not isinstance(target, (int, float)) \
            or not math.isfinite(target) or target <= 0:
        raise InputError(f"the 95% half-width asked must be a finite number > 0, got {target!r}",
                         value=target)
    lo, hi = EPSILON_RANGE
    best = halfwidth_at(hi)
    if best > target:
        raise InputError(f"no epsilon up to {hi:g} makes every noisy cell of {what} within "
                         f"±{target:g} (at epsilon {hi:g} the widest 95% half-width is "
                         f"±{best:.4g}); ask a wider half-width", value=target, best=best)
    if halfwidth_at(lo) <= target:
        return AccuracyPlan(float(target), lo, halfwidth_at(lo), _explain(what, target, lo))
    low, high = math.log(lo), math.log(hi)
    for _ in range(STEPS):
        mid = (low + high) / 2
        if halfwidth_at(math.exp(mid)) <= target:
            high = mid
        else:
            low = mid
    epsilon = _round_up(math.exp(high))
    if halfwidth_at(epsilon) > target:  # rounding up cannot widen it; a guard for the float
        epsilon = math.exp(high)
    return AccuracyPlan(float(target), epsilon, halfwidth_at(epsilon),
                        _explain(what, target, epsilon))


def _round_up(x: float) -> float:
    scale = 10.0 ** (math.floor(math.log10(x)) - DIGITS + 1)
    return min(math.ceil(x / scale) * scale, EPSILON_RANGE[1])


def _explain(what: str, target: object, epsilon: float) -> str:
    return (f"epsilon {epsilon:.{DIGITS}g} is the smallest that keeps the 95% half-width of every "
            f"noisy cell of {what} within ±{target:g} (bisection over the calibration, which "
            "gives less noise for a larger epsilon)")
