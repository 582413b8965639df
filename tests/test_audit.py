"""The exact audit agrees with a brute-force computation over a wide window of outputs."""

import math
from functools import reduce

import numpy as np
import pytest
from dpsql.calibration import exact_audit, exact_audit_vector, household_pmf
from hypothesis import given, settings
from hypothesis import strategies as st


def brute_force(pmf: np.ndarray, eps: float, values: np.ndarray, pad: int = 80):
    """Level and max_i I(X_i; Y) summed term by term over r in [min f - pad, max f + pad]."""
    outputs = np.arange(values.min() - pad, values.max() + pad + 1)
    given_x = math.tanh(eps / 2) * np.exp(-eps * np.abs(outputs[None, :] - values.reshape(-1, 1)))
    output = pmf.reshape(-1) @ given_x
    level, information = -math.inf, 0.0
    states = np.array(list(np.ndindex(*pmf.shape)))
    for i in range(pmf.ndim):
        info_i = 0.0
        for t in range(pmf.shape[i]):
            mass = pmf.reshape(-1) * (states[:, i] == t)
            if mass.sum() == 0:
                continue
            joint = mass @ given_x
            ratio = joint / (mass.sum() * output)
            level = max(level, float(np.log(ratio).max()))
            info_i += float((joint * np.log(ratio)).sum())
        information = max(information, info_i)
    return level, information, outputs, given_x, output


def counts(shape: tuple[int, ...]) -> np.ndarray:
    return (np.indices(shape) != 0).sum(axis=0)


def test_matches_brute_force_on_a_household() -> None:
    pmf = reduce(np.multiply.outer, [household_pmf(3, 0.6, [0.5, 0.3, 0.2]), [0.7, 0.3]])
    audit = exact_audit(pmf, 0.8)
    level, information, *_ = brute_force(pmf, 0.8, counts(pmf.shape))
    assert audit.level == pytest.approx(level, abs=1e-12)
    assert audit.mutual_information == pytest.approx(information, abs=1e-12)


def test_tails_are_exactly_constant() -> None:
    pmf = household_pmf(3, 0.5, [0.6, 0.4])
    eps = 0.7
    _, _, outputs, given_x, output = brute_force(pmf, eps, counts(pmf.shape), pad=40)
    mass = pmf.reshape(-1) * (np.array(list(np.ndindex(*pmf.shape)))[:, 0] == 1)
    ratio = (mass @ given_x) / (mass.sum() * output)
    top, bottom = np.searchsorted(outputs, 3), np.searchsorted(outputs, 0)
    assert np.allclose(ratio[top:], ratio[top], rtol=1e-12)
    assert np.allclose(ratio[: bottom + 1], ratio[bottom], rtol=1e-12)
    assert not np.isclose(ratio[top - 1], ratio[top])  # inside the window it still varies


def test_bob_family_worst_case_is_the_upper_tail() -> None:
    pmf = household_pmf(10, 1.0, [0.999, 0.001])
    audit = exact_audit(pmf, 0.5)
    # Pr[sick, Y = r] / (Pr[sick] Pr[Y = r]) = e^(10 eps) / (0.999 + 0.001 e^(10 eps)), r >= 10
    expected = 5.0 - math.log(0.999 + 0.001 * math.exp(5.0))
    assert audit.level == pytest.approx(expected, abs=1e-12)
    assert (audit.worst_value, audit.worst_output) == (1, ">= 10")


def test_constant_query_leaks_nothing() -> None:
    pmf = household_pmf(2, 0.5, [0.5, 0.5])
    audit = exact_audit(pmf, 1.0, query=np.full((2, 2), 3))
    assert audit.level == pytest.approx(0.0, abs=1e-15)
    assert audit.mutual_information == pytest.approx(0.0, abs=1e-15)
    assert audit.worst_output == "any"


def test_callable_and_array_queries_agree() -> None:
    pmf = household_pmf(3, 0.4, [0.2, 0.5, 0.3])

    def total(x: tuple[int, ...]) -> int:
        return sum(x)

    values = np.indices(pmf.shape).sum(axis=0)
    assert exact_audit(pmf, 0.3, query=total) == exact_audit(pmf, 0.3, query=values)
    level, information, *_ = brute_force(pmf, 0.3, values, pad=200)
    audit = exact_audit(pmf, 0.3, query=total)
    assert audit.level == pytest.approx(level, abs=1e-12)
    assert audit.mutual_information == pytest.approx(information, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(2,), (3,), (2, 2), (2, 3), (3, 3), (2, 2, 2), (3, 2, 2)]),
    eps=st.floats(0.5, 4.0),
    data=st.data(),
)
def test_matches_brute_force_on_random_pmfs(shape, eps: float, data) -> None:
    size = int(np.prod(shape))
    weights = data.draw(
        st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1.0)), min_size=size, max_size=size)
        .filter(lambda w: sum(w) > 0)
    )
    pmf = (np.array(weights) / sum(weights)).reshape(shape)
    audit = exact_audit(pmf, eps)
    level, information, *_ = brute_force(pmf, eps, counts(shape))
    assert audit.level == pytest.approx(level, abs=1e-10)
    assert audit.mutual_information == pytest.approx(information, abs=1e-12)
    assert audit.mutual_information <= audit.level + 1e-12  # Theorem 1


def test_vector_audit_matches_brute_force() -> None:
    # Two noisy counts (members with value 1, members with value 2) of one household of 3.
    pmf = household_pmf(3, 0.6, [0.5, 0.3, 0.2])
    index = np.indices(pmf.shape)
    values = np.stack([(index == 1).sum(axis=0), (index == 2).sum(axis=0)], axis=-1)
    eps, pad = 0.6, 45
    axis = np.arange(-pad, 3 + pad + 1)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    flat = values.reshape(-1, 2)
    given_x = math.tanh(eps / 2) ** 2 * np.exp(
        -eps * np.abs(grid[None, :, :] - flat[:, None, :]).sum(axis=-1)
    )
    output = pmf.reshape(-1) @ given_x
    states = np.array(list(np.ndindex(*pmf.shape)))
    level, information = -math.inf, 0.0
    for i in range(pmf.ndim):
        info_i = 0.0
        for t in range(pmf.shape[i]):
            mass = pmf.reshape(-1) * (states[:, i] == t)
            joint = mass @ given_x
            ratio = joint / (mass.sum() * output)
            level = max(level, float(np.log(ratio).max()))
            info_i += float((joint * np.log(ratio)).sum())
        information = max(information, info_i)
    audit = exact_audit_vector(pmf, eps, values)
    assert audit.level == pytest.approx(level, abs=1e-10)
    assert audit.mutual_information == pytest.approx(information, abs=1e-10)


def test_vector_audit_of_one_coordinate_is_the_scalar_audit() -> None:
    pmf = household_pmf(3, 0.6, [0.5, 0.3, 0.2])
    values = counts(pmf.shape)
    scalar, vector = exact_audit(pmf, 0.8), exact_audit_vector(pmf, 0.8, values[..., None])
    assert vector.level == pytest.approx(scalar.level, abs=1e-13)
    assert vector.mutual_information == pytest.approx(scalar.mutual_information, abs=1e-13)
