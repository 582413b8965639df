"""Transcripts and budgets compose in DP space and convert with L (Corollary 4, docs/theory.md §7)."""

import math

import pytest
from dpsql.calibration import (
    DependenceModel,
    admits,
    calibrate,
    dp_budget,
    guarantee,
    mutual_information_bound,
    transcript_level,
)
from hypothesis import given, settings
from hypothesis import strategies as st

HEADLINE = DependenceModel(10, 1e-3)


def test_two_half_queries_exceed_one() -> None:
    # Each answer is 0.5-IP on its own; together they are one (2 eps_dp)-DP mechanism.
    per_query = calibrate(0.5, HEADLINE, "tight")
    total = transcript_level(2 * per_query.epsilon_dp, HEADLINE, "tight")
    assert per_query.level <= 0.5
    # docs/theory.md §7: the transcript exceeds the sum of the asked levels. Here it is 2.31:
    # eps_dp = 0.447 each, and L(0.893) = ln(0.999 e^0.893 + 0.001 e^8.93).
    assert total > 1.0
    assert total == pytest.approx(2.3055, abs=1e-4)


def test_empty_transcript_reveals_nothing() -> None:
    for mode in ("auto", "group", "theorem2", "tight"):
        assert transcript_level(0.0, HEADLINE, mode) == 0.0


def test_auto_transcript_is_the_tightest_map() -> None:
    for total in (0.01, 0.3, 2.0):
        levels = [transcript_level(total, HEADLINE, m) for m in ("group", "theorem2", "tight")]
        assert transcript_level(total, HEADLINE) == min(levels)


def test_budget_is_the_inverse_of_the_transcript_level() -> None:
    budget = dp_budget(4.0, HEADLINE)
    assert transcript_level(budget, HEADLINE) <= 4.0
    assert transcript_level(budget, HEADLINE) == pytest.approx(4.0, abs=1e-9)
    assert dp_budget(4.0, HEADLINE, "group") == pytest.approx(0.4)


def test_admits_a_query_that_spends_exactly_the_rest() -> None:
    budget = 1.0
    first = calibrate(0.4, HEADLINE).epsilon_dp
    rest = dp_budget(budget, HEADLINE) - first
    assert admits(first, rest, budget, HEADLINE)
    assert not admits(first, rest * 1.001, budget, HEADLINE)


def test_admits_absorbs_only_float_rounding() -> None:
    # Ten equal shares of S_max: their float sum may differ from S_max in the last bits.
    budget = 2.0
    share = dp_budget(budget, HEADLINE) / 10
    spent = 0.0
    for _ in range(10):
        assert admits(spent, share, budget, HEADLINE)
        spent += share
    assert not admits(spent, 1e-6, budget, HEADLINE)


def test_mutual_information_bound() -> None:
    nats, bits = mutual_information_bound(1.0)
    assert nats == 1.0 and bits == pytest.approx(1 / math.log(2))
    assert mutual_information_bound(0.0) == (0.0, 0.0)


models = st.builds(DependenceModel, k=st.integers(1, 30), eta=st.floats(0.0, 1.0))
dp_levels = st.floats(1e-4, 5.0)


@settings(max_examples=200, deadline=None)
@given(model=models, a=dp_levels, b=dp_levels)
def test_transcript_is_no_better_than_its_parts(model: DependenceModel, a: float, b: float) -> None:
    both = transcript_level(a + b, model)
    assert both >= transcript_level(a, model)
    assert both >= transcript_level(b, model)
    # convex with L(0) = 0 for the tight map: superadditive
    assert both >= transcript_level(a, model) + transcript_level(b, model) - 1e-12 * both


@settings(max_examples=200, deadline=None)
@given(model=models, budget=st.floats(0.01, 10.0), fraction=st.floats(0.0, 1.0))
def test_admission_agrees_with_the_dp_budget(
    model: DependenceModel, budget: float, fraction: float
) -> None:
    s_max = dp_budget(budget, model)
    spent = fraction * s_max
    assert admits(spent, s_max - spent, budget, model)
    assert not admits(spent, (s_max - spent) + 1e-6 * s_max + 1e-9, budget, model)
    assert guarantee("auto", s_max, model) <= budget
