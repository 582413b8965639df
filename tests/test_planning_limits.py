"""The planning limits (limits.max_sql_chars, max_noisy_columns, plan_seconds): SQL that would
keep the engine planning for minutes is refused quickly, with one line naming the limit, the
same whatever the data, and nothing is charged."""

from __future__ import annotations

import time

import pytest
from dpsql.engine import PrivateDatabase, ResourceLimitExceeded
from dpsql.engine.backends import duckdb_execute as execute

from tests.support import charge_count, create_ledger, make_people, run_cli, write_policy

# 300 medians of different expressions: 5.6 KB of SQL that took 96 to 120 s to explain.
MEDIANS = "SELECT " + ", ".join(f"MEDIAN(age + {i}) AS m{i}" for i in range(300)) + " FROM people"


def test_three_hundred_medians_are_refused_in_well_under_a_second(capsys, setup, monkeypatch):
    ran = []
    monkeypatch.setattr(execute, "run", lambda *args: ran.append(args))
    for command in ("explain", "query"):
        start = time.perf_counter()
        code, out, err = run_cli(capsys, command, "--db", str(setup.db), "--policy",
                                 str(setup.policy), "--ledger", str(setup.ledger), "--epsilon", "1",
                                 MEDIANS)
        assert time.perf_counter() - start < 5.0  # about 0.3 s here; it used to take 100 s
        assert code == 2 and out == "" and len(err.splitlines()) == 1
        assert err == ("error: query refused: it needs 19200 noisy values per group (a quantile's "
                       "histogram counting one per bin), over the policy's limit of 1024 "
                       "(limits.max_noisy_columns); nothing was charged\n")
    assert ran == [] and charge_count(setup.ledger) == 0


def test_the_refusals_depend_on_the_text_and_the_policy_not_the_data(tmp_path):
    long_sql = "SELECT COUNT(*) FROM people WHERE " + " AND ".join(["age > 1"] * 2000)
    seen = []
    for seed in (1, 2):
        db = make_people(tmp_path / f"people{seed}.duckdb", units=50 * seed, seed=seed)
        policy = write_policy(tmp_path / "policy.yaml")
        ledger = create_ledger(tmp_path / f"l{seed}.sqlite", policy)
        with PrivateDatabase.connect(db, policy, ledger) as private:
            for sql in (MEDIANS, long_sql):
                with pytest.raises(ResourceLimitExceeded) as info:
                    private.explain(sql, epsilon=1)
                seen.append((str(info.value), info.value.limit, info.value.value))
            assert private.budget().spent_dp == 0
    assert seen[:2] == seen[2:]
    assert [s[1:] for s in seen[:2]] == [("limits.max_noisy_columns", 19200.0),
                                         ("limits.max_sql_chars", float(len(long_sql)))]
    assert seen[1][0].startswith(f"query refused: its SQL text has {len(long_sql)} characters, over "
                                 "the policy's limit of 20000 (limits.max_sql_chars)")


def test_planning_longer_than_plan_seconds_is_refused_and_charges_nothing(setup, tmp_path):
    policy = write_policy(tmp_path / "quick.yaml", {"limits": {"plan_seconds": 0.001}})
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    sql = "SELECT " + ", ".join(f"MEDIAN(age + {i}) AS m{i}" for i in range(4)) + " FROM people"
    with PrivateDatabase.connect(setup.db, policy, ledger) as private:
        for ask in (private.explain, private.query):
            with pytest.raises(ResourceLimitExceeded) as info:
                ask(sql, epsilon=1)
            assert str(info.value) == ("query refused: planning it took longer than the policy's "
                                       "limit of 0.001 s (limits.plan_seconds); nothing was charged")
            assert (info.value.limit, info.value.value) == ("limits.plan_seconds", 0.001)
        assert private.budget().spent_dp == 0
    assert charge_count(ledger) == 0
    # Under the default limits the same query plans and answers.
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as private:
        assert len(private.query(sql, epsilon=1).df.columns) == 4


def test_a_wider_limit_admits_what_the_default_refuses(setup, tmp_path):
    policy = write_policy(tmp_path / "wide.yaml", {"limits": {"max_noisy_columns": 2000}})
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    sql = "SELECT " + ", ".join(f"MEDIAN(age + {i}) AS m{i}" for i in range(17)) + " FROM people"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as private:
        with pytest.raises(ResourceLimitExceeded, match="it needs 1088 noisy values per group"):
            private.explain(sql, epsilon=1)
    with PrivateDatabase.connect(setup.db, policy, ledger) as private:
        assert private.explain(sql, epsilon=1).groups == 1
