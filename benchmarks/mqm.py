"""The Markov Quilt Mechanism's synthetic table beside dpsql's whole-series calibration.

    python -m benchmarks.mqm [--times 100 10000] [--epsilon 1.0]

Song, Wang & Chaudhuri (SIGMOD 2017), synthetic experiment: binary chains
M = [[1 - q, q], [1 - p, p]] (q = P(1 | 0), p = P(1 | 1)), stationary start, T points, the
count of 1s over the chain, epsilon = 1, (q, p) over {0.1, ..., 0.9}^2. For each pair and T it
prints the Laplace scale (sensitivity 1 / eps_dp) of:

* MQMExact: sigma = max_i min_Q card(N_Q + i) / (epsilon - e_Q) over the quilts
  {X_(i-a), X_(i+b)} (a side may be the chain's end), e_Q the exact max-influence, computed
  here from the definitions (independently of dpsql's code);
* MQMApprox: the same search over quilts a, b >= 2 ln(1 / pi_min) / g of a middle node, with
  e_Q bounded by ln((pi_min + e^(-g b)) / (pi_min - e^(-g b))) + 2 ln((pi_min + e^(-g a)) /
  (pi_min - e^(-g a))), g = 1 - |p - q| the eigengap (our reading of the paper's lemma), and
  the trivial quilt (T / epsilon);
* GK16 (Ghosh & Kleinberg 2016): 1 / (epsilon (1 - rho)) with rho the spectral radius of the
  tridiagonal influence matrix, each entry the largest log-ratio by which one neighbour moves
  a point's conditional law given the rest (our reconstruction; '-' where rho >= 1);
* dpsql before whole-series answers: the tight map with k = T and the chain's exact eta;
* dpsql now, mode model: the default cap 10 and cap 1 (at most the larger of the tight map's
  and the quilt ratio bound's eps_dp), and at T <= 400 the exact level of the count at the
  cap-10 eps_dp (forward-backward, docs/theory.md §20); the cap-1 column only at T <= 400
  (each calibration at T = 10,000 takes about 15 s).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from dpsql.calibration import DependenceModel, MarkovModel
from dpsql.calibration.declared import DeclaredModel, SeriesPoints
from dpsql.calibration.model_markov import chain_eta
from dpsql.calibration.model_series import MAX_EXACT_TIMES, series_exact_level

GRID = tuple(round(0.1 * i, 1) for i in range(1, 10))
WINDOW = 400  # farthest quilt distance MQM is searched over (influence is ~0 far before)


def chain(q: float, p: float) -> MarkovModel:
    """M = [[1 - q, q], [1 - p, p]] from its stationary law."""
    return MarkovModel.binary(q, 1.0 - p)


def influences(model: MarkovModel, window: int) -> tuple[np.ndarray, np.ndarray]:
    """back[s, x, x'] and ahead[s, x, x'] = max log-ratio of X_(i-s), X_(i+s) given X_i = x
    against x' (stationary start), s = 0..window (index 0 unused)."""
    pi = np.array(model.initial)
    power = np.eye(2)
    back = np.zeros((window + 1, 2, 2))
    ahead = np.zeros((window + 1, 2, 2))
    for s in range(1, window + 1):
        power = power @ model.matrix
        with np.errstate(divide="ignore"):
            ahead[s] = np.log(power[:, None, :] / power[None, :, :]).max(axis=-1)
            given = pi[:, None] * power / pi[None, :]  # P(X_(i-s) = u | X_i = x) at [u, x]
            back[s] = np.log(given.T[:, None, :] / given.T[None, :, :]).max(axis=-1)
    return back, ahead


def mqm_exact(model: MarkovModel, times: int, epsilon: float) -> float:
    """max over nodes of min over quilts of card / (epsilon - e_Q) (the end nodes and one
    middle node: a stationary chain's nodes farther than the window from both ends agree)."""
    back, ahead = influences(model, min(WINDOW, times - 1))
    settled = np.flatnonzero(np.maximum(back, ahead).max(axis=(1, 2))[1:] < 1e-13)
    window = int(settled[0]) + 1 if len(settled) else len(back) - 1  # farther never helps
    nodes = sorted(set(range(min(times, window + 1))) | {times // 2} |
                   set(range(max(0, times - window - 1), times)))
    worst = 0.0
    for i in nodes:
        lefts = [(i, np.zeros((2, 2)))] + [(a - 1, back[a]) for a in range(1, min(i, window) + 1)]
        rights = [(times - 1 - i, np.zeros((2, 2)))] + [
            (b - 1, ahead[b]) for b in range(1, min(times - 1 - i, window) + 1)]
        left_card = np.array([c for c, _ in lefts])
        right_card = np.array([c for c, _ in rights])
        left_e = np.stack([e for _, e in lefts])
        right_e = np.stack([e for _, e in rights])
        e = (left_e[:, None] + right_e[None, :]).max(axis=(2, 3))
        card = left_card[:, None] + right_card[None, :] + 1
        with np.errstate(divide="ignore"):
            sigma = np.where(e < epsilon, card / (epsilon - e), np.inf)
        worst = max(worst, float(sigma.min()))
    return worst


def mqm_approx(q: float, p: float, times: int, epsilon: float) -> float:
    """The eigengap bound of a middle node's quilts, or the trivial quilt."""
    pi_min = min(q, 1.0 - p) / (q + 1.0 - p)
    gap = 1.0 - abs(p - q)
    best = times / epsilon
    if gap <= 0.0:
        return best
    start = max(1, math.ceil(2.0 * math.log(1.0 / pi_min) / gap))
    for a in range(start, min(times, WINDOW) + 1):
        for b in range(start, min(times, WINDOW) + 1):
            fa, fb = math.exp(-gap * a), math.exp(-gap * b)
            if fa >= pi_min or fb >= pi_min:
                continue
            e = math.log((pi_min + fb) / (pi_min - fb)) + 2 * math.log((pi_min + fa) / (pi_min - fa))
            if e < epsilon:
                best = min(best, (a + b - 1) / (epsilon - e))
    return best


def gk16(model: MarkovModel, times: int, epsilon: float) -> float:
    """1 / (epsilon (1 - rho)) for the tridiagonal influence matrix, or inf if rho >= 1."""
    m = model.matrix
    conditional = m[:, :, None] * m[None, :, :]  # [u, x, v] proportional to P(x | u, v)
    conditional = conditional / conditional.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        logs = np.log(conditional)
    ahead = float(np.abs(logs[:, :, :, None] - logs[:, :, None, :]).max())  # change v
    behind = float(np.abs(logs[:, None, :, :] - logs[None, :, :, :]).max())  # change u
    rho = 2.0 * math.sqrt(ahead * behind) * math.cos(math.pi / (times + 1))
    return math.inf if rho >= 1.0 else 1.0 / (epsilon * (1.0 - rho))


def dpsql(model: MarkovModel, times: int, epsilon: float, cap: float) -> tuple[float, float]:
    """(eps_dp, tight eps_dp) of a count over every point, under mode model."""
    declared = DeclaredModel("markov", "r", "x", (0, 1), cap, chain=model, time="t", first=0,
                             last=times - 1)
    query = DependenceModel(times, chain_eta(model, times))
    return declared.calibrate(epsilon, query, SeriesPoints(range(times)))


def shown(value: float) -> str:
    return "-" if math.isinf(value) or value == 0.0 else f"{value:.3g}"


def table(times: int, epsilon: float) -> list[str]:
    """One markdown table over the 81 pairs, then the comparison counts."""
    exact_column = times <= MAX_EXACT_TIMES
    rows = [f"T = {times}, epsilon = {epsilon:g}: Laplace scale (1 / eps_dp) of a count of 1s",
            "", "| q | p | MQMExact | MQMApprox | GK16 | tight (before) | dpsql cap 10 | "
            "dpsql cap 1 | dpsql / MQMExact |" + (" exact level at cap 10 |" if exact_column else ""),
            "|---|---|---|---|---|---|---|---|---|" + ("---|" if exact_column else "")]
    ratios, seconds = [], 0.0
    for q in GRID:
        for p in GRID:
            model = chain(q, p)
            reference = mqm_exact(model, times, epsilon)
            start = time.perf_counter()
            eps_dp, tight = dpsql(model, times, epsilon, 10.0)
            seconds += time.perf_counter() - start
            plain = dpsql(model, times, epsilon, 1.0)[0] if exact_column else math.inf
            ratio = (1.0 / eps_dp) / reference
            ratios.append(ratio)
            row = (f"| {q} | {p} | {reference:.3f} | {shown(mqm_approx(q, p, times, epsilon))} | "
                   f"{shown(gk16(model, times, epsilon))} | {1 / tight:.3g} | {1 / eps_dp:.3f} | "
                   f"{shown(1 / plain)} | {ratio:.3f} |")
            if exact_column:
                row += f" {series_exact_level(model, eps_dp, range(times)):.4f} |"
            rows.append(row)
    ratios_array = np.array(ratios)
    rows += ["", f"dpsql (cap 10) at most MQMExact on {(ratios_array <= 1.0).sum()} of 81 pairs, "
             f"largest ratio {ratios_array.max():.4f}, smallest {ratios_array.min():.4f}; "
             f"{seconds:.1f} s for the 81 cap-10 calibrations", ""]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, nargs="+", default=[100, 10000])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    for times in args.times:
        print("\n".join(table(times, args.epsilon)), flush=True)


if __name__ == "__main__":
    main()
