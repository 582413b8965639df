"""IP level of answers that read several time points of a person's Markov chain together.

A transcript whose answers read any sets of time points is E_t-DP in each record of time t
(E_t the total eps_dp of the answers reading t). `series_levels` bounds every record's IP
level for ANY such transcript with Markov quilts (Song, Wang & Chaudhuri, SIGMOD 2017): the
records between a record and a quilt are changed together (group privacy), and the quilt cuts
the rest off, costing its max-influence. `series_exact_level` is the exact level of one noisy
count over a set of time points (forward-backward over (state, partial count)), which the
bound must never be below. docs/theory.md §20.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from .errors import CalibrationError
from .model_markov import MAX_TIMES, MarkovModel, _fraction, require_spend
from .validation import require_positive

MAX_QUILT = 5000
"""Farthest quilt node from a record (steps); farther quilts are not tried (the bound stays
valid: a smaller family of quilts gives a larger minimum)."""

NEGLIGIBLE = 1e-13
"""Influence below which a farther quilt cannot help (influence never grows with distance)."""

CACHE_SIZE = 64
"""Chains whose quilt influences are kept per process (a few MB at T = 10,000)."""

CHUNK = 16
"""Quilt distances tried at once before checking whether a farther one can still help."""

MAX_EXACT_TIMES = 400
"""Most time points the exact forward-backward level is computed over (cost T^3 D^2)."""


def _log_ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """log(top / bottom) entrywise, inf where only the bottom is 0, 0 where both are."""
    with np.errstate(divide="ignore"):
        return np.log(_fraction(top, bottom))


def _influences(power: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From P^s: the forward influence F[x, x'] = max_v log P^s(x, v) / P^s(x', v) and the
    backward ratios K[u, x, x'] = log P^s(u, x) / P^s(u, x') (before the prior's factor)."""
    forward = _log_ratio(power[:, None, :], power[None, :, :]).max(axis=-1)
    backward = _log_ratio(power[:, :, None], power[:, None, :])
    return forward, backward


@lru_cache(maxsize=CACHE_SIZE)
def quilt_influences(model: MarkovModel, times: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The max-influences of every quilt side, which depend on the model and T only (cached):
    forward[s - 1, x, x'] of the point s steps ahead, and reach[m, s - 1, x, x'] the backward
    ratio max over u of positive prior (support pattern m) s steps behind, with `which[t]`
    the support pattern of time t. Steps stop once every influence is below NEGLIGIBLE
    (influence never grows with distance) or at MAX_QUILT."""
    matrix = model.matrix
    laws = _laws(model, times)
    masks, which = np.unique(laws > 0, axis=0, return_inverse=True)
    relevant = (laws[:, :, None] > 0) & (laws[:, None, :] > 0)
    prior = _log_ratio(laws[:, None, :], laws[:, :, None])
    power = np.eye(len(model.initial))
    forwards, reaches = [], []
    for _ in range(1, min(times, MAX_QUILT + 1)):
        power = power @ matrix
        forward, backward = _influences(power)
        reach = np.stack([np.where(m[:, None, None], backward, -np.inf).max(axis=0)
                          for m in masks])
        forwards.append(forward)
        reaches.append(reach)
        with np.errstate(invalid="ignore"):
            past = np.where(relevant[None], reach[:, None] + prior[None], 0.0)
        if max(float(np.nan_to_num(forward, nan=np.inf).max()),
               float(np.nan_to_num(past, nan=np.inf).max())) < NEGLIGIBLE:
            break
    domain = len(model.initial)
    forward_all = np.array(forwards).reshape(-1, domain, domain)
    reach_all = np.array(reaches).reshape(len(forwards), len(masks), domain, domain)
    return forward_all, np.moveaxis(reach_all, 0, 1), np.asarray(which).reshape(-1)


def pair_bounds(model: MarkovModel, spend: object) -> np.ndarray:
    """B[d, x, x'] >= sup_y ln P(y | X_d = x) / P(y | X_d = x') for every transcript that is
    E_t-DP in the record of time t (docs/theory.md §20).

    For a quilt {X_(d-a), X_(d+b)} (a side may be absent: the chain's end) the records strictly
    between are N; given the quilt, the rest is independent of (X_d, X_N), so the ratio is at
    most exp(E_d + sum_N E_t) (group privacy over N and d) times the quilt's max-influence
    sup P(q | x) / P(q | x'), which factorises into a past and a future side. The best quilt
    is taken per pair and per side (quilt_influences lists the sides tried). Pairs holding a
    value of prior 0 at d are 0 (no such record exists)."""
    energy = _energy(spend)
    times = len(energy)
    domain = len(model.initial)
    laws = _laws(model, times)
    forward, reach, which = quilt_influences(model, times)
    steps = np.arange(1, len(forward) + 1)
    prefix = np.concatenate([[0.0], np.cumsum(energy)])
    relevant = (laws[:, :, None] > 0) & (laws[:, None, :] > 0)
    prior = _log_ratio(laws[:, None, :], laws[:, :, None])
    width = len(steps)
    days, inverse = _distinct_days(energy, which, prior, relevant, width)
    right = np.where((times - 1 - days <= width)[:, None, None],
                     (prefix[times] - prefix[days + 1])[:, None, None], np.inf)
    right = np.broadcast_to(right, (len(days), domain, domain)).copy()
    left = np.where((days <= width)[:, None, None], prefix[days][:, None, None], np.inf)
    left = np.broadcast_to(left, (len(days), domain, domain)).copy()
    for first in range(0, width, CHUNK):
        chunk = steps[first:first + CHUNK]
        ahead = days[:, None] + chunk[None, :]
        between = np.where(ahead <= times - 1, prefix[np.minimum(ahead, times)]
                           - prefix[days + 1][:, None], np.inf)
        right = np.minimum(right, (between[:, :, None, None] + forward[chunk - 1][None])
                           .min(axis=1))
        behind = days[:, None] - chunk[None, :]
        between_past = np.where(behind >= 0, prefix[days][:, None]
                                - prefix[np.maximum(behind, 0) + 1], np.inf)
        with np.errstate(invalid="ignore"):
            past = reach[which[np.maximum(behind, 0)], chunk[None, :] - 1] + prior[days][:, None]
        past = np.nan_to_num(past, nan=np.inf)
        left = np.minimum(left, (between_past[:, :, None, None] + past).min(axis=1))
        # influence is >= 0, so a farther quilt costs at least the records it adds
        if _settled(prefix, days, times, int(chunk[-1]) + 1, left, right, relevant[days]):
            break
    bounds = np.where(relevant[days], energy[days][:, None, None] + left + right, 0.0)
    bounds[:, np.arange(domain), np.arange(domain)] = 0.0
    return bounds[inverse]


def _distinct_days(energy: np.ndarray, which: np.ndarray, prior: np.ndarray,
                   relevant: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """One time point per class of points whose bounds are equal, and each point's class.

    A point's bounds depend only on the spending within `width` of it (its position against
    the chain's ends included, by a sentinel -1), the support patterns `width` behind, its
    prior and which pairs occur, because the side without a quilt (the chain's end) is tried
    only within `width` of that end: farther, the quilt `width` away costs the records it
    spans plus an influence below NEGLIGIBLE, no more than the end's (or, when the steps
    stopped at T or MAX_QUILT, a dropped option only makes the bound larger). Points are
    grouped by a hash of their spending window, and every group is then checked exactly."""
    times = len(energy)
    pad = np.full(width, -1.0)
    spends = np.lib.stride_tricks.sliding_window_view(np.concatenate([pad, energy, pad]),
                                                      2 * width + 1)
    static = _static_classes(which.astype(np.int64).tobytes(), prior.tobytes(),
                             relevant.tobytes(), times, width)
    # Fixed irrational weights (no random draw): any weights group points; each group is then
    # checked exactly, so the grouping's choice never changes a bound.
    probe = np.sqrt(np.arange(2, 2 * width + 3, dtype=float)) % 1.0 + 0.5
    hashed = np.convolve(np.concatenate([pad, energy, pad]), probe[::-1], mode="valid")
    order = np.lexsort((hashed, static))
    change = np.concatenate([[True], (np.diff(hashed[order]) != 0)
                             | (np.diff(static[order]) != 0)])
    labels = np.empty(times, dtype=np.int64)
    labels[order] = np.cumsum(change) - 1
    first = order[change]
    if (spends == spends[first][labels]).all():
        return first, labels
    rows = np.ascontiguousarray(np.concatenate([spends, static[:, None].astype(float)], axis=1))
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first, np.asarray(inverse).reshape(-1)


@lru_cache(maxsize=CACHE_SIZE)
def _static_classes(which: bytes, prior: bytes, relevant: bytes, times: int,
                    width: int) -> np.ndarray:
    """Classes of points with equal support patterns `width` behind, prior ratios and
    occurring pairs (exact, cached per chain and T)."""
    support = np.frombuffer(which, dtype=np.int64).astype(float)
    windows = np.lib.stride_tricks.sliding_window_view(
        np.concatenate([np.full(width, -1.0), support]), width)[:times]
    rows = np.ascontiguousarray(np.concatenate(
        [windows, np.frombuffer(prior).reshape(times, -1),
         np.frombuffer(relevant, dtype=bool).reshape(times, -1).astype(float)], axis=1))
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, inverse = np.unique(keys, return_inverse=True)
    return np.asarray(inverse).reshape(-1)


def series_levels(model: MarkovModel, spend: object) -> np.ndarray:
    """Upper bound on the IP level of each time point's record for ANY transcript that is
    E_t-DP in the records of time t: Definition 3's ratio P(y | x) / P(y) is at most
    1 / sum_x' pi_d(x') exp(-B[d, x, x']) (P(y) mixes the P(y | x') over the prior)."""
    bounds = pair_bounds(model, spend)
    laws = _laws(model, len(bounds))
    inverse = (laws[:, None, :] * np.exp(-bounds)).sum(axis=2)
    with np.errstate(divide="ignore"):
        levels = np.where(laws > 0, -np.log(inverse), 0.0).max(axis=1)
    return np.maximum(levels, 0.0)


def series_exact_level(model: MarkovModel, eps_dp: float, points: Iterable[int],
                       weights: Iterable[int] | None = None) -> float:
    """Exact IP level (max over records) of sum_{t in points} w(X_t) plus two-sided geometric
    noise of rate eps_dp, for one person's chain (other people only lower it, §14).

    Forward alpha_t(x, s) = P(X_t = x, partial sum s) and backward beta_t(x, s) = P(rest of the
    sum s | X_t = x) give P(S = s, X_d = x) for every d; the level is max over d, x and the
    window of outputs of ln P(y | x) / P(y), constant beyond the window (exact_audit)."""
    rate = require_positive("eps_dp", eps_dp)
    read = sorted(set(int(t) for t in points))
    domain = len(model.initial)
    w = np.arange(domain) if weights is None else np.array(list(weights), dtype=int)
    if len(w) != domain or (w < 0).any():
        raise CalibrationError(f"weights must be {domain} integers >= 0, got {list(w)}")
    if not read or read[0] < 0:
        raise CalibrationError(f"points must be time points >= 0, got {read}")
    times = int(read[-1]) + 1
    if times > MAX_EXACT_TIMES:
        raise CalibrationError(f"the exact level is computed over at most {MAX_EXACT_TIMES} "
                               f"time points, got {times}")
    top: int = int(w.max()) * len(read) + 1
    taken = np.zeros(times, dtype=bool)
    taken[read] = True
    forward = np.zeros((times, domain, top))
    forward[0, :, 0] = model.initial
    forward[0] = _shift(forward[0], w, taken[0])
    for t in range(1, times):
        forward[t] = _shift(model.matrix.T @ forward[t - 1], w, taken[t])
    backward = np.zeros((times, domain, top))
    backward[-1, :, 0] = 1.0
    for t in range(times - 2, -1, -1):
        backward[t] = model.matrix @ _shift(backward[t + 1], w, taken[t + 1])
    joint = np.zeros((times, domain, top))
    for t in range(times):
        for x in range(domain):
            joint[t, x] = np.convolve(forward[t, x], backward[t, x])[:top]
    total = joint[0].sum(axis=0)
    window = np.arange(top)
    kernel = np.exp(-rate * np.abs(window[:, None] - window[None, :]))
    output = kernel @ total
    level = 0.0
    for t in range(times):
        law = joint[t].sum(axis=1)
        for value in np.flatnonzero(law > 0):
            ratio = (kernel @ (joint[t, value] / law[value])) / output
            level = max(level, float(np.log(ratio[output > 0]).max()))
    return max(0.0, level) if math.isfinite(level) else level


def _shift(table: np.ndarray, weights: np.ndarray, taken: bool) -> np.ndarray:
    """Add w(x) to the partial sum of state x's row when the time point is read."""
    if not taken:
        return table
    out = np.zeros_like(table)
    for x, w in enumerate(weights):
        out[x, int(w):] = table[x, :table.shape[1] - int(w)]
    return out


def _settled(prefix: np.ndarray, days: np.ndarray, times: int, step: int, left: np.ndarray,
             right: np.ndarray, relevant: np.ndarray) -> bool:
    """Whether no quilt `step` or more points away can lower any bound: the records between
    already cost at least the best bound of each side (influence adds to that)."""
    ahead = np.minimum(days + step, times)
    cost_ahead = np.where(days + step <= times - 1, prefix[ahead] - prefix[days + 1], np.inf)
    behind = np.maximum(days - step, 0)
    cost_behind = np.where(days - step >= 0, prefix[days] - prefix[behind + 1], np.inf)
    with np.errstate(invalid="ignore"):
        best_right = np.where(relevant, right, -np.inf).max(axis=(1, 2))
        best_left = np.where(relevant, left, -np.inf).max(axis=(1, 2))
    return bool((cost_ahead >= best_right).all() and (cost_behind >= best_left).all())


@lru_cache(maxsize=CACHE_SIZE)
def _laws(model: MarkovModel, times: int) -> np.ndarray:
    """The marginal laws of the chain's T points (cached with the influences)."""
    return model.marginals(times)


def _energy(spend: object) -> np.ndarray:
    """spend as floats, checked at once (require_spend names the first bad entry)."""
    if isinstance(spend, tuple | list | np.ndarray):
        try:
            values = np.asarray(spend, dtype=float)
        except (TypeError, ValueError):
            return require_spend(spend)
        if values.ndim == 1 and 0 < len(values) <= MAX_TIMES and np.isfinite(values).all() \
                and (values >= 0).all():
            return values
    return require_spend(spend)
