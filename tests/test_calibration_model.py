"""DependenceModel: validation and the exact (k, eta) of known joint distributions."""

from functools import reduce

import numpy as np
import pytest
from dpsql.calibration import DependenceModel, household_pmf
from hypothesis import given, settings
from hypothesis import strategies as st


def outer(*pmfs: np.ndarray) -> np.ndarray:
    """Joint pmf of independent blocks side by side."""
    return reduce(np.multiply.outer, pmfs)


def test_independent_constructor() -> None:
    assert DependenceModel.independent() == DependenceModel(k=1, eta=0.0)


def test_numpy_scalars_are_normalised() -> None:
    model = DependenceModel(k=np.int64(3), eta=np.float32(0.25))
    assert type(model.k) is int and type(model.eta) is float
    assert model == DependenceModel(3, 0.25)


def test_product_pmf_is_independent() -> None:
    pmf = outer(np.array([0.2, 0.8]), np.array([0.5, 0.3, 0.2]), np.array([0.1, 0.9]))
    assert DependenceModel.from_joint_pmf(pmf) == DependenceModel(k=1, eta=0.0)


def test_single_individual_is_independent() -> None:
    assert DependenceModel.from_joint_pmf(np.array([0.3, 0.7])) == DependenceModel(1, 0.0)


def test_bob_family_all_equal() -> None:
    pmf = household_pmf(10, 1.0, [0.99, 0.01])
    assert pmf.shape == (2,) * 10
    assert pmf[(0,) * 10] == pytest.approx(0.99) and pmf[(1,) * 10] == pytest.approx(0.01)
    assert DependenceModel.from_joint_pmf(pmf) == DependenceModel(k=10, eta=1.0)


def test_pair_household_eta_is_rho_squared() -> None:
    # Pr[X_2 = v | X_1 = t] = rho^2 [v = t] + (1 - rho^2) m(v), so the TV is rho^2.
    for rho in (0.0, 0.3, 0.9, 1.0):
        assert DependenceModel.household(2, rho, [0.4, 0.6]).eta == pytest.approx(rho**2)


def test_households_side_by_side_give_household_size() -> None:
    triple = household_pmf(3, 0.5, [0.3, 0.7])
    pair = household_pmf(2, 0.8, [0.5, 0.2, 0.3])
    single = np.array([0.6, 0.4])
    model = DependenceModel.from_joint_pmf(outer(pair, triple, single))
    assert model.k == 3
    assert model.eta == pytest.approx(max(
        DependenceModel.household(3, 0.5, [0.3, 0.7]).eta,
        DependenceModel.household(2, 0.8, [0.5, 0.2, 0.3]).eta,
    ), abs=1e-12)


def test_interleaved_households_are_found() -> None:
    # Households {0, 3} and {1, 2, 4}: k does not depend on where a household's axes sit.
    pmf = outer(household_pmf(2, 0.7, [0.5, 0.5]), household_pmf(3, 0.4, [0.2, 0.8]))
    shuffled = np.transpose(pmf, (0, 2, 3, 1, 4))
    assert DependenceModel.from_joint_pmf(shuffled).k == 3


def test_pairwise_independence_is_not_enough() -> None:
    # X_0 = X_1 + X_2 mod 3: every pair is independent, so the literal reading of
    # "n - k sources independent of X_i" would give k = 1. Under the joint reading no
    # proper subset of the others is independent of the rest together with X_i: k = 3.
    pmf = np.zeros((3, 3, 3))
    for a in range(3):
        for b in range(3):
            pmf[(a + b) % 3, a, b] = 1 / 9
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        other = ({0, 1, 2} - {i, j}).pop()
        pair = pmf.sum(axis=other)
        assert np.allclose(pair, np.outer(pair.sum(1), pair.sum(0)))
    assert DependenceModel.from_joint_pmf(pmf) == DependenceModel(k=3, eta=1.0)


def test_joint_reading_needs_the_whole_remainder_independent() -> None:
    # X_0 depends on X_1; X_2 and X_3 are an independent household of their own. D_0 = {1}.
    pmf = outer(household_pmf(2, 0.5, [0.5, 0.5]), household_pmf(2, 0.9, [0.3, 0.7]))
    assert DependenceModel.from_joint_pmf(pmf).k == 2


def test_zero_probability_values_are_ignored_for_eta() -> None:
    # Value 2 never occurs: there is no conditional distribution given it.
    pmf = outer(np.array([0.5, 0.5, 0.0]), np.array([0.5, 0.5]))
    assert DependenceModel.from_joint_pmf(pmf) == DependenceModel(1, 0.0)


def test_household_eta_ignores_impossible_values() -> None:
    with_gap = DependenceModel.household(3, 0.6, [0.3, 0.0, 0.7])
    without = DependenceModel.household(3, 0.6, [0.3, 0.7])
    assert with_gap.eta == pytest.approx(without.eta, abs=1e-15)


def test_household_of_one_is_independent() -> None:
    assert DependenceModel.household(1, 0.9, [0.5, 0.5]).eta == 0.0


def test_large_household_eta_is_exact_and_bounded() -> None:
    model = DependenceModel.household(50, 0.05, [0.2, 0.3, 0.5])
    assert model.k == 50 and 0.0 < model.eta < 1.0


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(2, 5),
    rho=st.floats(0.0, 1.0),
    weights=st.lists(st.floats(0.01, 1.0), min_size=2, max_size=3),
)
def test_household_eta_matches_joint_pmf(k: int, rho: float, weights: list[float]) -> None:
    marginal = np.array(weights) / sum(weights)
    exact = DependenceModel.from_joint_pmf(household_pmf(k, rho, marginal)).eta
    assert DependenceModel.household(k, rho, marginal).eta == pytest.approx(exact, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(1, 4),
    rho=st.floats(0.0, 1.0),
    weights=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=3).filter(lambda w: sum(w) > 0),
)
def test_household_pmf_is_a_pmf_with_the_given_marginal(
    k: int, rho: float, weights: list[float]
) -> None:
    marginal = np.array(weights) / sum(weights)
    pmf = household_pmf(k, rho, marginal)
    assert pmf.sum() == pytest.approx(1.0)
    for axis in range(k):
        others = tuple(a for a in range(k) if a != axis)
        assert np.allclose(pmf.sum(axis=others), marginal)


def test_weak_dependence_is_not_read_as_independence() -> None:
    # rho = 1e-6 moves pmf entries by ~2e-13: still dependent, so k = 2 and eta = rho^2 TV > 0.
    marginal = np.array([1.0, 0.75]) / 1.75
    model = DependenceModel.from_joint_pmf(household_pmf(2, 1e-6, marginal))
    expected = DependenceModel.household(2, 1e-6, marginal)
    assert model.k == 2 and model.eta > 0.0
    assert model.eta == pytest.approx(expected.eta, rel=1e-3)
