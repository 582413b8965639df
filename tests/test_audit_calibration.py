"""Proof by audit: answers calibrated from the exact (k, eta) of a model never leak more than asked.

For each model: compute (k, eta) exactly with from_joint_pmf, calibrate a COUNT at a
random epsilon in every mode that claims to apply, and measure the exact IP level of
the geometric mechanism at the calibrated eps_dp.
"""

from functools import reduce

import numpy as np
import pytest
from dpsql.calibration import DependenceModel, compare_modes, exact_audit, guarantee, household_pmf
from hypothesis import given, settings
from hypothesis import strategies as st

SLACK = 1e-9
weights_entry = st.one_of(st.just(0.0), st.floats(1e-6, 1.0))


@st.composite
def household_models(draw) -> np.ndarray:
    """Independent households side by side (sizes 1-3, at most 6 people), axes shuffled."""
    blocks, people = [], 0
    while people < 6:
        size = draw(st.integers(1, min(3, 6 - people)))
        d = draw(st.sampled_from([2, 3]))
        weights = draw(st.lists(weights_entry, min_size=d, max_size=d).filter(lambda w: sum(w)))
        rho = draw(st.floats(0.0, 1.0))
        blocks.append(household_pmf(size, rho, np.array(weights) / sum(weights)))
        people += size
        if draw(st.booleans()):
            break
    joint = reduce(np.multiply.outer, blocks)
    return np.transpose(joint, draw(st.permutations(range(joint.ndim))))


@st.composite
def random_models(draw) -> np.ndarray:
    """Fully random pmfs (zeros allowed) over n <= 6 binary or n <= 4 ternary individuals."""
    d = draw(st.sampled_from([2, 3]))
    n = draw(st.integers(1, 6 if d == 2 else 4))
    size = d**n
    weights = draw(
        st.lists(weights_entry, min_size=size, max_size=size).filter(lambda w: sum(w) > 0)
    )
    return (np.array(weights) / sum(weights)).reshape((d,) * n)


def check_calibrated(pmf: np.ndarray, epsilon: float) -> None:
    """Every applicable mode's eps_dp keeps the audited level within epsilon."""
    model = DependenceModel.from_joint_pmf(pmf)
    for option in compare_modes(epsilon, model):
        if option.applies:
            audit = exact_audit(pmf, option.epsilon_dp)
            assert audit.level <= epsilon + SLACK, (option, model, audit)
            assert audit.mutual_information <= epsilon + SLACK


@settings(max_examples=400, deadline=None)
@given(pmf=household_models(), epsilon=st.floats(0.1, 3.0))
def test_households_stay_within_epsilon(pmf: np.ndarray, epsilon: float) -> None:
    check_calibrated(pmf, epsilon)


@settings(max_examples=400, deadline=None)
@given(pmf=random_models(), epsilon=st.floats(0.1, 3.0))
def test_random_models_stay_within_epsilon(pmf: np.ndarray, epsilon: float) -> None:
    check_calibrated(pmf, epsilon)


@settings(max_examples=400, deadline=None)
@given(pmf=st.one_of(household_models(), random_models()), eps_dp=st.floats(0.01, 3.0))
def test_audit_never_exceeds_the_tight_map(pmf: np.ndarray, eps_dp: float) -> None:
    model = DependenceModel.from_joint_pmf(pmf)
    assert exact_audit(pmf, eps_dp).level <= guarantee("tight", eps_dp, model) + SLACK


def test_the_audit_catches_uncalibrated_noise() -> None:
    # A household of 3 (rho = 0.9): plain DP noise (eps_dp = epsilon) leaks more than asked,
    # so the checks above would fail if calibration returned eps_dp = epsilon here.
    pmf = household_pmf(3, 0.9, [0.9, 0.1])
    assert exact_audit(pmf, 1.0).level > 1.0
    check_calibrated(pmf, 1.0)


def test_tight_bound_is_reached_when_eta_is_one() -> None:
    # Bob's family with a rare disease: the audit approaches k * eps_dp = the tight map.
    pmf = household_pmf(6, 1.0, [1 - 1e-9, 1e-9])
    model = DependenceModel.from_joint_pmf(pmf)
    level = exact_audit(pmf, 0.5).level
    assert guarantee("tight", 0.5, model) - 1e-6 < level <= guarantee("tight", 0.5, model)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(pmf=st.one_of(household_models(), random_models()), epsilon=st.floats(0.05, 5.0))
def test_deep_search_stays_within_epsilon(pmf: np.ndarray, epsilon: float) -> None:
    check_calibrated(pmf, epsilon)
