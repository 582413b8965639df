"""Households with a latent shared value: the joint pmf of one household and its exact eta."""

from __future__ import annotations

from functools import reduce
from itertools import combinations
from math import comb, lgamma

import numpy as np

from .errors import CalibrationError
from .validation import require_int, require_pmf, require_probability

MAX_PMF_ENTRIES = 1 << 24
"""Largest household pmf household_pmf will build (d ** k entries)."""

MAX_COUNT_VECTORS = 2_000_000
"""Largest number of housemate count vectors enumerated for an exact eta."""


def member_given_latent(rho: float, marginal: np.ndarray) -> np.ndarray:
    """Matrix P[z, v] = Pr[member = v | Z = z] = rho [v = z] + (1 - rho) marginal[v]."""
    return rho * np.eye(len(marginal)) + (1.0 - rho) * marginal[None, :]


def household_inputs(k: object, rho: object, marginal: object) -> tuple[int, float, np.ndarray]:
    """Check the household parameters: k integer >= 1, rho in [0, 1], marginal a 1-D pmf."""
    size = require_int("k", k, 1)
    share = require_probability("rho", rho)
    probs = require_pmf("marginal", marginal)
    if probs.ndim != 1:
        raise CalibrationError(f"marginal must be a 1-D pmf over values, got shape {probs.shape}")
    return size, share, probs


def household_pmf(k: int, rho: float, marginal: np.ndarray) -> np.ndarray:
    """Joint pmf of one household of k members sharing a latent Z ~ marginal, one axis each."""
    k, rho, marginal = household_inputs(k, rho, marginal)
    d = len(marginal)
    if d**k > MAX_PMF_ENTRIES:
        raise CalibrationError(
            f"household pmf would have {d}**{k} entries; at most {MAX_PMF_ENTRIES} are built"
        )
    given = member_given_latent(rho, marginal)
    joint = np.zeros((d,) * k)
    for z in np.flatnonzero(marginal > 0):
        joint += marginal[z] * reduce(np.multiply.outer, [given[z]] * k)
    return joint


def count_vectors(total: int, parts: int) -> np.ndarray:
    """Every vector of `parts` non-negative integers summing to `total`, one per row."""
    if parts == 1:
        return np.array([[total]])
    blocks = []
    for first in range(total + 1):
        rest = count_vectors(total - first, parts - 1)
        blocks.append(np.column_stack([np.full(len(rest), first), rest]))
    return np.vstack(blocks)


def multinomial_log_pmf(counts: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Log multinomial probability of each row of counts (0 * log 0 read as 0)."""
    total = int(counts[0].sum())
    log_factorial = np.array([lgamma(j + 1.0) for j in range(total + 1)])
    log_coef = log_factorial[total] - log_factorial[counts].sum(axis=1)
    terms = counts * np.log(np.where(probs > 0, probs, 1.0))[None, :]
    impossible = ((counts > 0) & (probs == 0)[None, :]).any(axis=1)
    return np.where(impossible, -np.inf, log_coef + terms.sum(axis=1))


def household_eta(k: int, rho: float, marginal: np.ndarray) -> float:
    """Exact eta of the household model.

    Given X_i = t the latent value is t with probability rho and a fresh draw otherwise,
    so Pr[housemates = x | X_i = t] - Pr[... | X_i = t'] = rho (P_t^(k-1)(x) - P_t'^(k-1)(x)),
    where P_t = Pr[member | Z = t] and P_t^(k-1) is k - 1 independent draws from it. Hence
    eta = rho * max_{t,t'} TV(P_t^(k-1), P_t'^(k-1)); households are independent, so people
    outside the household do not change it. The TV of two product laws equals the TV of
    their count vectors (both are uniform within a count class), enumerated exactly.
    """
    k, rho, marginal = household_inputs(k, rho, marginal)
    support = marginal[marginal > 0]
    if k == 1 or len(support) < 2:
        return 0.0
    support = support / support.sum()
    given = member_given_latent(rho, support)
    n_vectors = comb(k - 1 + len(support) - 1, len(support) - 1)
    if n_vectors > MAX_COUNT_VECTORS:
        raise CalibrationError(
            f"household with k={k} and {len(support)} values needs {n_vectors} count vectors; "
            f"at most {MAX_COUNT_VECTORS} are enumerated"
        )
    counts = count_vectors(k - 1, len(support))
    laws = [np.exp(multinomial_log_pmf(counts, given[t])) for t in range(len(support))]
    tv = max(0.5 * float(np.abs(a - b).sum()) for a, b in combinations(laws, 2))
    return min(1.0, rho * tv)
