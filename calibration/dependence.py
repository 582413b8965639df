"""Exact (k, eta) of a small joint pmf: the TV bound eta and the JOINT-reading group size k."""

from __future__ import annotations

from itertools import combinations

import numpy as np

INDEPENDENCE_TOLERANCE = 1e-14
"""Largest absolute pmf difference still read as exact independence: float rounding of a
product pmf is ~1e-16; a weak real dependence (rho = 1e-6 in a household of two moves entries
by ~2e-13) must not be read as independence, which would report eta = 0."""


def conditional_rows(pmf: np.ndarray, i: int) -> np.ndarray:
    """Rows Pr[X_(i) = . | X_i = t] for every t with Pr[X_i = t] > 0, others flattened."""
    table = np.moveaxis(pmf, i, 0).reshape(pmf.shape[i], -1)
    mass = table.sum(axis=1)
    keep = mass > 0
    return table[keep] / mass[keep, None]


def eta_of_pmf(pmf: np.ndarray) -> float:
    """Max over i and value pairs of the TV distance between the others' conditionals (§3)."""
    eta = 0.0
    for i in range(pmf.ndim):
        rows = conditional_rows(pmf, i)
        for a, b in combinations(range(len(rows)), 2):
            eta = max(eta, 0.5 * float(np.abs(rows[a] - rows[b]).sum()))
    return min(eta, 1.0)


def _split_is_independent(pmf: np.ndarray, rest: tuple[int, ...]) -> bool:
    """True if the axes in rest, taken together, are independent of all other axes."""
    inside = tuple(axis for axis in range(pmf.ndim) if axis not in rest)
    product = pmf.sum(axis=rest, keepdims=True) * pmf.sum(axis=inside, keepdims=True)
    return bool(np.max(np.abs(pmf - product)) <= INDEPENDENCE_TOLERANCE)


def smallest_dependent_set(pmf: np.ndarray, i: int) -> tuple[int, ...]:
    """Smallest D_i such that the others outside D_i are jointly independent of (X_i, X_D_i).

    Any valid D_i contains every j with X_j not independent of X_i (an outsider must be
    independent of X_i on its own), so only supersets of those are searched. Validity is
    not monotone in D (moving an independent record into D can break the independence of
    the remainder from the enlarged group), so the supersets are tried in order of size;
    the full set of others (empty remainder) always qualifies.
    """
    others = tuple(axis for axis in range(pmf.ndim) if axis != i)
    required = tuple(j for j in others if not _pair_is_independent(pmf, i, j))
    optional = tuple(j for j in others if j not in required)
    for size in range(len(optional)):
        for extra in combinations(optional, size):
            rest = tuple(axis for axis in optional if axis not in extra)
            if _split_is_independent(pmf, rest):
                return tuple(sorted(required + extra))
    return others


def _pair_is_independent(pmf: np.ndarray, i: int, j: int) -> bool:
    """True if X_i and X_j are independent (within the tolerance)."""
    rest = tuple(axis for axis in range(pmf.ndim) if axis not in (i, j))
    return _split_is_independent(pmf.sum(axis=rest), (1,))


def k_of_pmf(pmf: np.ndarray) -> int:
    """Smallest k such that every individual has a D_i of at most k - 1 others (joint reading)."""
    return 1 + max(len(smallest_dependent_set(pmf, i)) for i in range(pmf.ndim))


def eta_of_pmf_columns(pmf: np.ndarray, record: tuple[int, ...], read: tuple[int, ...]) -> float:
    """Brute-force eta_S of a joint pmf whose axes are individuals' FULL records (flattened from
    shape `record`): condition on one individual's whole record, project every other record
    onto the columns `read` (axes of `record`), and take the largest TV over value pairs."""
    others = pmf.ndim - 1
    unread = tuple(axis for axis in range(len(record)) if axis not in read)
    eta = 0.0
    for i in range(pmf.ndim):
        rows = conditional_rows(pmf, i).reshape((-1,) + record * others)
        drop = tuple(1 + j * len(record) + axis for j in range(others) for axis in unread)
        projected = rows.sum(axis=drop).reshape(len(rows), -1)
        for a, b in combinations(range(len(projected)), 2):
            eta = max(eta, 0.5 * float(np.abs(projected[a] - projected[b]).sum()))
    return min(eta, 1.0)
