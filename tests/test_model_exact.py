"""Model-exact levels agree with the brute-force exact audit, and calibrations stay within epsilon."""

import itertools
from functools import reduce

import numpy as np
import pytest
from dpsql.calibration import CalibrationError, exact_audit, exact_audit_vector, household_pmf
from dpsql.calibration.dependence import eta_of_pmf
from dpsql.calibration.model_exact import calibrate_chain, calibrate_household, rho_grid
from dpsql.calibration.model_household import (
    HouseholdModel,
    grouped_household_level,
    household_level,
    predicate_weights,
)
from dpsql.calibration.model_markov import MarkovModel, chain_eta, markov_levels

THREE_STATE = MarkovModel((0.5, 0.3, 0.2), ((0.6, 0.3, 0.1), (0.2, 0.5, 0.3), (0.1, 0.2, 0.7)))


def chain_pmf(model: MarkovModel, times: int) -> np.ndarray:
    """Joint pmf of one person's chain, one axis per time point (brute force)."""
    d = len(model.initial)
    pmf = np.zeros((d,) * times)
    for path in itertools.product(range(d), repeat=times):
        p = model.initial[path[0]]
        for a, b in itertools.pairwise(path):
            p *= model.transition[a][b]
        pmf[path] = p
    return pmf


def summed(pmf: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """f(x) = sum_j weights[x_j] for every x of pmf's shape."""
    return np.asarray(weights)[np.indices(pmf.shape)].sum(axis=0)


@pytest.mark.parametrize("size, rho, marginal, weights, rate", [
    (10, 0.3, (0.95, 0.05), (0, 1), 0.4659),
    (6, 0.8, (0.7, 0.3), (0, 1), 1.3),
    (4, 0.6, (0.5, 0.3, 0.2), (0, 2, 5), 0.3),
    (5, 0.4, (0.2, 0.5, 0.3), (1, 0, 1), 0.9),
    (1, 0.5, (0.6, 0.4), (0, 1), 0.7),
])
def test_household_level_is_the_exact_audit(size, rho, marginal, weights, rate) -> None:
    pmf = household_pmf(size, rho, np.array(marginal))
    model = HouseholdModel.fixed(size, marginal, rho)
    expected = exact_audit(pmf, rate, summed(pmf, np.array(weights))).level
    assert household_level(model, rho, weights, rate) == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("groups", [(0, 1, 1), (0, 1, 2), (1, 0, 1)])
def test_grouped_household_level_is_the_exact_vector_audit(groups) -> None:
    marginal = np.array([0.5, 0.3, 0.2])
    pmf = household_pmf(4, 0.6, marginal)
    labels = np.array(groups)
    values = np.stack([summed(pmf, labels == g) for g in range(labels.max() + 1)], axis=-1)
    model = HouseholdModel.fixed(4, tuple(marginal), 0.6)
    expected = exact_audit_vector(pmf, 0.3, values).level
    assert grouped_household_level(model, 0.6, groups, 0.3) == pytest.approx(expected, abs=1e-10)


def test_a_random_size_is_bounded_by_its_worst_size_and_other_households_only_lower_it() -> None:
    marginal = np.array([0.8, 0.2])
    model = HouseholdModel((0.0, 0.5, 0.5), tuple(marginal), 0.5, 0.5)
    one = household_level(model, 0.5, (0, 1), 0.6)
    two = exact_audit(household_pmf(2, 0.5, marginal), 0.6).level
    three = exact_audit(household_pmf(3, 0.5, marginal), 0.6).level
    assert one == pytest.approx(max(two, three), abs=1e-12)
    # a table of a household of 3 and one of 2: the count over both, audited in full
    table = reduce(np.multiply.outer, [household_pmf(3, 0.5, marginal),
                                       household_pmf(2, 0.5, marginal)])
    whole = exact_audit(table, 0.6).level
    assert whole <= one + 1e-12


@pytest.mark.parametrize("model", [
    MarkovModel.binary(0.2, 0.7),
    MarkovModel.binary(0.2, 0.3),
    MarkovModel.binary(0.1, 0.05, (0.9, 0.1)),
    MarkovModel.binary(0.6, 0.9, (0.3, 0.7)),
])
@pytest.mark.parametrize("multiples", [(1, 1, 1), (2, 0, 1, 1), (1, 3, 1, 0, 2)])
def test_binary_chain_level_is_the_exact_audit(model, multiples) -> None:
    """Per-time spend c_t * eps, realised as a count of c_t * X_t with eps-geometric noise."""
    eps = 0.45
    times = len(multiples)
    pmf = chain_pmf(model, times)
    values = np.moveaxis(np.indices(pmf.shape), 0, -1) * np.array(multiples)
    levels = markov_levels(model, [c * eps for c in multiples])
    expected = exact_audit_vector(pmf, eps, values).level
    assert levels.max() == pytest.approx(expected, abs=1e-10)
    assert levels.max() > eps * max(multiples) * 0.1  # not vacuous


def test_multi_state_chain_level_bounds_every_per_time_query() -> None:
    """Above the audit of a predicate count per time and of a grouped count per time
    (a change of one record moves two groups: spend 2 eps per time point)."""
    eps = 0.5
    for times in (2, 3, 4):
        pmf = chain_pmf(THREE_STATE, times)
        states = np.indices(pmf.shape)
        predicate = np.moveaxis((states == 1).astype(int), 0, -1)
        assert exact_audit_vector(pmf, eps, predicate).level <= \
            markov_levels(THREE_STATE, [eps] * times).max() + 1e-12
        grouped = np.concatenate([np.moveaxis((states == v).astype(int), 0, -1)
                                  for v in range(3)], axis=-1)
        assert exact_audit_vector(pmf, eps, grouped).level <= \
            markov_levels(THREE_STATE, [2 * eps] * times).max() + 1e-12


@pytest.mark.parametrize("model", [MarkovModel.binary(0.2, 0.3), THREE_STATE,
                                   MarkovModel.binary(0.1, 0.05, (0.9, 0.1))])
def test_chain_eta_is_the_brute_force_eta(model) -> None:
    for times in (1, 2, 3, 5):
        brute = eta_of_pmf(chain_pmf(model, times)) if times > 1 else 0.0
        assert chain_eta(model, times) == pytest.approx(brute, abs=1e-12)


@pytest.mark.parametrize("size", [4, 8, 10])
def test_household_calibration_meets_epsilon_exactly_and_is_the_largest(size) -> None:
    marginal = np.array([0.95, 0.05])
    model = HouseholdModel.fixed(size, tuple(marginal), 0.3)
    result = calibrate_household(model, 1.0, (0, 1))
    audited = exact_audit(household_pmf(size, 0.3, marginal), result.eps_dp).level
    assert audited <= 1.0
    assert exact_audit(household_pmf(size, 0.3, marginal), result.eps_dp * 1.001).level > 1.0
    assert result.tight_eps_dp < result.eps_dp <= result.cap * result.tight_eps_dp


def test_calibration_over_a_rho_range_meets_epsilon_at_every_rho_in_it() -> None:
    marginal = np.array([0.9, 0.1])
    model = HouseholdModel.fixed(6, tuple(marginal), 0.2, 0.4)
    result = calibrate_household(model, 1.0, (0, 1))
    assert result.worst_rho == pytest.approx(0.4)
    for rho in np.linspace(0.0, 0.4, 21):
        assert exact_audit(household_pmf(6, rho, marginal), result.eps_dp).level <= 1.0 + 1e-12
    point = calibrate_household(HouseholdModel.fixed(6, tuple(marginal), 0.2), 1.0, (0, 1))
    assert point.eps_dp > result.eps_dp * 1.05  # the range costs noise


@pytest.mark.parametrize("size, marginal", [(10, (0.95, 0.05)), (20, (0.95, 0.05)),
                                            (50, (0.95, 0.05)), (8, (0.5, 0.5)),
                                            (5, (0.6, 0.3, 0.1))])
def test_household_level_increases_with_rho_on_a_fine_grid(size, marginal) -> None:
    """Why the worst case over a declared rho range is its upper end (checked, not proved)."""
    model = HouseholdModel.fixed(size, marginal, 0.0)
    for rate in (0.05, 0.3, 1.0):
        levels = [household_level(model, rho, predicate_weights(len(marginal), len(marginal) - 1),
                                  rate) for rho in np.linspace(0.0, 1.0, 101)]
        assert all(b >= a - 1e-12 for a, b in itertools.pairwise(levels))


def test_the_cap_keeps_noise_when_the_prior_alone_looks_private() -> None:
    """Without noise the binary (0.2, 0.3) chain's level is -ln 0.4 < 1: only the cap keeps noise."""
    model = MarkovModel.binary(0.2, 0.3)
    assert markov_levels(model, [700.0] * 3).max() == pytest.approx(-np.log(0.4))
    result = calibrate_chain(model, 1.0, 100)
    assert result.capped and result.eps_dp == pytest.approx(10 * result.tight_eps_dp)
    assert calibrate_chain(model, 1.0, 100, cap=2.0).eps_dp == \
        pytest.approx(2 * result.tight_eps_dp)


def test_the_issues_numbers_are_reproduced() -> None:
    for size, tight, exact in ((10, 0.199, 0.466), (20, 0.096, 0.285), (50, 0.038, 0.133)):
        result = calibrate_household(HouseholdModel.fixed(size, (0.95, 0.05), 0.3), 1.0, (0, 1))
        assert (round(result.tight_eps_dp, 3), round(result.eps_dp, 3)) == (tight, exact)
    chain = MarkovModel.binary(0.2, 0.7)  # P(1 | 0) = 0.2, P(1 | 1) = 0.3
    for times in (100, 1000):
        assert round(1.0 / calibrate_chain(chain, 1.0, times, cap=1e4).eps_dp, 2) == 0.77
        assert calibrate_chain(chain, 1.0, times).capped  # the default cap of 10 binds


def test_rho_grid_includes_both_ends() -> None:
    grid = rho_grid(HouseholdModel.fixed(3, (0.5, 0.5), 0.2, 0.4))
    assert grid[0] == 0.2 and grid[-1] == 0.4 and len(grid) == 9


@pytest.mark.parametrize("build, message", [
    (lambda: HouseholdModel.fixed(3, (0.5, 0.5), 0.5, 0.2), "rho_low must be <= rho_high"),
    (lambda: HouseholdModel.fixed(3, (1.0,), 0.5), "marginal must have at least 2 values"),
    (lambda: HouseholdModel((0.5, 0.6), (0.5, 0.5), 0.1, 0.1), "sizes must sum to 1"),
    (lambda: HouseholdModel.fixed(0, (0.5, 0.5), 0.1), "size must be an integer >= 1"),
    (lambda: MarkovModel((0.5, 0.5), ((0.5, 0.5),)), "transition must be a 2x2 matrix"),
    (lambda: MarkovModel((0.5, 0.5), ((0.5, 0.6), (0.5, 0.5))), "transition row 0 must sum"),
    (lambda: markov_levels(MarkovModel.binary(0.2, 0.3), []), "spend must list"),
    (lambda: markov_levels(MarkovModel.binary(0.2, 0.3), [0.1, -1]), "spend[1] must be"),
    (lambda: household_level(HouseholdModel.fixed(3, (0.5, 0.5), 0.1), 0.1, (0, 0.5), 1.0),
     "weights must be 2 integers"),
    (lambda: calibrate_household(HouseholdModel.fixed(3, (0.5, 0.5), 0.1), 0.0, (0, 1)),
     "epsilon must be"),
    (lambda: calibrate_chain(MarkovModel.binary(0.2, 0.3), 1.0, 5, cap=0.5), "cap must be"),
])
def test_bad_inputs_get_a_one_line_error(build, message) -> None:
    with pytest.raises(CalibrationError) as caught:
        build()
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_sum_and_grouped_calibrations_re_audit_within_epsilon_by_brute_force() -> None:
    marginal = np.array([0.5, 0.3, 0.2])
    pmf = household_pmf(4, 0.6, marginal)
    model = HouseholdModel.fixed(4, tuple(marginal), 0.6)
    weights = np.array([0, 2, 5])
    result = calibrate_household(model, 0.8, weights, sensitivity=5.0)
    values = summed(pmf, weights)
    assert exact_audit(pmf, result.eps_dp / 5.0, values).level <= 0.8
    assert exact_audit(pmf, result.eps_dp * 1.001 / 5.0, values).level > 0.8
    labels = np.array([0, 1, 2])
    grouped = calibrate_household(model, 0.8, None, sensitivity=2.0, groups=labels)
    vectors = np.stack([summed(pmf, labels == g) for g in range(3)], axis=-1)
    assert exact_audit_vector(pmf, grouped.eps_dp / 2.0, vectors).level <= 0.8
    assert exact_audit_vector(pmf, grouped.eps_dp * 1.001 / 2.0, vectors).level > 0.8


def brute_chain_level(model: MarkovModel, emissions: list[np.ndarray]) -> float:
    """Definition 3's level of per-time mechanisms emissions[t][x, y] on one chain, brute force."""
    times = len(emissions)
    pmf = chain_pmf(model, times)
    d = len(model.initial)
    outputs = list(itertools.product(*[range(e.shape[1]) for e in emissions]))
    joint = np.zeros((times, d, len(outputs)))
    output = np.zeros(len(outputs))
    for path in itertools.product(range(d), repeat=times):
        like = np.array([np.prod([emissions[t][path[t], y[t]] for t in range(times)])
                         for y in outputs]) * pmf[path]
        output += like
        for t in range(times):
            joint[t, path[t]] += like
    level = 0.0
    for t in range(times):
        prior = joint[t].sum(axis=1)
        for x in np.flatnonzero(prior > 0):
            level = max(level, float(np.log(joint[t, x] / (prior[x] * output)).max()))
    return level


@pytest.mark.parametrize("model", [MarkovModel.binary(0.2, 0.7), THREE_STATE])
def test_chain_bound_holds_for_any_per_time_mechanism(model) -> None:
    """Random E_t-DP mechanisms on each time point's value (not counts): the bound is query-agnostic."""
    rng = np.random.default_rng(7)
    d = len(model.initial)
    for _ in range(20):
        spend = rng.uniform(0.0, 1.5, size=3)
        emissions = []
        for energy in spend:
            raw = np.exp(energy / 2 * rng.integers(0, 2, size=(d, 4)))  # extreme ratios
            emissions.append(raw / raw.sum(axis=1, keepdims=True))
        assert brute_chain_level(model, emissions) <= markov_levels(model, spend).max() + 1e-12


def test_calibrations_are_cached_per_model_query_and_epsilon() -> None:
    from dpsql.calibration import model_exact

    model = HouseholdModel.fixed(7, (0.9, 0.1), 0.25)
    first = calibrate_household(model, 0.9, [0, 1])
    before = model_exact._household.cache_info().hits
    again = calibrate_household(HouseholdModel.fixed(7, (0.9, 0.1), 0.25), 0.9, np.array([0, 1]))
    assert again is first and model_exact._household.cache_info().hits == before + 1
    other = calibrate_household(model, 0.8, (0, 1))
    assert other.eps_dp < first.eps_dp  # a different epsilon is calibrated anew
    chain = calibrate_chain(MarkovModel.binary(0.2, 0.7), 1.0, 50)
    assert calibrate_chain(MarkovModel.binary(0.2, 0.7), 1.0, 50) is chain
