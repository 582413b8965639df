"""The 95% interval of a cell summed from released cells of several answers: a sum of
independent draws of one mechanism at several scales (docs/theory.md §22, several answers).
Exact for Laplace (the workload's characteristic-function inversion) and for discrete Laplace
(a convolution of the exact laws), never narrower than the true quantile."""

from __future__ import annotations

import functools
import math

import numpy as np

from .noise import NoiseKind, _sum_accuracy
from .workload_intervals import EXACT_TERMS, laplace_combination_halfwidth, sum_halfwidth


def mixed_sum_halfwidth(mechanism: NoiseKind, terms: tuple[tuple[float, int], ...],
                        alpha: float) -> float:
    """An h with Pr[|S| > h] <= alpha, S the sum of independent draws of `mechanism`'s noise,
    `count` of them at each `(scale, count)` of `terms`. One scale: `sum_halfwidth`. Laplace:
    Σ s_j·Z_j with Z_j standard Laplace, inverted exactly (`laplace_combination_halfwidth`).
    Discrete Laplace: the least integer h whose tail, computed from the exact law, is at most
    alpha (`_discrete_mixed_halfwidth`); a Chernoff bound when that law is too wide to sum."""
    merged: dict[float, int] = {}
    for scale, count in terms:
        if count > 0 and scale > 0:
            merged[scale] = merged.get(scale, 0) + count
    if not merged:
        return 0.0
    if len(merged) == 1:
        ((scale, count),) = merged.items()
        return sum_halfwidth(mechanism, scale, count, alpha)
    if mechanism == NoiseKind.LAPLACE:
        scales = np.repeat(np.array(list(merged), dtype=float), list(merged.values()))
        return laplace_combination_halfwidth(scales, 1.0, alpha)
    key = tuple(sorted(merged.items()))
    exact = _discrete_mixed_halfwidth(key, alpha)
    if exact is not None:
        return exact
    # Chernoff for the whole sum at the largest scale: each draw at a smaller scale is a
    # smaller mean-zero log-concave spread, so its moment generating function is below it.
    return _sum_accuracy(mechanism, max(merged), sum(merged.values()), alpha)


@functools.lru_cache(maxsize=1024)
def _discrete_mixed_halfwidth(key: tuple[tuple[float, int], ...], alpha: float) -> float | None:
    """The least integer h with an upper bound of Pr[|S| > h] at most alpha, S the sum of
    independent discrete Laplace draws (P(k) ∝ r^|k|, r = e^(-1/scale)), `count` at each
    scale of `key`; None when the law is too wide to sum exactly.

    The draws at one scale sum to X - Y, X and Y independent negative binomial (count, 1 - r),
    whose law on -N..N is one correlation of X's probabilities (as `sum_halfwidth`); the laws
    of the scales are convolved. Each truncation at N (Pr[X > N] < alpha·1e-9) cuts at most
    2·Pr[X > N] of mass, and all the mass cut is added whole to each tail, which can only
    widen h."""
    from scipy import signal, stats  # here, not at import: a query process never loads SciPy

    pmf = np.ones(1)
    cut = 0.0
    for scale, count in key:
        law = stats.nbinom(count, 1.0 - math.exp(-1.0 / scale))
        last = int(law.isf(alpha * 1e-9)) + 1
        if last > EXACT_TERMS or pmf.size + 2 * last > 2 * EXACT_TERMS:
            return None
        p = law.pmf(np.arange(last + 1))
        pmf = np.clip(signal.fftconvolve(pmf, signal.fftconvolve(p, p[::-1])), 0.0, None)
        cut += 2.0 * float(law.sf(last))
    middle = pmf.size // 2  # the law is symmetric about 0, at index `middle`
    above = np.cumsum(pmf[::-1])[::-1]  # above[middle + m] = Pr[S >= m] within the support
    beyond = 2.0 * (above[middle + 1:] + cut)  # beyond[h] >= Pr[|S| > h]
    fits = np.nonzero(beyond <= alpha)[0]
    return float(fits[0]) if fits.size else None
