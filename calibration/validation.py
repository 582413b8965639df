"""Input checks shared by the calibration modules; each raises CalibrationError in one line."""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral, Real

import numpy as np

from .errors import CalibrationError

PMF_SUM_TOLERANCE = 1e-9
"""How far a pmf's total may be from 1 (float rounding in user-built arrays)."""


def require_int(name: str, value: object, minimum: int) -> int:
    """Return value as int if it is an integer >= minimum (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise CalibrationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def require_probability(name: str, value: object) -> float:
    """Return value as float if it is a finite number in [0, 1] (eta, rho)."""
    return _require_real(name, value, "a finite number in [0, 1]", lambda x: 0 <= x <= 1)


def require_epsilon(name: str, value: object) -> float:
    """Return value as float if it is a finite number > 0 (an IP or DP privacy level)."""
    return _require_real(name, value, "a finite number > 0", lambda x: x > 0)


def require_nonnegative(name: str, value: object) -> float:
    """Return value as float if it is a finite number >= 0 (a DP total, which may be empty)."""
    return _require_real(name, value, "a finite number >= 0", lambda x: x >= 0)


def _require_real(
    name: str, value: object, accepted: str, ok: Callable[[float], bool]
) -> float:
    """Return value as float if it is a finite real (bools refused) for which ok holds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise CalibrationError(f"{name} must be {accepted}, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not ok(number):
        raise CalibrationError(f"{name} must be {accepted}, got {value!r}")
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
