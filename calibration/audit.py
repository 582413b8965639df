"""Exact audit of a geometric-mechanism COUNT on a small joint pmf (docs/theory.md §9)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .errors import CalibrationError
from .validation import require_pmf, require_positive


@dataclass(frozen=True)
class Audit:
    """Measured IP level and mutual information of one mechanism on one joint pmf.

    worst_output is an integer r, or a string such as ">= 10" when the worst ratio is
    reached on a whole tail of outputs.
    """

    level: float
    mutual_information: float
    worst_individual: int
    worst_value: int
    worst_output: int | str


def count_nonzero(shape: tuple[int, ...]) -> np.ndarray:
    """f(x) = number of individuals whose value is not 0, for every x of the given shape."""
    return (np.indices(shape) != 0).sum(axis=0)


def query_values(shape: tuple[int, ...], query: object) -> np.ndarray:
    """Integer f(x) for every x: default count, a function of the index tuple, or an array."""
    if query is None:
        return count_nonzero(shape)
    if callable(query):
        values = np.array([query(index) for index in np.ndindex(*shape)], dtype=float)
        values = values.reshape(shape)
    else:
        values = np.asarray(query, dtype=float)
    if values.shape != shape:
        raise CalibrationError(
            f"query values must have the pmf's shape {shape}, got {values.shape}"
        )
    if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
        raise CalibrationError("query values must be integers (the geometric mechanism's support)")
    return values.astype(np.int64)


def _log_sum_exp(terms: np.ndarray) -> np.ndarray:
    """log sum exp over the last axis, with -inf terms allowed."""
    top = np.max(terms, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(terms - top).sum(axis=-1)) + top[..., 0]


def _value_table(pmf: np.ndarray, values: np.ndarray, i: int, low: int, size: int) -> np.ndarray:
    """Matrix J[t, v] = Pr[X_i = t, f(X) = low + v]."""
    joint = np.moveaxis(pmf, i, 0).reshape(pmf.shape[i], -1)
    counts = np.moveaxis(values, i, 0).reshape(pmf.shape[i], -1) - low
    rows = zip(counts, joint, strict=True)
    return np.array([np.bincount(c, weights=w, minlength=size) for c, w in rows])


def _audit(tables: Iterable[np.ndarray], value_mass: np.ndarray, log_kernel: np.ndarray,
           weights: np.ndarray, scale: float, describe: Callable[[int], int | str]) -> Audit:
    """The worst log ratio ln(Pr[X_i = t, Y = r] / (Pr[X_i = t] Pr[Y = r])) and max_i I(X_i; Y),
    from each individual's table J_i[t, v] = Pr[X_i = t, f = v] and value_mass[v] = Pr[f = v].
    log_kernel[r, v] is the log noise kernel; weights[r] folds each edge output's tail, whose
    ratio is constant (see exact_audit), into the information sum; describe names output r."""
    with np.errstate(divide="ignore"):
        log_output = _log_sum_exp(np.log(value_mass)[None, :] + log_kernel)
    best: tuple[float, int, int, int] = (-math.inf, 0, 0, 0)
    information = 0.0
    for i, table in enumerate(tables):
        marginal = table.sum(axis=1)
        present = np.flatnonzero(marginal > 0)
        with np.errstate(divide="ignore"):
            log_given = np.log(table[present] / marginal[present, None])
        log_joint = _log_sum_exp(log_given[:, None, :] + log_kernel[None, :, :])
        log_ratio = log_joint - log_output[None, :]
        row, column = (int(v) for v in np.unravel_index(np.argmax(log_ratio), log_ratio.shape))
        if log_ratio[row, column] > best[0]:
            best = (float(log_ratio[row, column]), i, int(present[row]), int(column))
        given_output = scale * np.exp(log_joint) * weights[None, :]
        information = max(information, float((marginal[present, None] * given_output * log_ratio).sum()))
    level, individual, value, column = best
    return Audit(level=level, mutual_information=information, worst_individual=individual,
                 worst_value=value, worst_output=describe(column))


def exact_audit(
    pmf: np.ndarray,
    eps_dp: float,
    query: Callable[[tuple[int, ...]], int] | np.ndarray | None = None,
) -> Audit:
    """Exact IP level and max_i I(X_i; Y) of the two-sided geometric mechanism on an integer query.

    Y = f(X) + noise with Pr[Y = r | x] = tanh(eps_dp / 2) exp(-eps_dp |r - f(x)|) over all
    integers r. The level is max over i, t (Pr[X_i = t] > 0) and r of
    ln(Pr[X_i = t, Y = r] / (Pr[X_i = t] Pr[Y = r])).

    Only the window r in [min f, max f] needs evaluating. For r >= max f every value v of
    f satisfies v <= r, so exp(-eps_dp |r - v|) = exp(-eps_dp (r - max f)) exp(-eps_dp (max f - v)):
    both Pr[X_i = t, Y = r] and Pr[Y = r] are their values at r = max f times the same
    factor, and the ratio is exactly constant on the whole upper tail (symmetrically below
    min f). The same factorisation sums each tail's contribution to the mutual information
    in closed form: sum_{j >= 1} exp(-eps_dp j) = 1 / expm1(eps_dp) times the boundary term.
    Nothing is truncated.
    """
    array = require_pmf("pmf", pmf)
    eps = require_positive("eps_dp", eps_dp)
    values = query_values(array.shape, query)
    low, high = int(values.min()), int(values.max())
    size = high - low + 1
    window = np.arange(size)
    log_kernel = -eps * np.abs(window[:, None] - window[None, :])
    weights = np.ones(size)
    weights[0] += 1.0 / math.expm1(eps)
    weights[-1] += 1.0 / math.expm1(eps)
    scale = math.tanh(eps / 2.0)

    value_mass = np.bincount(values.ravel() - low, array.ravel(), minlength=size)
    tables = (_value_table(array, values, i, low, size) for i in range(array.ndim))
    return _audit(tables, value_mass, log_kernel, weights, scale,
                  lambda column: _describe_output(column, low, size))


def _describe_output(column: int, low: int, size: int) -> int | str:
    """The worst output r, or the tail it stands for when it sits on the window's edge."""
    if size == 1:
        return "any"
    if column == size - 1:
        return f">= {low + column}"
    if column == 0:
        return f"<= {low}"
    return low + column


MAX_VECTOR_OUTPUTS = 1_000_000
"""Largest output window (product of the coordinates' ranges) exact_audit_vector enumerates."""


def exact_audit_vector(pmf: np.ndarray, eps_dp: float, values: np.ndarray) -> Audit:
    """Exact IP level and max_i I(X_i; Y) of independent geometric noise on an integer vector query.

    values has the pmf's shape plus one trailing axis: f(x) is a vector of d integers (a
    grouped COUNT, one coordinate per group), and Y_c = f_c(X) + noise_c with independent
    two-sided geometric noise exp(-eps_dp |r_c - f_c|) per coordinate. The kernel is a
    product over coordinates, so the tail argument of exact_audit holds coordinate by
    coordinate: the ratio is constant once r_c leaves [min f_c, max f_c], and only that box
    of outputs is enumerated, with each tail's mass summed in closed form.
    """
    array = require_pmf("pmf", pmf)
    eps = require_positive("eps_dp", eps_dp)
    vectors = np.asarray(values, dtype=float)
    if vectors.shape[:-1] != array.shape or vectors.ndim != array.ndim + 1:
        raise CalibrationError(
            f"vector query values must have shape {array.shape} + (d,), got {vectors.shape}"
        )
    if not np.all(np.isfinite(vectors)) or np.any(vectors != np.round(vectors)):
        raise CalibrationError("query values must be integers (the geometric mechanism's support)")
    flat = vectors.reshape(-1, vectors.shape[-1]).astype(np.int64)
    distinct, which = np.unique(flat, axis=0, return_inverse=True)
    which = which.reshape(-1)
    low, high = distinct.min(axis=0), distinct.max(axis=0)
    sizes = high - low + 1
    if int(np.prod(sizes)) > MAX_VECTOR_OUTPUTS:
        raise CalibrationError(
            f"vector audit would enumerate {int(np.prod(sizes))} outputs; at most "
            f"{MAX_VECTOR_OUTPUTS} are"
        )
    outputs = np.moveaxis(np.indices(tuple(sizes)), 0, -1).reshape(-1, len(sizes)) + low
    log_kernel = -eps * np.abs(outputs[:, None, :] - distinct[None, :, :]).sum(axis=-1)
    tail = 1.0 / math.expm1(eps)
    edge_weight = (1.0 + tail * ((outputs == low) + (outputs == high))).prod(axis=1)
    scale = math.tanh(eps / 2.0) ** len(sizes)

    mass = array.reshape(-1)

    members = np.indices(array.shape).reshape(array.ndim, -1)
    tables = (
        np.array([np.bincount(which[member == t], mass[member == t], minlength=len(distinct))
                  for t in range(array.shape[i])])
        for i, member in enumerate(members)
    )
    return _audit(tables, np.bincount(which, mass, minlength=len(distinct)), log_kernel,
                  edge_weight, scale, lambda column: str(tuple(int(v) for v in outputs[column])))
