"""Exact IP level of a noisy household COUNT or SUM under the latent-share household model.

Model (calibration/household.py): households are independent; in a household of s members
each member equals a shared latent Z ~ marginal with probability rho, else an independent
draw from marginal. A query adds w(X_j) over every record (w an integer weight per value:
[value in A] for a COUNT of a predicate A, the value for a SUM) and two-sided geometric noise
exp(-rate |y - f|) with rate = eps_dp / sensitivity. docs/theory.md, "Model-exact calibration".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import lgamma

import numpy as np

from .errors import CalibrationError
from .household import member_given_latent
from .validation import (
    require_int,
    require_pmf,
    require_positive,
    require_probability,
    shown,
)

MAX_WINDOW = 4001
"""Largest range of a household's query value (s * span + 1) the scalar level enumerates."""

MAX_GROUPED_WORK = 50_000_000
"""Largest G (s+1)^(G+1) (kernel terms) the grouped level computes."""


@dataclass(frozen=True)
class HouseholdModel:
    """A declared household model: household sizes, one column's marginal, a range of rho.

    sizes[j] is the probability that a household has j + 1 members (a fixed size s is the
    one-hot vector); marginal is the column's pmf over its public domain; rho_low <= rho_high
    bound the within-household correlation, and calibration takes the worst case over them.
    """

    sizes: tuple[float, ...]
    marginal: tuple[float, ...]
    rho_low: float
    rho_high: float

    def __post_init__(self) -> None:
        """Validate: sizes and marginal 1-D pmfs, 0 <= rho_low <= rho_high <= 1."""
        sizes = require_pmf("sizes", self.sizes)
        marginal = require_pmf("marginal", self.marginal)
        for name, array in (("sizes", sizes), ("marginal", marginal)):
            if array.ndim != 1:
                raise CalibrationError(f"{name} must be a 1-D pmf, got shape {array.shape}")
        if len(marginal) < 2:
            raise CalibrationError(f"marginal must have at least 2 values, got {len(marginal)}")
        low = require_probability("rho_low", self.rho_low)
        high = require_probability("rho_high", self.rho_high)
        if low > high:
            raise CalibrationError(f"rho_low must be <= rho_high, got {low:g} > {high:g}")
        object.__setattr__(self, "sizes", tuple(float(v) for v in sizes))
        object.__setattr__(self, "marginal", tuple(float(v) for v in marginal))
        object.__setattr__(self, "rho_low", low)
        object.__setattr__(self, "rho_high", high)

    @classmethod
    def fixed(cls, size: int, marginal: tuple[float, ...], rho_low: float,
              rho_high: float | None = None) -> HouseholdModel:
        """Households of exactly `size` members (rho_high defaults to rho_low: a point)."""
        s = require_int("size", size, 1)
        return cls(tuple([0.0] * (s - 1) + [1.0]), marginal, rho_low,
                   rho_low if rho_high is None else rho_high)

    @property
    def support_sizes(self) -> tuple[int, ...]:
        """Every household size with positive probability."""
        return tuple(j + 1 for j, p in enumerate(self.sizes) if p > 0)

    @property
    def max_size(self) -> int:
        """The largest household: the dependence group size k."""
        return max(self.support_sizes)


def require_weights(weights: object, domain: int) -> np.ndarray:
    """Return weights as int64 if they are one integer per value of the domain."""
    array = np.asarray(weights)
    if array.shape != (domain,) or not np.issubdtype(array.dtype, np.number) \
            or not np.all(np.isfinite(array)) or np.any(array != np.round(array)):
        raise CalibrationError(
            f"weights must be {domain} integers, one per value of the column, got {shown(weights)}"
        )
    return array.astype(np.int64)


def latent_given_member(rho: float, marginal: np.ndarray) -> np.ndarray:
    """Matrix P[t, z] = Pr[Z = z | X_i = t] = rho [z = t] + (1 - rho) marginal[z].

    Bayes: Pr[Z = z, X_i = t] = pi_z (rho [t = z] + (1 - rho) pi_t) = pi_t (rho [z = t] +
    (1 - rho) pi_z), the same matrix as Pr[member = v | Z = z] (the model is symmetric).
    """
    return member_given_latent(rho, marginal)


def _power(law: np.ndarray, times: int) -> np.ndarray:
    """Law of the sum of `times` independent draws from law (over 0..len-1), by squaring."""
    result = np.array([1.0])
    base = law
    while times:
        if times & 1:
            result = np.convolve(result, base)
        times >>= 1
        if times:
            base = np.convolve(base, base)
    return np.clip(result, 0.0, None)


def value_given_member(size: int, rho: float, marginal: np.ndarray,
                       weights: np.ndarray) -> np.ndarray:
    """Matrix V[t, c] = Pr[household's sum of w - size * min w = c | X_i = t], rows with pi_t > 0.

    Given Z = z the s - 1 housemates are independent draws from rho e_z + (1 - rho) pi, so
    their sum is a convolution power; given X_i = t, Z is mixed by latent_given_member.
    """
    low = int(weights.min())
    shifted = weights - low
    span = int(shifted.max())
    member = member_given_latent(rho, marginal)
    laws = np.array([np.bincount(shifted, weights=row, minlength=span + 1) for row in member])
    housemates = np.array([_power(law, size - 1) for law in laws])
    mixed = latent_given_member(rho, marginal) @ housemates
    table = np.zeros((len(marginal), size * span + 1))
    for t in range(len(marginal)):
        table[t, shifted[t]: shifted[t] + mixed.shape[1]] = mixed[t]
    return table[marginal > 0]


def _log_sum_exp(terms: np.ndarray) -> np.ndarray:
    """log sum exp over the last axis, -inf terms allowed."""
    top = np.max(terms, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(terms - top).sum(axis=-1)) + top[..., 0]


def level_of_table(table: np.ndarray, prior: np.ndarray, log_kernel: np.ndarray) -> float:
    """max_t max_y ln(Pr[y | t] / Pr[y]) from table[t, v] = Pr[value v | t] and ln K[y, v].

    Only outputs in the window of values are enumerated: beyond it the ratio is constant
    (the tail argument of calibration.audit.exact_audit), so nothing is truncated.
    """
    with np.errstate(divide="ignore"):
        log_given = _log_sum_exp(np.log(table)[:, None, :] + log_kernel[None, :, :])
    log_output = _log_sum_exp(np.log(prior)[None, :] + log_given.T)
    return float((log_given - log_output[None, :]).max())


def household_level(model: HouseholdModel, rho: float, weights: object, rate: float) -> float:
    """Exact IP level of sum_j w(X_j) + geometric noise of `rate`, one household alone.

    People in other households are independent of X_i, so their values only add an
    independent term to the sum: Pr[y | t] becomes a mixture over that term of the
    one-household ratios, and a ratio of mixtures is at most the largest ratio. The level
    computed on one household is therefore a sound upper bound for the whole table (exact
    when the table is that household). A random size, independent of the values, is a
    mixture over sizes too: the maximum over the sizes in the support is sound.
    """
    share = require_probability("rho", rho)
    lam = require_positive("rate", rate)
    marginal = np.array(model.marginal)
    w = require_weights(weights, len(marginal))
    if w.min() == w.max():
        return 0.0
    prior = marginal[marginal > 0]
    worst = 0.0
    for size in model.support_sizes:
        window = size * int(w.max() - w.min()) + 1
        if window > MAX_WINDOW:
            raise CalibrationError(
                f"household of {size} with weight span {int(w.max() - w.min())} has {window} "
                f"query values; at most {MAX_WINDOW} are enumerated"
            )
        table = value_given_member(size, share, marginal, w)
        grid = np.arange(window)
        worst = max(worst, level_of_table(table, prior,
                                          -lam * np.abs(grid[:, None] - grid[None, :])))
    return worst


def _count_vectors(total: int, parts: int) -> np.ndarray:
    """Every vector of `parts` non-negative integers summing to `total`, one per row."""
    if parts == 1:
        return np.array([[total]], dtype=np.int64)
    blocks = [np.column_stack([np.full(len(rest), first), rest])
              for first in range(total + 1)
              for rest in [_count_vectors(total - first, parts - 1)]]
    return np.vstack(blocks)


def _multinomial(counts: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Multinomial probability of each row of counts (0 ** 0 read as 1)."""
    total = int(counts[0].sum())
    log_factorial = np.array([lgamma(j + 1.0) for j in range(total + 1)])
    safe = np.log(np.where(probs > 0, probs, 1.0))
    impossible = ((counts > 0) & (probs == 0)[None, :]).any(axis=1)
    logs = log_factorial[total] - log_factorial[counts].sum(axis=1) + counts @ safe
    return np.where(impossible, 0.0, np.exp(logs))


def _smooth(log_mass: np.ndarray, log_kernel: np.ndarray) -> np.ndarray:
    """Apply the 1-D log kernel ln K[y, c] along every axis of a log pmf over count boxes.

    The noise is independent per coordinate, so the G-dimensional kernel is a product and
    Pr[y | t] = sum_c mass(c) prod_a K(y_a - c_a) is G one-axis contractions."""
    result = log_mass
    for axis in range(log_mass.ndim):
        moved = np.moveaxis(result, axis, -1)
        moved = _log_sum_exp(moved[..., None, :] + log_kernel)
        result = np.moveaxis(moved, -1, axis)
    return result


def grouped_household_level(model: HouseholdModel, rho: float, groups: object,
                            rate: float) -> float:
    """Exact IP level of a grouped COUNT by the column, one household alone (sound as above).

    groups[v] is the group (0..G-1) of value v; the answer is the vector of G counts with
    independent geometric noise of `rate` per coordinate. Given Z = z the housemates' count
    vector is multinomial; the output box is [0, s]^G, beyond which each coordinate's ratio
    is constant (exact_audit_vector's argument). Cost: G (s+1)^(G+1) per value of the column.
    """
    share = require_probability("rho", rho)
    lam = require_positive("rate", rate)
    marginal = np.array(model.marginal)
    labels = require_weights(groups, len(marginal))
    if labels.min() < 0:
        raise CalibrationError(f"groups must be integers >= 0, got {shown(groups)}")
    n_groups = int(labels.max()) + 1
    group_law = np.array([np.bincount(labels, weights=row, minlength=n_groups)
                          for row in member_given_latent(share, marginal)])
    posterior = latent_given_member(share, marginal)
    present = np.flatnonzero(marginal > 0)
    worst = 0.0
    for size in model.support_sizes:
        work = n_groups * (size + 1) ** (n_groups + 1)
        if work > MAX_GROUPED_WORK:
            raise CalibrationError(
                f"grouped level for households of {size} and {n_groups} groups needs {work} "
                f"terms; at most {MAX_GROUPED_WORK} are computed"
            )
        vectors = _count_vectors(size - 1, n_groups)
        housemates = np.array([_multinomial(vectors, law) for law in group_law])
        mixed = posterior[present] @ housemates
        grid = np.arange(size + 1)
        log_kernel = -lam * np.abs(grid[:, None] - grid[None, :])
        log_given = []
        for row, t in enumerate(present):
            box = np.zeros((size + 1,) * n_groups)
            own = vectors + np.eye(n_groups, dtype=np.int64)[labels[t]]
            box[tuple(own.T)] = mixed[row]
            with np.errstate(divide="ignore"):
                log_given.append(_smooth(np.log(box), log_kernel).ravel())
        stacked = np.array(log_given)
        log_output = _log_sum_exp(np.log(marginal[present])[None, :] + stacked.T)
        worst = max(worst, float((stacked - log_output[None, :]).max()))
    return worst


def predicate_weights(domain: int, values: Sequence[int] | int) -> np.ndarray:
    """COUNT weights: 1 for the listed value indices (the predicate A), 0 elsewhere."""
    listed = [values] if isinstance(values, int) else list(values)
    chosen = [require_int("predicate value", v, 0, domain - 1) for v in listed]
    weights = np.zeros(domain, dtype=np.int64)
    weights[chosen] = 1
    return weights

