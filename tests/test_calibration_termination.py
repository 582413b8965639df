"""Every calibration entry point ends quickly for every number, and the tight map is precise.

Each call runs under a wall-clock bound (SIGALRM): an inversion that loops fails the test
instead of hanging the suite. An accepted call returns a finite result on the private side;
anything else raises CalibrationError (a ValueError) with a one-line message.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal, localcontext

import pytest
from dpsql.calibration import (
    BUDGET_RANGE,
    EPSILON_RANGE,
    MODES,
    CalibrationError,
    DependenceModel,
    EpsilonOutOfRange,
    admits,
    calibrate,
    compare_modes,
    dp_budget,
    guarantee,
    transcript_level,
)
from dpsql.calibration.maps import tight_map
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TIME_BOUND = 2.0
"""Seconds any single call may take (the slowest, a full bisection, takes about 10 ms)."""

SPECIAL = [
    0.0, -0.0, 5e-324, 1e-320, 1e-310, 2.2250738585072014e-308, 1e-300, 1e-30, 1e-12,
    math.nextafter(EPSILON_RANGE[0], 0.0), EPSILON_RANGE[0], math.log(2.0),
    math.nextafter(math.log(2.0), 1.0), 1.0, EPSILON_RANGE[1],
    math.nextafter(EPSILON_RANGE[1], math.inf), 709.0, 710.0, 1e12, 1e300, 1.7976931348623157e308,
    math.inf, -math.inf, math.nan, -1.0, 10**400, -(10**400), 2**1024, 10**5000, 3,
]
numbers = st.one_of(
    st.sampled_from(SPECIAL),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.floats(min_value=0.0, max_value=200.0),
    st.integers(min_value=-(10**500), max_value=10**500),
)
models = st.builds(
    DependenceModel,
    k=st.one_of(st.sampled_from([1, 2, 4, 10, 1_000_000]), st.integers(1, 1_000_000)),
    eta=st.one_of(
        st.sampled_from([0.0, 5e-324, 1e-300, 1e-6, 0.05, 0.5, math.nextafter(1.0, 0.0), 1.0]),
        st.floats(0.0, 1.0),
    ),
)
MODE_NAMES = (*MODES, "auto")


class TookTooLong(Exception):
    """Raised by the alarm inside a call that ran past TIME_BOUND."""


@contextmanager
def time_bound(seconds: float = TIME_BOUND) -> Iterator[None]:
    """Interrupt the block with TookTooLong after `seconds` of wall-clock time."""

    def alarm(signum: int, frame: object) -> None:
        raise TookTooLong(f"call did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


def outcome(call: Callable[[], object]) -> object:
    """The call's value, or the CalibrationError it raised; anything else fails the test."""
    with time_bound():
        try:
            return call()
        except CalibrationError as exc:
            message = str(exc)
            assert "\n" not in message and len(message) < 300, message
            return exc


def in_range(value: object, bounds: tuple[float, float]) -> bool:
    """True if value is a real number (not a bool) inside bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and bounds[0] <= number <= bounds[1]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(epsilon=numbers, model=models, mode=st.sampled_from(MODE_NAMES))
def test_calibrate_ends_and_stays_on_the_private_side(epsilon, model, mode) -> None:
    result = outcome(lambda: calibrate(epsilon, model, mode))
    if not in_range(epsilon, EPSILON_RANGE):
        assert isinstance(result, EpsilonOutOfRange)
        assert result.value is epsilon and (result.lower, result.upper) == EPSILON_RANGE
        return
    if isinstance(result, CalibrationError):  # a mode that cannot certify this target
        assert mode in ("independent", "theorem2")
        return
    target = float(epsilon)
    assert 0.0 < result.epsilon_dp <= target and result.level <= target
    if mode in ("auto", "tight", "group"):  # never worse than group privacy, so >= 1e-12
        assert result.epsilon_dp >= target / model.k * (1 - 1e-12) >= 0.99e-12


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(epsilon=numbers, model=models)
def test_compare_modes_ends(epsilon, model) -> None:
    result = outcome(lambda: compare_modes(epsilon, model))
    if in_range(epsilon, EPSILON_RANGE):
        assert not isinstance(result, CalibrationError)
        assert all(o.epsilon_dp is None or 0.0 < o.epsilon_dp <= float(epsilon) for o in result)
    else:
        assert isinstance(result, EpsilonOutOfRange)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(eps_dp=numbers, model=models, mode=st.sampled_from(MODE_NAMES))
def test_guarantee_and_transcript_level_end(eps_dp, model, mode) -> None:
    level = outcome(lambda: guarantee(mode, eps_dp, model))
    total = outcome(lambda: transcript_level(eps_dp, model, mode))
    valid = in_range(eps_dp, (0.0, math.inf)) and (mode != "independent" or model.is_independent)
    if not valid:
        assert isinstance(level, CalibrationError) and isinstance(total, CalibrationError)
        return
    assert isinstance(level, float) and level >= float(eps_dp)  # never below plain DP
    assert total == (0.0 if eps_dp == 0 else level)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget=numbers, spent=numbers, new=numbers, model=models)
def test_dp_budget_and_admits_end(budget, spent, new, model) -> None:
    space = outcome(lambda: dp_budget(budget, model))
    if in_range(budget, BUDGET_RANGE):
        assert 0.0 < space <= float(budget) and transcript_level(space, model) <= float(budget)
    else:
        assert isinstance(space, EpsilonOutOfRange) and space.lower == BUDGET_RANGE[0]
    verdict = outcome(lambda: admits(spent, new, budget, model))
    assert isinstance(verdict, (bool, CalibrationError))


@pytest.mark.parametrize("epsilon", [1e-300, 1e-310, 5e-324, 10**400, 1e300, math.inf])
def test_issue_inputs_are_refused_quickly_with_the_range(epsilon) -> None:
    with time_bound(), pytest.raises(EpsilonOutOfRange) as info:
        calibrate(epsilon, DependenceModel(4, 0.05))
    assert info.value.lower == 1e-6 and info.value.upper == 100.0 and info.value.value is epsilon
    assert "within [1e-06, 100]" in str(info.value)


@pytest.mark.parametrize("model", [DependenceModel(4, 0.05), DependenceModel(10, 1e-300),
                                   DependenceModel(1_000_000, 0.5)])
def test_tight_map_is_exactly_zero_at_zero(model) -> None:
    assert tight_map(0.0, model) == 0.0
    assert transcript_level(0.0, model, "tight") == 0.0


def reference_tight(eps_dp: float, k: int, eta: float) -> float:
    """ln((1 - eta) e^eps_dp + eta e^(k eps_dp)) in 700-digit decimal arithmetic (enough
    to resolve eps_dp = 1e-300 next to 1)."""
    with localcontext() as ctx:
        ctx.prec = 700
        x, e = Decimal(eps_dp), Decimal(eta)
        return float(((1 - e) * x.exp() + e * (k * x).exp()).ln())


@pytest.mark.parametrize("k", [2, 4, 10, 1000])
@pytest.mark.parametrize("eta", [1e-12, 1e-3, 0.05, 0.5, 0.999])
@pytest.mark.parametrize("eps_dp", [1e-300, 1e-20, 1e-12, 1e-6, 0.01, 0.5, 1.0, 3.0, 20.0, 100.0])
def test_tight_map_keeps_full_relative_precision(k, eta, eps_dp) -> None:
    # The old log-sum-exp form returned 6.9e-18 at eps_dp = 0 and lost all digits below ~1e-16.
    assert tight_map(eps_dp, DependenceModel(k, eta)) == pytest.approx(
        reference_tight(eps_dp, k, eta), rel=1e-13, abs=0.0
    )
