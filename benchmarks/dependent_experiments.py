"""The Bayesian-DP study's experiments (arXiv 2506.21308) with the noise dpsql gives them.

Activity: one person's day of T = 288 five-minute intervals, a binary chain with P(1|0) = 0.2
and P(0|1) = 0.7 from its stationary law; the answer is the count of active intervals, each
interval a record (k = T, eta the chain's, docs/theory.md §14), priced by the tight map (what
this branch offers for a whole-series count). Gaussian: households of child, father and mother
heights (Galton-like: mean 67 in, sd 3.5 in, rho 0.28, bounds [55, 80] in) and of kid and mother
IQ (mean 100, sd 15, rho 0.45, bounds [40, 160]); the answer is the SUM over 300 households,
priced by group privacy (eta 1, what the policy path offers) and by the clamped-Gaussian bound
of calibration/model_gaussian.py (docs/theory.md §21; a policy's `kind: gaussian` model gives a
whole-table SUM the larger of this eps_dp and the tight map's, at most 10 times the tight map's,
which this script does not apply). Each cell
is the 95th percentile of |released - exact| over 1,000 draws of synthetic data and noise.
Run: python -m benchmarks.dependent_experiments
"""

from __future__ import annotations

import numpy as np
from dpsql.calibration import DependenceModel, MarkovModel
from dpsql.calibration.inversion import invert
from dpsql.calibration.model_gaussian import GaussianHousehold, gaussian_level, study_factor
from dpsql.calibration.model_markov import chain_eta
from scipy.optimize import brentq

EPSILONS = (1.0, 2.0, 5.0, 10.0, 20.0)
DRAWS = 1000
T = 288
HOUSEHOLDS = 300
GAUSSIAN = {
    "heights (child, father, mother)": GaussianHousehold(3, 0.28, 0.28, 67.0, 3.5, 55.0, 80.0),
    "IQ (kid, mother)": GaussianHousehold(2, 0.45, 0.45, 100.0, 15.0, 40.0, 160.0),
}


def _activity(rng: np.random.Generator, scale: float) -> float:
    """95th percentile of |noisy count - count| over DRAWS days (Laplace noise of `scale`)."""
    on, off = 0.2, 0.7  # P(1 | 0), P(0 | 1)
    state = rng.random(DRAWS) < on / (on + off)
    counts = state.astype(int)
    for _ in range(T - 1):
        flip = rng.random(DRAWS)
        state = np.where(state, flip >= off, flip < on)
        counts += state
    noisy = counts + rng.laplace(0.0, scale, DRAWS)
    return float(np.quantile(np.abs(noisy - counts), 0.95))


def _households(rng: np.random.Generator, model: GaussianHousehold, scale: float) -> float:
    """95th percentile of |noisy SUM - SUM of the clamped values| over DRAWS datasets."""
    m, rho = model.max_size, model.rho_high
    shared = rng.standard_normal((DRAWS, HOUSEHOLDS, 1))
    latent = np.sqrt(rho) * shared + np.sqrt(1 - rho) * rng.standard_normal((DRAWS, HOUSEHOLDS, m))
    values = np.clip(model.mean + model.sd * latent, model.lower, model.upper)
    exact = values.sum(axis=(1, 2))
    noisy = exact + rng.laplace(0.0, scale, DRAWS)
    return float(np.quantile(np.abs(noisy - exact), 0.95))


def _model_eps_dp(model: GaussianHousehold, eps: float) -> float:
    """The largest eps_dp whose level min(L_G, m eps_dp) meets eps (both grow with eps_dp, and
    L_G is at least eps_dp span / s)."""
    top = eps * model.sensitivity / model.span
    root = brentq(lambda e: gaussian_level(model, e) - eps, 1e-12, top)
    return max(root, eps / model.max_size)


def main() -> None:
    rng = np.random.default_rng(2506)
    chain = MarkovModel((0.7 / 0.9, 0.2 / 0.9), ((0.8, 0.2), (0.7, 0.3)))
    eta = chain_eta(chain, T)
    print(f"Activity, T = {T}: the chain's eta {eta:.4f}; count sensitivity 1.\n")
    print("| epsilon | dpsql eps_dp (tight map, k = T) | dpsql p95 error | DP ignoring correlation p95 |")
    print("|---|---|---|---|")
    for eps in EPSILONS:
        eps_dp = invert("tight", eps, DependenceModel(T, eta))
        print(f"| {eps:g} | {eps_dp:.4g} | {_activity(rng, 1 / eps_dp):.1f} | "
              f"{_activity(rng, 1 / eps):.2f} |")
    for name, model in GAUSSIAN.items():
        s, m = model.sensitivity, model.max_size
        print(f"\n{name}: {HOUSEHOLDS} households of {m}, rho {model.rho_high:g}, sd "
              f"{model.sd:g}, bounds [{model.lower:g}, {model.upper:g}] (sensitivity {s:g}); "
              f"the study's factor {study_factor(m, model.rho_high):.3f} on the span "
              f"{model.span:g}.\n")
        print("| epsilon | group privacy p95 | clamped-Gaussian bound p95 | study factor x span p95 "
              "| DP ignoring correlation (span) p95 |")
        print("|---|---|---|---|---|")
        for eps in EPSILONS:
            model_dp = _model_eps_dp(model, eps)
            cells = [_households(rng, model, scale) for scale in (
                m * s / eps, s / model_dp, study_factor(m, model.rho_high) * model.span / eps,
                model.span / eps)]
            print(f"| {eps:g} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
