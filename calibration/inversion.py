"""Calibration: the largest eps_dp whose guarantee L(eps_dp) stays within the analyst's epsilon."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .errors import CalibrationError
from .maps import (
    AUTO,
    LN2,
    MAPS,
    MODES,
    SOURCES,
    applies,
    dependent_records_message,
    require_mode,
    require_model,
)
from .model import DependenceModel
from .validation import require_epsilon

FORMULAS = {
    "independent": "records are independent, so eps_dp-DP is eps_dp-IP",
    "group": "eps_dp-DP is (k eps_dp)-IP for groups of k dependent records",
    "theorem2": "eps_dp-DP is (ln 2 + max(eps_dp, k eps_dp - b))-IP, b = -ln eta",
    "tight": "eps_dp-DP is ln((1 - eta) e^eps_dp + eta e^(k eps_dp))-IP",
}
"""Why each mode's map holds, in one line."""

MAX_ULP_STEPS = 64
"""Ulps a closed-form eps_dp may be stepped down before the inversion bisects instead."""


@dataclass(frozen=True)
class ModeOption:
    """One mode's answer to 'which eps_dp certifies epsilon?', or why it cannot answer."""

    mode: str
    applies: bool
    epsilon_dp: float | None
    noise_vs_group: float | None
    justification: str


@dataclass(frozen=True)
class Calibration:
    """The eps_dp that sets the noise for an epsilon-IP answer, and how it was certified."""

    epsilon: float
    epsilon_dp: float
    mode: str
    requested_mode: str
    level: float
    justification: str
    model: DependenceModel
    options: tuple[ModeOption, ...]


def refusal(mode: str, epsilon: float, model: DependenceModel) -> str | None:
    """Why mode cannot certify epsilon under model, or None if it can."""
    if not applies(mode, model):
        return dependent_records_message(model)
    if mode == "theorem2" and epsilon <= LN2:
        return (
            f"theorem2 cannot certify epsilon={epsilon:g} <= ln 2 = {LN2:.4f}: its bound is "
            "at least ln 2 + eps_dp; use tight, group or auto"
        )
    return None


def private_side(eps_dp: float, level: Callable[[float], float], epsilon: float) -> float:
    """Step eps_dp down by at most MAX_ULP_STEPS ulps until level(eps_dp) <= epsilon.

    A closed form is off by a few ulps of float rounding at most; if that is not enough,
    bisect on [0, eps_dp] instead (level(0) <= epsilon for every map and accepted target),
    so the search always ends, on the private side.
    """
    candidate = eps_dp
    for _ in range(MAX_ULP_STEPS):
        if level(candidate) <= epsilon:
            return candidate
        candidate = math.nextafter(candidate, 0.0)
    return bisect_largest(level, epsilon, 0.0, eps_dp)


def bisect_largest(
    level: Callable[[float], float], epsilon: float, low: float, high: float
) -> float:
    """Largest x in [low, high] with level(x) <= epsilon for increasing level, to the last ulp.

    Needs level(low) <= epsilon; the invariant holds throughout, so the answer errs on the
    private side. The interval halves until its ends are adjacent floats: at most about 1100
    steps (from 1e12 down to the smallest subnormal), whatever the inputs.
    """
    while True:
        middle = 0.5 * (low + high)
        if middle <= low or middle >= high:
            return low
        if level(middle) <= epsilon:
            low = middle
        else:
            high = middle


def invert(mode: str, epsilon: float, model: DependenceModel) -> float:
    """The largest eps_dp with L_mode(eps_dp) <= epsilon; closed form where one exists.

    A result of 0 means the mode certifies no positive eps_dp (theorem2 just above ln 2)
    and is refused like a target below ln 2.
    """
    reason = refusal(mode, epsilon, model)
    if reason is not None:
        raise CalibrationError(reason)

    def level(x: float) -> float:
        return MAPS[mode](x, model)

    if mode == "independent" or (mode == "tight" and model.is_independent):
        candidate = epsilon
    elif mode == "group" or (mode == "tight" and model.eta == 1.0):
        candidate = epsilon / model.k
    elif mode == "theorem2":
        slack = epsilon - LN2
        b = math.inf if model.eta == 0.0 else -math.log(model.eta)
        candidate = min(slack, (slack + b) / model.k)
    else:
        return bisect_largest(level, epsilon, private_side(epsilon / model.k, level, epsilon),
                              epsilon)
    eps_dp = private_side(candidate, level, epsilon)
    if eps_dp <= 0.0:
        raise CalibrationError(
            f"{mode} certifies no eps_dp > 0 for epsilon={epsilon:g}; use tight, group or auto"
        )
    return eps_dp


def _option(mode: str, epsilon: float, model: DependenceModel, group_dp: float) -> ModeOption:
    """The ModeOption of one concrete mode."""
    reason = refusal(mode, epsilon, model)
    if reason is not None:
        return ModeOption(mode, False, None, None, reason)
    try:
        eps_dp = invert(mode, epsilon, model)
    except CalibrationError as exc:
        return ModeOption(mode, False, None, None, str(exc))
    return ModeOption(mode, True, eps_dp, group_dp / eps_dp, f"{SOURCES[mode]}: {FORMULAS[mode]}")


def compare_modes(epsilon: float, model: DependenceModel) -> tuple[ModeOption, ...]:
    """Every mode's eps_dp for target epsilon, then auto's choice (the largest eps_dp)."""
    return _compare(require_epsilon("epsilon", epsilon), require_model(model))


def _compare(target: float, model: DependenceModel) -> tuple[ModeOption, ...]:
    """compare_modes for a target and model already checked."""
    group_dp = invert("group", target, model)
    options = tuple(_option(mode, target, model, group_dp) for mode in MODES)
    best = _best(options)
    auto = ModeOption(
        AUTO,
        True,
        best.epsilon_dp,
        best.noise_vs_group,
        f"chose {best.mode}: {SOURCES[best.mode]}, the largest eps_dp among applicable modes",
    )
    return (*options, auto)


def _best(options: tuple[ModeOption, ...]) -> ModeOption:
    """The applicable option with the largest eps_dp; ties go to the earlier (simpler) mode."""
    return max(
        (option for option in options if option.applies),
        key=lambda o: -math.inf if o.epsilon_dp is None else o.epsilon_dp,
    )


def calibrate(epsilon: float, model: DependenceModel, mode: str = AUTO) -> Calibration:
    """The largest eps_dp whose guarantee under mode is at most epsilon (auto: best mode).

    epsilon is one answer's level, so it must lie in EPSILON_RANGE (calibration.validation).
    """
    requested = require_mode(mode)
    return calibrate_checked(require_epsilon("epsilon", epsilon), require_model(model), requested)


def calibrate_checked(target: float, model: DependenceModel, requested: str) -> Calibration:
    """calibrate for a target, model and mode already checked (dp_budget checks a budget)."""
    if requested == AUTO:
        options = _compare(target, model)
        chosen = _best(options[:-1])
    else:
        chosen = _option(requested, target, model, invert("group", target, model))
        if not chosen.applies:
            raise CalibrationError(chosen.justification)
        options = (chosen,)
    assert chosen.epsilon_dp is not None
    return Calibration(
        epsilon=target,
        epsilon_dp=chosen.epsilon_dp,
        mode=chosen.mode,
        requested_mode=requested,
        level=MAPS[chosen.mode](chosen.epsilon_dp, model),
        justification=SOURCES[chosen.mode],
        model=model,
        options=options,
    )
