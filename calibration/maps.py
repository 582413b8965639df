"""Guarantee maps L(eps_dp): an eps_dp-DP mechanism is L(eps_dp)-IP under the model (docs/theory.md §4)."""

from __future__ import annotations

import math
from collections.abc import Callable

from .errors import CalibrationError
from .model import DependenceModel
from .validation import require_nonnegative

MODES = ("independent", "group", "theorem2", "tight")
"""The guarantee maps, from the weakest assumption-free to the tightest known."""

AUTO = "auto"
"""Mode name meaning: use the applicable mode that allows the largest eps_dp."""

MODE_CHOICES = (AUTO, "tight", "theorem2", "group", "independent")
"""Every mode of (k, eta) alone a policy or an analyst may name, in the order people are shown
them."""

MODEL_MODE = "model"
"""Mode name meaning: a declared model's map (calibration/declared.py) for a query a model
covers; a query no model covers uses the base map `MODEL_BASE`. It is not a map of (k, eta)
alone, so not one of MODE_CHOICES."""

MODEL_BASE = "tight"
"""The base map of a policy in mode model: what a query no declared model covers is calibrated
and accounted by."""

SOURCES = {
    "independent": "Proposition 4 (independent records)",
    "group": "Proposition 5 (group privacy)",
    "theorem2": "Theorem 2",
    "tight": "proof of Lemma 6 (tight bound)",
}
"""Where in the paper each map is proved."""

LN2 = math.log(2.0)

EXPM1_LIMIT = 700.0
"""Largest argument given to math.expm1 (it overflows just above 709.78)."""


def require_model(model: object) -> DependenceModel:
    """Return model if it is a DependenceModel."""
    if not isinstance(model, DependenceModel):
        raise CalibrationError(
            f"model must be a DependenceModel(k, eta), got {type(model).__name__}"
        )
    return model


def require_mode(mode: object, *, allow_auto: bool = True) -> str:
    """Return mode if it names a guarantee map (or auto, when allowed)."""
    accepted = MODES + ((AUTO,) if allow_auto else ())
    if not isinstance(mode, str) or mode not in accepted:
        raise CalibrationError(f"mode must be one of {', '.join(accepted)}; got {mode!r}")
    return mode


def dependent_records_message(model: DependenceModel) -> str:
    """Why the independent mode is refused for a model with dependent records."""
    return (
        f"mode 'independent' needs k = 1 or eta = 0, got k={model.k}, eta={model.eta:g}: "
        "records are dependent, use tight, theorem2, group or auto"
    )


def independent_map(eps_dp: float, model: DependenceModel) -> float:
    """Proposition 4: with independent records eps_dp-DP is eps_dp-IP."""
    if not model.is_independent:
        raise CalibrationError(dependent_records_message(model))
    return eps_dp


def group_map(eps_dp: float, model: DependenceModel) -> float:
    """Proposition 5: eps_dp-DP is k * eps_dp-IP whatever the dependence inside a group."""
    return model.k * eps_dp


def theorem2_map(eps_dp: float, model: DependenceModel) -> float:
    """Theorem 2 with b' = min(b, (k-1) eps_dp): L = ln 2 + max(eps_dp, k eps_dp - b).

    Theorem 2 needs k eps_dp (1 - 1/k) >= b; since eta <= e^-b' for every b' <= b, the
    choice b' = min(b, (k-1) eps_dp) always meets it and is the best allowed. The result,
    ln 2 + max(eps_dp, k eps_dp - b), is continuous, strictly increasing and never below
    ln 2 + eps_dp, so it cannot certify a target <= ln 2. It is kept as the paper states
    it, not capped by the group map: where it is worse than group privacy (b' < ln 2)
    the mode reports more noise than group (docs/theory.md §4), and auto then picks
    another mode.
    """
    b = math.inf if model.eta == 0.0 else -math.log(model.eta)
    return LN2 + max(eps_dp, model.k * eps_dp - b)


def tight_map(eps_dp: float, model: DependenceModel) -> float:
    """Lemma 6's bound before its last two relaxations: ln((1 - eta) e^eps_dp + eta e^(k eps_dp)).

    Written as eps_dp + ln(1 + eta (e^((k-1) eps_dp) - 1)) with log1p/expm1, so it is exactly
    0 at eps_dp = 0, keeps full relative precision near 0 and for tiny eta, and never falls
    below eps_dp; when e^((k-1) eps_dp) would overflow, the same sum is taken in log space.
    Equals eps_dp at eta = 0 and k * eps_dp at eta = 1.
    """
    if model.eta == 0.0:
        return eps_dp
    if model.eta == 1.0:
        return model.k * eps_dp
    spread = (model.k - 1) * eps_dp
    if spread < EXPM1_LIMIT:
        return eps_dp + math.log1p(model.eta * math.expm1(spread))
    # ln(eta (e^spread - 1)) = ln eta + spread + ln(1 - e^-spread), then ln(1 + e^u) stably.
    u = math.log(model.eta) + spread + math.log1p(-math.exp(-spread))
    return eps_dp + (u + math.log1p(math.exp(-u)) if u > 0.0 else math.log1p(math.exp(u)))


MAPS: dict[str, Callable[[float, DependenceModel], float]] = {
    "independent": independent_map,
    "group": group_map,
    "theorem2": theorem2_map,
    "tight": tight_map,
}


def applies(mode: str, model: DependenceModel) -> bool:
    """True if the mode's map is valid under the model (independent needs k = 1 or eta = 0)."""
    return mode != "independent" or model.is_independent


def guarantee(mode: str, eps_dp: float, model: DependenceModel) -> float:
    """The IP level L(eps_dp) that an eps_dp-DP mechanism is certified to meet by this mode.

    For auto it is the smallest level over the applicable modes: each is a valid bound,
    so the tightest one is too.
    """
    name = require_mode(mode)
    level = require_nonnegative("eps_dp", eps_dp)
    checked = require_model(model)
    if name == AUTO:
        return min(MAPS[m](level, checked) for m in MODES if applies(m, checked))
    return MAPS[name](level, checked)
