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
    """Step eps_dp down by ulps until the computed level is within epsilon (float rounding)."""
    while level(eps_dp) > epsilon:
        eps_dp = math.nextafter(eps_dp, 0.0)
    return eps_dp


def bisect_largest(
    level: Callable[[float], float], epsilon: float, low: float, high: float
) -> float:
    """Largest x in [low, high] with level(x) <= epsilon for increasing level, to the last ulp.

    The invariant level(low) <= epsilon holds throughout, so the answer errs on the
    private side.
    """
    low = private_side(low, level, epsilon)
    while True:
        middle = 0.5 * (low + high)
        if middle <= low or middle >= high:
            return low
        if level(middle) <= epsilon:
            low = middle
        else:
            high = middle


def invert(mode: str, epsilon: float, model: DependenceModel) -> float:
    """The largest eps_dp with L_mode(eps_dp) <= epsilon; closed form where one exists."""
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
        return bisect_largest(level, epsilon, epsilon / model.k, epsilon)
    return private_side(candidate, level, epsilon)


def _option(mode: str, epsilon: float, model: DependenceModel, group_dp: float) -> ModeOption:
    """The ModeOption of one concrete mode."""
    reason = refusal(mode, epsilon, model)
    if reason is not None:
        return ModeOption(mode, False, None, None, reason)
    eps_dp = invert(mode, epsilon, model)
    return ModeOption(mode, True, eps_dp, group_dp / eps_dp, f"{SOURCES[mode]}: {FORMULAS[mode]}")


def compare_modes(epsilon: float, model: DependenceModel) -> tuple[ModeOption, ...]:
    """Every mode's eps_dp for target epsilon, then auto's choice (the largest eps_dp)."""
    target = require_epsilon("epsilon", epsilon)
    checked = require_model(model)
    group_dp = invert("group", target, checked)
    options = tuple(_option(mode, target, checked, group_dp) for mode in MODES)
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
    return max((option for option in options if option.applies), key=lambda o: o.epsilon_dp)


def calibrate(epsilon: float, model: DependenceModel, mode: str = AUTO) -> Calibration:
    """The largest eps_dp whose guarantee under mode is at most epsilon (auto: best mode)."""
    requested = require_mode(mode)
    target = require_epsilon("epsilon", epsilon)
    checked = require_model(model)
    if requested == AUTO:
        options = compare_modes(target, checked)
        chosen = _best(options[:-1])
    else:
        chosen = _option(requested, target, checked, invert("group", target, checked))
        if not chosen.applies:
            raise CalibrationError(chosen.justification)
        options = (chosen,)
    return Calibration(
        epsilon=target,
        epsilon_dp=chosen.epsilon_dp,
        mode=chosen.mode,
        requested_mode=requested,
        level=MAPS[chosen.mode](chosen.epsilon_dp, checked),
        justification=SOURCES[chosen.mode],
        model=checked,
        options=options,
    )
