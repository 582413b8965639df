"""Whole-series answers under a declared chain (docs/theory.md §20): the forward-backward level
is the exact audit, the quilt map bounds every transcript mixing per-point and whole-series
answers in the exact audit, the Pufferfish inversion is MQMExact's scale, and the engine's
calibration of a series answer meets epsilon at its exact level."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from dpsql.calibration import DependenceModel, MarkovModel, exact_audit, exact_audit_vector
from dpsql.calibration.declared import DeclaredModel, SeriesPoints
from dpsql.calibration.model_exact import largest_within
from dpsql.calibration.model_series import pair_bounds, series_exact_level, series_levels

from tests.test_model_chain import chain_pmf

SLACK = 1e-9
CHAINS = [MarkovModel.binary(0.2, 0.3), MarkovModel.binary(0.05, 0.6, initial=(0.9, 0.1)),
          MarkovModel((0.9, 0.1), ((0.99, 0.01), (0.01, 0.99))),
          MarkovModel((0.5, 0.3, 0.2), ((0.7, 0.2, 0.1), (0.2, 0.6, 0.2), (0.1, 0.3, 0.6))),
          MarkovModel((1.0, 0.0), ((0.5, 0.5), (0.2, 0.8)))]


def random_chain(rng: np.random.Generator) -> MarkovModel:
    """A chain of 2 or 3 states with random (sometimes sticky, sometimes zero) entries."""
    domain = int(rng.integers(2, 4))
    rows = rng.dirichlet(np.full(domain, rng.choice([0.3, 1.0, 3.0])), size=domain)
    rows = np.where(rows < 0.02, 0.0, rows)
    rows /= rows.sum(axis=1, keepdims=True)
    start = rng.dirichlet(np.ones(domain))
    return MarkovModel(tuple(start), tuple(tuple(r) for r in rows))


def mixed_transcript(rng: np.random.Generator, domain: int, times: int
                     ) -> tuple[np.ndarray, np.ndarray, bool]:
    """2 or 3 counts, each of one value over a random set of time points (one point: a
    per-point answer), as a vector query; the spend per time point in units of eps_dp; and
    whether one of them read several points together."""
    points = np.array(list(itertools.product(range(domain), repeat=times)))
    columns, units, series = [], np.zeros(times), False
    for _ in range(int(rng.integers(2, 4))):
        size = int(rng.integers(1, times + 1))
        read = rng.choice(times, size=size, replace=False)
        value = int(rng.integers(domain))
        columns.append((points[:, read] == value).sum(axis=1))
        units[read] += 1
        series = series or size > 1
    values = np.stack(columns, axis=1).reshape((domain,) * times + (len(columns),))
    return values, units, series


@pytest.mark.parametrize("model", CHAINS)
@pytest.mark.parametrize("times", [2, 4, 5])
@pytest.mark.parametrize("eps_dp", [0.2, 1.0, 2.5])
def test_forward_backward_is_the_exact_audit(model, times, eps_dp) -> None:
    """The exact level of a noisy count over a set of time points, from forward-backward over
    (state, partial count), equals the brute-force audit over every chain path."""
    pmf = chain_pmf(model, times)
    paths = np.indices(pmf.shape)
    for read in ([0, times - 1], list(range(times)), list(range(1, times))):
        domain = len(model.initial)
        weights = list(range(domain))
        query = sum(paths[t] for t in read)
        assert series_exact_level(model, eps_dp, read, weights) == pytest.approx(
            exact_audit(pmf, eps_dp, query).level, abs=1e-9), read


def audit_cases(count: int, seed: int) -> tuple[float, float]:
    """Audit `count` random mixed transcripts exactly; fail on any above the quilt map and
    return the smallest and largest gap (map minus exact level)."""
    rng = np.random.default_rng(seed)
    smallest, largest = np.inf, 0.0
    for case in range(count):
        model = CHAINS[case % len(CHAINS)] if case < 2 * len(CHAINS) else random_chain(rng)
        domain = len(model.initial)
        times = int(rng.integers(2, 6 if domain == 2 else 5))
        eps_dp = float(rng.choice([0.1, 0.4, 1.0, 2.0]))
        values, units, _ = mixed_transcript(rng, domain, times)
        audited = exact_audit_vector(chain_pmf(model, times), eps_dp, values).level
        spend = units * eps_dp
        bound = float(series_levels(model, spend).max())
        assert audited <= bound + SLACK, (case, model, times, eps_dp, audited, bound)
        ratio = float(pair_bounds(model, spend).max())
        assert bound <= ratio + SLACK
        smallest, largest = min(smallest, bound - audited), max(largest, bound - audited)
    return smallest, largest


def test_mixed_transcripts_never_exceed_the_quilt_map() -> None:
    """300 random transcripts mixing per-point and whole-series counts (chains of 2 and 3
    states, T = 2..5, eps_dp 0.1..2), audited jointly and exactly."""
    assert audit_cases(300, seed=19)[0] >= -SLACK


@pytest.mark.slow
def test_mixed_transcripts_never_exceed_the_quilt_map_full_run() -> None:
    """The full run of docs/theory.md §20: 1,500 transcripts."""
    assert audit_cases(1500, seed=23)[0] >= -SLACK


@pytest.mark.parametrize("up,stay,scale", [(0.4, 0.6, 3.572), (0.1, 0.9, 31.74),
                                            (0.1, 0.2, 3.632)])
def test_the_ratio_bound_inverts_to_mqm_exacts_scale(up, stay, scale) -> None:
    """With E_t = eps_dp at every point, the largest eps_dp whose quilt ratio bound meets 1 is
    1 / MQMExact's Laplace scale (SIGMOD 2017; q = P(1 | 0), p = P(1 | 1), T = 100)."""
    model = MarkovModel.binary(up, 1.0 - stay)
    eps_dp = largest_within(lambda e: float(pair_bounds(model, [e] * 100).max()), 1.0,
                            0.001, 1.0)
    assert 1.0 / eps_dp == pytest.approx(scale, rel=1e-3)


def declared(model: MarkovModel, times: int, cap: float = 10.0) -> DeclaredModel:
    values = tuple(range(len(model.initial)))
    return DeclaredModel("markov", "r", "x", values, cap, chain=model, time="day", first=0,
                         last=times - 1)


@pytest.mark.parametrize("model", CHAINS)
@pytest.mark.parametrize("epsilon", [0.3, 1.0])
def test_a_series_answer_meets_epsilon_at_its_exact_level(model, epsilon) -> None:
    """The engine's calibration of a count over all T = 6 days: its exact level meets epsilon,
    its eps_dp is never below the tight map's nor the ratio bound's, and never above cap times
    the larger of them."""
    times = 6
    query = DependenceModel(times, 1.0)
    chain = declared(model, times)
    eps_dp, tight = chain.calibrate(epsilon, query, SeriesPoints(range(times)))
    assert series_exact_level(model, eps_dp, range(times)) <= epsilon + SLACK
    ratio_dp = largest_within(lambda e: float(pair_bounds(model, [e] * times).max()), epsilon,
                              0.0, 10 * epsilon)
    assert eps_dp >= max(tight, ratio_dp) * (1 - 1e-6)
    assert eps_dp <= chain.cap * max(tight, ratio_dp) * (1 + 1e-6)


def test_the_scale_is_flat_in_the_length_of_the_chain() -> None:
    """A count over all points of a stationary chain: the same eps_dp at T = 100 and 2,000
    (the quilt is local), where the tight map's falls with T."""
    model = MarkovModel.binary(0.4, 0.4)
    short, long = (declared(model, t).calibrate(1.0, DependenceModel(t, 1.0),
                                                SeriesPoints(range(t)))[0] for t in (100, 2000))
    assert long == pytest.approx(short, rel=0.01)
