"""Every invalid input raises CalibrationError with a one-line message naming the problem."""

import math

import numpy as np
import pytest
from dpsql.calibration import (
    CalibrationError,
    DependenceModel,
    admits,
    calibrate,
    dp_budget,
    exact_audit,
    guarantee,
    household_pmf,
    mutual_information_bound,
    transcript_level,
)

MODEL = DependenceModel(10, 1e-3)


def raises(match: str):
    return pytest.raises(CalibrationError, match=match)


def test_is_a_value_error() -> None:
    assert issubclass(CalibrationError, ValueError)


@pytest.mark.parametrize("k", [0, -3, 2.5, True, "3", None])
def test_bad_k(k: object) -> None:
    with raises(r"^k must be an integer in \[1, 1000000\], got "):
        DependenceModel(k=k, eta=0.1)


def test_k_message_is_exact() -> None:
    with pytest.raises(CalibrationError) as info:
        DependenceModel(0, 0.1)
    assert str(info.value) == "k must be an integer in [1, 1000000], got 0"


@pytest.mark.parametrize("eta", [-0.1, 1.5, math.nan, math.inf, False, "0.1"])
def test_bad_eta(eta: object) -> None:
    with raises(r"^eta must be a finite number in \[0, 1\], got "):
        DependenceModel(k=2, eta=eta)


@pytest.mark.parametrize("epsilon", [0, 0.0, -1, math.inf, math.nan, True, "1"])
def test_bad_epsilon(epsilon: object) -> None:
    with raises(r"^epsilon must be a finite number > 0 within \[1e-06, 100\], got "):
        calibrate(epsilon, MODEL)


def test_unknown_mode() -> None:
    with raises(r"^mode must be one of independent, group, theorem2, tight, auto; got 'fast'"):
        calibrate(1.0, MODEL, "fast")
    with raises("mode must be one of"):
        guarantee("Tight", 0.1, MODEL)


def test_independent_mode_on_dependent_records() -> None:
    with raises(r"mode 'independent' needs k = 1 or eta = 0.*records are dependent"):
        calibrate(1.0, MODEL, "independent")
    with raises("records are dependent"):
        guarantee("independent", 0.1, MODEL)
    with raises("records are dependent"):
        transcript_level(0.0, MODEL, "independent")


@pytest.mark.parametrize("epsilon", [0.1, 0.5, math.log(2.0)])
def test_theorem2_cannot_certify_below_ln2(epsilon: float) -> None:
    with raises(r"theorem2 cannot certify epsilon=.* <= ln 2"):
        calibrate(epsilon, MODEL, "theorem2")


def test_model_must_be_a_dependence_model() -> None:
    with raises("model must be a DependenceModel"):
        calibrate(1.0, (10, 1e-3))


@pytest.mark.parametrize(
    ("pmf", "match"),
    [
        (np.array([0.5, 0.4]), "pmf must sum to 1"),
        (np.array([[0.7, 0.4], [0.0, -0.1]]), "pmf must be non-negative"),
        (np.array([0.5, math.nan]), "pmf must contain only finite numbers"),
        (np.array(1.0), "pmf must have at least one axis"),
        (np.array([]), "pmf must have at least one axis"),
        (["a", "b"], "pmf must be a numeric array"),
    ],
)
def test_bad_pmf(pmf: object, match: str) -> None:
    with raises(match):
        DependenceModel.from_joint_pmf(pmf)
    with raises(match):
        exact_audit(pmf, 1.0)


def test_bad_household() -> None:
    with raises("rho must be a finite number in"):
        DependenceModel.household(3, 1.2, [0.5, 0.5])
    with raises("marginal must sum to 1"):
        household_pmf(3, 0.5, [0.5, 0.6])
    with raises("marginal must be a 1-D pmf"):
        DependenceModel.household(3, 0.5, [[0.5, 0.5]])
    with raises("k must be an integer >= 1"):
        household_pmf(0, 0.5, [0.5, 0.5])
    with raises("at most"):
        household_pmf(40, 0.5, [0.5, 0.5])


def test_bad_audit_inputs() -> None:
    pmf = household_pmf(2, 0.5, [0.5, 0.5])
    with raises("eps_dp must be a finite number"):
        exact_audit(pmf, 0.0)
    with raises("query values must be integers"):
        exact_audit(pmf, 1.0, query=np.full((2, 2), 0.5))
    with raises("query values must have the pmf's shape"):
        exact_audit(pmf, 1.0, query=np.zeros(3))


def test_bad_composition_inputs() -> None:
    with raises("total_dp must be a finite number >= 0"):
        transcript_level(-0.1, MODEL)
    with raises("eps_dp must be a finite number >= 0"):
        guarantee("tight", math.inf, MODEL)
    with raises(r"ip_budget must be a finite number > 0 within \[1e-06, 1e\+12\], got 0.0"):
        dp_budget(0.0, MODEL)
    with raises("spent_dp must be a finite number"):
        admits(math.nan, 0.1, 1.0, MODEL)
    with raises(r"ip_budget must be a finite number > 0 within \[1e-06, 1e\+12\], got -1.0"):
        admits(0.1, 0.1, -1.0, MODEL)
    with raises("level must be a finite number"):
        mutual_information_bound(-1.0)
