"""IP level of noisy per-time-point answers when each person's values follow a Markov chain.

Each (person, time) record is an individual; people are independent; one person's values
X_1..X_T over a column's public domain follow a chain with initial law pi_1 and transition
matrix P. Every answer reads ONE time point's records; spend[t] is the total eps_dp of the
answers reading time t (0 if none). docs/theory.md, "Model-exact calibration".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import CalibrationError
from .validation import require_int, require_nonnegative, require_pmf, shown

MAX_DOMAIN = 64
"""Largest column domain a chain may have (level sets cost d^3 per time point)."""

MAX_TIMES = 1_000_000
"""Most time points a level is computed over (linear cost)."""


@dataclass(frozen=True)
class MarkovModel:
    """A declared chain: initial law over the domain and a row-stochastic transition matrix."""

    initial: tuple[float, ...]
    transition: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        """Validate: initial a 1-D pmf over d >= 2 values, transition d x d with pmf rows."""
        initial = require_pmf("initial", self.initial)
        if initial.ndim != 1 or not 2 <= len(initial) <= MAX_DOMAIN:
            raise CalibrationError(
                f"initial must be a pmf over 2 to {MAX_DOMAIN} values, got shape {initial.shape}"
            )
        try:
            matrix = np.asarray(self.transition, dtype=float)
        except (TypeError, ValueError):
            raise CalibrationError(
                f"transition must be a {len(initial)}x{len(initial)} matrix, got "
                f"{shown(self.transition)}"
            ) from None
        if matrix.shape != (len(initial),) * 2:
            raise CalibrationError(
                f"transition must be a {len(initial)}x{len(initial)} matrix (one row per value),"
                f" got shape {matrix.shape}"
            )
        rows = [require_pmf(f"transition row {v}", row) for v, row in enumerate(matrix)]
        object.__setattr__(self, "initial", tuple(float(p) for p in initial))
        object.__setattr__(self, "transition", tuple(tuple(float(p) for p in r) for r in rows))

    @classmethod
    def binary(cls, up: float, down: float, initial: Sequence[float] | None = None) -> MarkovModel:
        """Two states: P(1 | 0) = up, P(0 | 1) = down; stationary start unless given."""
        if initial is None:
            total = up + down
            if total <= 0:
                raise CalibrationError("up + down must be > 0 for a stationary start")
            initial = (down / total, up / total)
        return cls(tuple(initial), ((1.0 - up, up), (down, 1.0 - down)))

    @property
    def matrix(self) -> np.ndarray:
        """The transition matrix as an array."""
        return np.array(self.transition)

    def marginals(self, times: int) -> np.ndarray:
        """Row t is the law of X_(t+1): pi_1 P^t."""
        laws = np.empty((times, len(self.initial)))
        laws[0] = self.initial
        for t in range(1, times):
            laws[t] = laws[t - 1] @ self.matrix
        return laws


def require_spend(spend: object) -> np.ndarray:
    """Return spend as floats if it is a non-empty sequence of finite numbers >= 0."""
    values = list(spend) if isinstance(spend, Sequence | np.ndarray) else None
    if not values or len(values) > MAX_TIMES:
        raise CalibrationError(
            f"spend must list 1 to {MAX_TIMES} per-time eps_dp totals, got {shown(spend)}"
        )
    return np.array([require_nonnegative(f"spend[{t}]", v) for t, v in enumerate(values)])


def step_sup(kernel: np.ndarray, bound: float) -> np.ndarray:
    """S[x, x'] = sup of sum_u kernel[x, u] g(u) / sum_u kernel[x', u] g(u) over g > 0 whose
    entries are within a factor `bound` of each other.

    The ratio is linear-fractional in g, so its sup over the box g in [1, bound]^d is at a
    vertex g = 1 + (bound - 1) 1_A, and (Dinkelbach) at a level set A of the likelihood ratio
    kernel[x] / kernel[x']: (1 + (bound - 1) P(A | x)) / (1 + (bound - 1) P(A | x')).
    """
    d = len(kernel)
    best = np.ones((d, d))
    if bound == 1.0:
        return best
    extra = bound - 1.0
    for x in range(d):
        for y in range(d):
            if x == y:
                continue
            ratio = _fraction(kernel[x], kernel[y])
            if math.isinf(bound):  # the limit of the level-set values: the largest ratio
                best[x, y] = max(1.0, float(ratio.max()))
                continue
            order = np.argsort(-ratio, kind="stable")
            top = np.cumsum(kernel[x][order])
            bottom = np.cumsum(kernel[y][order])
            values = (1.0 + extra * top) / (1.0 + extra * bottom)
            best[x, y] = max(1.0, float(values.max()))
    return best


def _fraction(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """top / bottom with x / 0 = inf for x > 0 and 0 / 0 = 1 (a pair the step cannot separate)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0),
                        np.where(top > 0, np.inf, 1.0))


def binary_step_sup(kernel: np.ndarray, low: float, high: float) -> np.ndarray:
    """S[x, x'] = sup of (kernel[x, 0] + kernel[x, 1] r) / (kernel[x', 0] + kernel[x', 1] r)
    over r = g(1) / g(0) in [low, high]: the ratio is monotone in r, so an end attains it
    (at r = inf the limit kernel[x, 1] / kernel[x', 1])."""
    ends = []
    for r in (low, high):
        if math.isinf(r):
            ends.append(_fraction(kernel[:, None, 1], kernel[None, :, 1]))
        else:
            sums = kernel[:, 0] + kernel[:, 1] * r
            ends.append(_fraction(sums[:, None], sums[None, :]))
    best = np.maximum(np.maximum(*ends), 1.0)
    np.fill_diagonal(best, 1.0)
    return best


def _sweep(kernels: list[np.ndarray], emissions: np.ndarray, d: int) -> list[np.ndarray]:
    """Pairwise sups B[x, x'] of one side's factor at each position, from the far end inwards.

    kernels[j] maps position j's value to position j+1's (positions ordered towards the far
    end); emissions[j] is e^{spend} at position j+1. B at the far end is 1. With a binary
    domain the next factor g(1) / g(0) lies exactly in [1 / (e^E B[0, 1]), e^E B[1, 0]];
    otherwise every pair of g's entries is within M = e^E max B (the box of step_sup).
    """
    sups = [np.ones((d, d))]
    for kernel, emission in zip(reversed(kernels), reversed(emissions), strict=True):
        last = sups[-1]
        with np.errstate(over="ignore"):
            lower, upper, box = (emission * last[0, 1], emission * last[1, 0],
                                 emission * float(last.max()))
        if d == 2:
            sups.append(binary_step_sup(kernel, 1.0 / lower, upper))
        else:
            sups.append(step_sup(kernel, box))
    return list(reversed(sups))


def markov_levels(model: MarkovModel, spend: object) -> np.ndarray:
    """Upper bound on the IP level of each time point's record (exact for a binary domain).

    Given X_d = x the past and future outputs are independent (Markov), so the likelihood
    ratio P(Y | X_d = x) / P(Y | X_d = x') is the own time point's factor (at most e^{E_d})
    times a future and a past factor over disjoint outputs: its sup R(x, x') is the product
    of the three sups. The future sup follows step_sup from the end (B_T = 1, bound
    e^{E_(t+1)} B_(t+1)); the past uses the reversed kernels pi_(t-1)(u) P(x | u) / pi_t(x).
    Definition 3's ratio at t is 1 / sum_{t'} pi_d(t') / R(t, t'), increasing in every R, so
    the sups give a bound; values with pi_d(t) = 0 never occur and are skipped. Other people
    are independent of the person's chain (sound to drop, see household_level).
    """
    energy = require_spend(spend)
    times = len(energy)
    matrix = model.matrix
    laws = model.marginals(times)
    with np.errstate(over="ignore"):
        emissions = np.exp(energy)
    domain = len(model.initial)
    future = _sweep([matrix] * (times - 1), emissions[1:], domain)
    backward = []
    for t in range(1, times):
        with np.errstate(divide="ignore", invalid="ignore"):
            reverse = laws[t - 1][None, :] * matrix.T / laws[t][:, None]
        backward.append(np.nan_to_num(reverse, nan=0.0, posinf=0.0))
    past = list(reversed(_sweep(list(reversed(backward)), emissions[:-1][::-1], domain)))
    levels = np.zeros(times)
    for day in range(times):
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = np.where(np.eye(domain, dtype=bool), 1.0,
                             emissions[day] * future[day] * past[day])
        present = np.flatnonzero(laws[day] > 0)
        inverse = (laws[day][present][None, :] / ratio[np.ix_(present, present)]).sum(axis=1)
        levels[day] = max(0.0, float((-np.log(inverse)).max()))
    return levels


def chain_eta(model: MarkovModel, times: int) -> float:
    """Exact eta of one person's chain of `times` records (each record an individual).

    Given X_d the rest of the chain depends on X_d only through (X_(d-1), X_(d+1)) (Markov),
    so the TV between the others' laws given X_d = x and x' is the TV of those neighbours'
    joint laws: Q_d(u | x) P(x, v), computed exactly for every d.
    """
    count = require_int("times", times, 1, MAX_TIMES)
    if count == 1:
        return 0.0
    matrix = model.matrix
    laws = model.marginals(count)
    eta = 0.0
    for d in range(count):
        present = np.flatnonzero(laws[d] > 0)
        rows = []
        for x in present:
            after = matrix[x] if d + 1 < count else np.ones(1)
            before = (laws[d - 1] * matrix[:, x] / laws[d][x]) if d > 0 else np.ones(1)
            rows.append(np.outer(before, after).ravel())
        for a in range(len(rows)):
            for b in range(a + 1, len(rows)):
                eta = max(eta, 0.5 * float(np.abs(rows[a] - rows[b]).sum()))
    return min(1.0, eta)
