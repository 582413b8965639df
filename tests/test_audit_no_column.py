"""The exact audit of answers reading no column (COUNT(*)) under a declared chain
(docs/theory.md §27): composed with per-point and whole-series answers and audited jointly and
exactly on one person's chain, at up to 20 times their eps_dp, they never raise the exact
level, which stays at or below the level admission uses (the chain's capped map at the whole
transcript's eps_dp). Where row presence depends on the modelled value (§19, assumption 1
broken) the same count is far above it: what the assumption carries."""

from __future__ import annotations

import numpy as np
import pytest
from dpsql.calibration import DependenceModel, MarkovModel, exact_audit, exact_audit_vector
from dpsql.calibration.model_markov import chain_eta
from dpsql.engine.accounting.transcript import Accountant

from tests.test_model_chain import chain_pmf
from tests.test_model_series import CHAINS, declared, mixed_transcript, random_chain

SLACK = 1e-9
CAP = 10.0


def admitted_level(model: MarkovModel, times: int, units: np.ndarray, series: bool,
                   total_dp: float) -> float:
    """The level admission gives the transcript: the policy's tight map under the chain's
    (k = T, its exact eta) and the chain's map capped at CAP, at the per-time spend of the
    answers reading the column and the eps_dp of every answer (those reading none too)."""
    query = DependenceModel(times, chain_eta(model, times))
    accountant = Accountant(1.0, query, "tight", (declared(model, times, CAP),),
                            tuple(float(u) for u in units), series)
    return accountant.level(total_dp)


def audit_cases(count: int, seed: int) -> tuple[int, float]:
    """Audit `count` random transcripts with COUNT(*) answers added; return the number of
    cases and the largest gap (exact level minus admitted level; at most 0)."""
    rng = np.random.default_rng(seed)
    largest = -np.inf
    for case in range(count):
        model = CHAINS[case % len(CHAINS)] if case < 2 * len(CHAINS) else random_chain(rng)
        domain = len(model.initial)
        times = int(rng.integers(2, 6 if domain == 2 else 5))
        eps_dp = float(rng.choice([0.1, 0.4, 1.0, 2.0]))
        values, units, series = mixed_transcript(rng, domain, times)
        blanks = int(rng.integers(1, 21))  # COUNT(*) answers, each at eps_dp: T rows, always
        counted = np.concatenate([values, np.full(values.shape[:-1] + (blanks,), times)], axis=-1)
        pmf = chain_pmf(model, times)
        audited = exact_audit_vector(pmf, eps_dp, counted).level
        alone = exact_audit_vector(pmf, eps_dp, values).level
        assert audited == pytest.approx(alone, abs=SLACK), (case, audited, alone)
        level = admitted_level(model, times, units * eps_dp, series,
                               eps_dp * (units.sum() + blanks))
        assert audited <= level + SLACK, (case, model, times, eps_dp, blanks, audited, level)
        largest = max(largest, audited - level)
    return count, float(largest)


def test_answers_reading_no_column_never_raise_the_exact_level() -> None:
    """150 random transcripts (chains of 2 and 3 states, T = 2..5, eps_dp 0.1..2, 1 to 20
    COUNT(*) answers each at eps_dp) audited jointly and exactly."""
    cases, gap = audit_cases(150, seed=29)
    assert cases == 150 and gap <= SLACK


@pytest.mark.slow
def test_answers_reading_no_column_never_raise_the_exact_level_full_run() -> None:
    """The full run of docs/theory.md §27: 1,000 transcripts."""
    cases, gap = audit_cases(1000, seed=31)
    print(f"cases {cases}, largest gap (exact minus admitted level) {gap:.3g}")
    assert gap <= SLACK


def test_a_count_whose_rows_depend_on_the_value_is_not_covered() -> None:
    """A meter that reports only when on: one COUNT(*) is then the count of on days, and at an
    eps_dp admission allows a COUNT(*) its exact level is far above the admitted level."""
    model, times, eps_dp = CHAINS[0], 4, 2.0
    pmf = chain_pmf(model, times)
    audited = exact_audit(pmf, eps_dp, lambda x: sum(x)).level
    level = admitted_level(model, times, np.zeros(times), False, eps_dp)
    assert audited > 1.5 * level, (audited, level)  # 0.888 against 0.573
