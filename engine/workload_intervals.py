"""95% intervals of a linear combination of independent Laplace noises (a workload answer's
error), by inverting its characteristic function (docs/theory.md §18), and of a sum of n
independent discrete or continuous Laplace draws (a marginal summed from released cells, §22)."""

from __future__ import annotations

import functools
import math

import numpy as np

from .noise import NoiseKind, _accuracy, _sum_accuracy

GRID = 1e6  # coefficients are rounded up to multiples of 1/GRID of the largest one


def laplace_combination_halfwidth(coefficients: np.ndarray, scale: float, alpha: float) -> float:
    """An h with Pr[|Σ u_j·Z_j| <= h] >= 1 - alpha, the Z_j independent Laplace(0, scale):
    the exact quantile for the |u_j| rounded up to multiples of max|u| / GRID, which can only
    widen it (a sum of independent symmetric log-concave terms spreads as any |u_j| grows,
    Anderson's theorem), by at most a relative 1/GRID per coefficient."""
    u = np.abs(np.asarray(coefficients, dtype=float))
    top = float(u.max()) if u.size else 0.0
    if top == 0.0 or scale == 0.0:
        return 0.0
    steps = np.ceil(u[u > 0] / top * GRID - 1e-9).astype(np.int64)
    values, counts = np.unique(steps, return_counts=True)
    key = tuple(zip(values.tolist(), counts.tolist(), strict=True))
    return top * scale * _unit_halfwidth(key, alpha)


@functools.lru_cache(maxsize=4096)
def _unit_halfwidth(key: tuple[tuple[int, int], ...], alpha: float) -> float:
    """The 1 - alpha quantile of |Σ w_j Z_j|, Z_j standard Laplace, the weights given as
    (multiple of 1/GRID, how many) with the largest at least 1.

    Σ w_j Z_j has characteristic function φ(t) = Π 1 / (1 + w_j² t²), real and even, so
    Pr[|X| <= h] = (2/π) ∫_0^∞ sin(h t) / t · φ(t) dt (Gil-Pelaez), increasing in h; the h is
    found by root finding on that integral."""
    from scipy import integrate, optimize  # here, so that a query process does not load SciPy

    w2 = np.square(np.array([v for v, _ in key], dtype=float) / GRID)
    mult = np.array([c for _, c in key], dtype=float)

    def phi(t: float) -> float:
        return float(np.exp(-np.dot(mult, np.log1p(w2 * t * t))))

    variance = 2.0 * float(np.dot(mult, w2))
    cut = 200.0  # beyond it the integrand is handled by QUADPACK's Fourier-integral rule

    def coverage(h: float) -> float:
        head, _ = integrate.quad(lambda t: h * np.sinc(h * t / math.pi) * phi(t), 0.0, cut,
                                 limit=2000, epsabs=1e-11)
        tail, _ = integrate.quad(lambda t: phi(t) / t, cut, np.inf, weight="sin", wvar=h)
        return 2.0 / math.pi * (head + tail)

    high = math.sqrt(variance / alpha)  # Chebyshev: Pr[|X| > high] <= alpha
    return float(optimize.brentq(lambda h: coverage(h) - (1.0 - alpha), 1e-9, high,
                                 xtol=1e-10, rtol=1e-10))


EXACT_TERMS = 2_000_000  # beyond this many support points a discrete sum's quantile is bounded


def sum_halfwidth(mechanism: NoiseKind, scale: float, terms: int, alpha: float) -> float:
    """An h with Pr[|Z_1 + ... + Z_terms| > h] <= alpha, the Z_j independent draws of one
    mechanism's noise at `scale`: one draw's own (OpenDP's accuracy); the exact quantile for a
    sum of Laplace draws (`laplace_combination_halfwidth`) or of discrete Laplace draws
    (`_discrete_sum_halfwidth`); Chernoff's bound when the latter's support is too large."""
    if terms == 1 or scale == 0.0:
        return _accuracy(mechanism, scale, alpha)
    if mechanism == NoiseKind.LAPLACE:
        return laplace_combination_halfwidth(np.ones(terms), scale, alpha)
    exact = _discrete_sum_halfwidth(scale, terms, alpha)
    return _sum_accuracy(mechanism, scale, terms, alpha) if exact is None else exact


@functools.lru_cache(maxsize=4096)
def _discrete_sum_halfwidth(scale: float, terms: int, alpha: float) -> float | None:
    """The least integer h with Pr[|S| > h] <= alpha, S the sum of `terms` discrete Laplace
    draws, P(k) ∝ r^|k| with r = e^(-1/scale), or None when its support is too large to sum.

    A discrete Laplace draw is the difference of two independent geometric draws of success
    probability 1 - r, so S = X - Y with X, Y independent negative binomial (terms, 1 - r),
    and Pr[S = k] = Σ_y Pr[X = k + y]·Pr[Y = y], one correlation (by FFT) of X's
    probabilities over 0..N, N beyond which Pr[X > N] < alpha·1e-9. The mass cut off (at
    most 2·Pr[X > N]) is added to each tail whole, which can only widen h; by symmetry
    Pr[|S| > h] = 2·Pr[S >= h + 1]."""
    from scipy import signal, stats  # here, so that a query process does not load SciPy

    r = math.exp(-1.0 / scale)
    law = stats.nbinom(terms, 1.0 - r)
    last = int(law.isf(alpha * 1e-9)) + 1
    if last > EXACT_TERMS:
        return None
    p = law.pmf(np.arange(last + 1))
    pmf = np.clip(signal.fftconvolve(p, p[::-1]), 0.0, None)  # S = -last .. last
    above = np.cumsum(pmf[::-1])[::-1]  # above[last + m] = Pr[S >= m] (within the support)
    beyond = 2.0 * (above[last + 1:] + 2.0 * float(law.sf(last)))  # beyond[h] >= Pr[|S| > h]
    fits = np.nonzero(beyond <= alpha)[0]
    return float(fits[0]) if fits.size else None
