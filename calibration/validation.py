"""Input checks shared by the calibration modules; each raises CalibrationError in one line."""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral, Real

import numpy as np

from .errors import CalibrationError

PMF_SUM_TOLERANCE = 1e-9
"""How far a pmf's total may be from 1 (float rounding in user-built arrays)."""

EPSILON_RANGE = (1e-6, 100.0)
"""Accepted per-answer information-privacy levels (docs/theory.md, "Accepted ranges").

Below 1e-6 the noise of a single count is over a million times its sensitivity (k times
more under group privacy): no answer is usable. Above 100 the guarantee allows odds to move
by e^100 ~ 1e43, which protects nothing. Inside the range every eps_dp the calibration can
choose lies in [1e-12, 100] (k <= MAX_K), so noise scales are finite, normal floats that
OpenDP's maps accept, and every map and its inverse are well conditioned."""

BUDGET_RANGE = (1e-6, 1e12)
"""Accepted total information-privacy budgets: the same floor; a ceiling that still lets a
budget stand for 'no limit' (benchmarks) while L^-1(budget) stays a finite float."""

MAX_K = 1_000_000
"""Largest accepted dependence-group size k: keeps k * eps_dp finite and eps_dp >= 1e-12."""


def shown(value: object) -> str:
    """A short repr of value for a one-line message (huge integers by their size only)."""
    if isinstance(value, Integral) and not isinstance(value, bool) and abs(int(value)) > 10**18:
        return f"an integer of about {int(int(value).bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class EpsilonOutOfRange(CalibrationError):
    """A privacy level outside its accepted range; carries the value and the range."""

    def __init__(self, name: str, value: object, lower: float, upper: float) -> None:
        """Build the one-line message and keep the numbers as attributes."""
        super().__init__(
            f"{name} must be a finite number > 0 within [{lower:g}, {upper:g}], got {shown(value)}"
        )
        self.name = name
        self.value = value
        self.lower = lower
        self.upper = upper


def require_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """Return value as int if it is an integer >= minimum (and <= maximum; bools refused)."""
    accepted = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise CalibrationError(f"{name} must be an integer {accepted}, got {shown(value)}")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        raise CalibrationError(f"{name} must be an integer {accepted}, got {shown(value)}")
    return number


def require_probability(name: str, value: object) -> float:
    """Return value as float if it is a finite number in [0, 1] (eta, rho)."""
    return _require_real(name, value, "a finite number in [0, 1]", lambda x: 0 <= x <= 1)


def require_epsilon(name: str, value: object) -> float:
    """Return value as float if it is a per-answer IP level within EPSILON_RANGE."""
    return _require_range(name, value, EPSILON_RANGE)


def require_budget(name: str, value: object) -> float:
    """Return value as float if it is a total IP budget within BUDGET_RANGE."""
    return _require_range(name, value, BUDGET_RANGE)


def require_positive(name: str, value: object) -> float:
    """Return value as float if it is a finite number > 0 (a DP level to audit)."""
    return _require_real(name, value, "a finite number > 0", lambda x: x > 0)


def _require_range(name: str, value: object, bounds: tuple[float, float]) -> float:
    """Return value as float if it is a real number in bounds, else EpsilonOutOfRange."""
    lower, upper = bounds
    try:
        return _require_real(name, value, "", lambda x: lower <= x <= upper)
    except CalibrationError:
        raise EpsilonOutOfRange(name, value, lower, upper) from None


def require_nonnegative(name: str, value: object) -> float:
    """Return value as float if it is a finite number >= 0 (a DP total, which may be empty)."""
    return _require_real(name, value, "a finite number >= 0", lambda x: x >= 0)


def _require_real(
    name: str, value: object, accepted: str, ok: Callable[[float], bool]
) -> float:
    """Return value as float if it is a finite real (bools refused) for which ok holds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise CalibrationError(f"{name} must be {accepted}, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        raise CalibrationError(f"{name} must be {accepted}, got {shown(value)}") from None
    if not math.isfinite(number) or not ok(number):
        raise CalibrationError(f"{name} must be {accepted}, got {shown(value)}")
    return number


def require_pmf(name: str, pmf: object) -> np.ndarray:
    """Return pmf as a float array if it is a finite, non-negative array summing to 1."""
    try:
        array = np.asarray(pmf, dtype=float)
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{name} must be a numeric array, got {type(pmf).__name__}") from exc
    if array.ndim == 0 or array.size == 0:
        raise CalibrationError(f"{name} must have at least one axis and one entry, got {pmf!r}")
    if not np.all(np.isfinite(array)):
        raise CalibrationError(f"{name} must contain only finite numbers")
    if np.any(array < 0):
        raise CalibrationError(f"{name} must be non-negative, got minimum {array.min():g}")
    total = float(array.sum())
    if abs(total - 1.0) > PMF_SUM_TOLERANCE:
        raise CalibrationError(
            f"{name} must sum to 1 (within {PMF_SUM_TOLERANCE:g}), got {total:.12g}"
        )
    return array / total
