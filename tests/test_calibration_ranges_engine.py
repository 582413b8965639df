"""The engine refuses privacy levels outside the accepted ranges at once, spending nothing."""

from __future__ import annotations

import sqlite3

import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.cli import main
from dpsql.engine.errors import InputError, PolicyError
from dpsql.engine.policy_yaml import load_policy

from tests.support import write_policy
from tests.test_calibration_termination import time_bound

DEPENDENT = {"dependence": {"k": 4, "eta": 0.05, "mode": "auto"}}


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with time_bound(30.0), pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.mark.parametrize("command", ["explain", "query"])
@pytest.mark.parametrize("epsilon", ["1e-300", "1e-310", "5e-324", "1e-7", "100.5", "1e400"])
def test_cli_refuses_out_of_range_epsilon_in_one_line(capsys, setup, tmp_path, command, epsilon):
    policy = write_policy(tmp_path / "dependent.yaml", DEPENDENT)
    code, out, err = _cli(capsys, command, "--db", str(setup.db), "--policy", str(policy),
                          "--ledger", str(setup.ledger), "--epsilon", epsilon,
                          "SELECT COUNT(*) FROM people")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "epsilon must be a finite number > 0 within [1e-06, 100]" in err


@pytest.mark.parametrize("epsilon", [1e-300, 10**400, 100.0000001])
def test_python_refuses_out_of_range_epsilon_and_charges_nothing(setup, tmp_path, epsilon):
    policy = write_policy(tmp_path / "dependent.yaml", DEPENDENT)
    with PrivateDatabase.connect(setup.db, policy=policy, ledger=setup.ledger) as db:
        with time_bound(30.0), pytest.raises(InputError, match=r"within \[1e-06, 100\]") as info:
            db.explain("SELECT COUNT(*) FROM people", epsilon=epsilon)
        assert info.value.__cause__.value is epsilon  # the numbers travel with the error
        with pytest.raises(InputError, match=r"within \[1e-06, 100\]"):
            db.query("SELECT COUNT(*) FROM people", epsilon=epsilon)
        db.query("SELECT COUNT(*) FROM people", epsilon=100.0)  # the edge is accepted
    with sqlite3.connect(setup.ledger) as conn:
        assert conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0] == 1


@pytest.mark.parametrize("budget", [1e-300, 1e-7, 2e12, 1e308])
def test_policy_budget_out_of_range_is_refused(tmp_path, budget):
    path = write_policy(tmp_path / "policy.yaml", {"budget": {"epsilon": budget}})
    with pytest.raises(PolicyError, match=r"^budget.epsilon must be a finite number > 0 within "
                                          r"\[1e-06, 1e\+12\], got "):
        load_policy(path)


def test_policy_k_beyond_the_limit_is_refused(tmp_path):
    path = write_policy(tmp_path / "policy.yaml", {"dependence": {"k": 10**400, "eta": 0.1}})
    with pytest.raises(PolicyError, match=r"^dependence.k: expected an integer <= 1000000"):
        load_policy(path)
