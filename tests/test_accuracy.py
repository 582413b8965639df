"""Asking by accuracy: the smallest epsilon whose 95% half-width on every noisy cell is within
the target, for a query and a workload, in Python and on the command line."""

from __future__ import annotations

import io
import json

import pytest
from dpsql.engine.accuracy import smallest_epsilon
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.errors import InputError

from tests.support import cli_paths, run_cli

COUNTS = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
WORKLOAD = [COUNTS, "SELECT sick, COUNT(*) AS n FROM people GROUP BY sick"]


def test_the_bisection_finds_the_smallest_epsilon_up_to_its_rounding():
    plan = smallest_epsilon(lambda e: 7.3 / e, 2.0, "a count")
    assert plan.halfwidth <= 2.0
    assert plan.epsilon == pytest.approx(3.65, rel=1e-3) and plan.epsilon >= 3.65
    assert 7.3 / (plan.epsilon * (1 - 1e-3)) > 2.0


@pytest.mark.parametrize("target", [0, -1.0, float("nan"), float("inf"), True, "5"])
def test_a_bad_target_is_refused(target):
    with pytest.raises(InputError, match="half-width asked must be a finite number > 0"):
        smallest_epsilon(lambda e: 1.0 / e, target, "a count")


def test_an_unreachable_target_says_the_best_it_can_do():
    with pytest.raises(InputError, match="no epsilon up to 100") as info:
        smallest_epsilon(lambda e: 1000.0 / e, 1.0, "a count")
    assert info.value.best == pytest.approx(10.0)


def _open(setup) -> PrivateDatabase:
    return PrivateDatabase.connect(setup.db, setup.policy, setup.ledger)


def test_a_query_asked_by_accuracy_meets_it_and_a_little_less_epsilon_does_not(setup):
    with _open(setup) as db:
        plan = db.epsilon_for(COUNTS, 25.0)
        widest = max(a.ci95_halfwidth for a in db.explain(COUNTS, epsilon=plan.epsilon).aggregates)
        assert widest <= 25.0 and widest == pytest.approx(plan.halfwidth)
        less = max(a.ci95_halfwidth for a in db.explain(COUNTS, epsilon=plan.epsilon * 0.995)
                   .aggregates)
        assert less > 25.0
        assert db.budget().spent_dp == 0.0


def test_a_workload_asked_by_accuracy_is_charged_once_and_meets_it(setup):
    with _open(setup) as db:
        result = db.query_many(WORKLOAD, accuracy=30.0)
        assert all((a.ci95.iloc[:, -1] <= 30.0).all() for a in result.answers)
        assert db.budget().spent_dp == pytest.approx(result.epsilon_dp)
        explained = db.explain_many(WORKLOAD, accuracy=30.0)
        assert explained.epsilon == result.epsilon
        with pytest.raises(InputError, match="exactly one of them"):
            db.query_many(WORKLOAD, epsilon=1.0, accuracy=30.0)


def test_the_command_line_asks_before_spending(capsys, setup, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, _, err = run_cli(capsys, "query", *cli_paths(setup), "--ci95", "30", COUNTS)
    assert code != 0 and "is the smallest that keeps the 95% half-width" in err
    code, out, _ = run_cli(capsys, "history", "--ledger", str(setup.ledger), "--format", "json")
    assert json.loads(out) == []
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--ci95", "30", "--yes",
                             "--format", "json", COUNTS)
    assert code == 0
    answer = json.loads(out)
    assert max(row[1] for row in answer["ci95"]) <= 30.0
    code, out, err = run_cli(capsys, "explain", *cli_paths(setup), "--ci95", "30", "--format",
                             "json", COUNTS)
    assert code == 0 and json.loads(out)["epsilon"] == answer["epsilon"]
