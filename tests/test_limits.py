"""Bounded queries: the plan-time size limit, the run's time and memory limits, the policy's
`limits:` section; a cancelled run charges nothing and leaves the database usable."""

from __future__ import annotations

import copy
import re
import time

import duckdb
import pytest
import yaml
from dpsql.engine import PolicyError, PrivateDatabase, QueryTooLarge, ResourceLimitExceeded
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.policy import Limits
from dpsql.engine.policy_yaml import parse_policy

from tests.support import BASE_POLICY, charge_count, create_ledger, run_cli, write_policy

SLOW_ROWS = 400_000
# Nested string functions and a backtracking LIKE on every row: well over a second here.
SLOW_SQL = ("SELECT COUNT(*) FROM big WHERE LOWER(UPPER(LOWER(UPPER(TRIM(note))))) "
            "LIKE '%1%2%3%4%5%6%x%'")
FAST_SQL = "SELECT COUNT(*) FROM small"


def _limits_policy(limits: dict) -> dict:
    policy = copy.deepcopy(BASE_POLICY)
    policy["limits"] = limits
    return policy



def test_limits_default_when_absent_and_read_when_given():
    assert parse_policy(BASE_POLICY).limits == Limits()
    given = parse_policy(_limits_policy({"max_noisy_values": 7, "time_seconds": 2,
                                         "memory_mb": 300}))
    assert given.limits == Limits(max_noisy_values=7, time_seconds=2.0, memory_mb=300)
    partial = parse_policy(_limits_policy({"time_seconds": 0.5}))
    assert partial.limits == Limits(time_seconds=0.5)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"max_noisy_values": 0}, "limits.max_noisy_values: expected an integer >= 1, got 0"),
        ({"max_noisy_values": 2.5}, "limits.max_noisy_values: expected an integer >= 1"),
        ({"max_noisy_values": True}, "limits.max_noisy_values: expected an integer >= 1"),
        ({"time_seconds": 0}, "limits.time_seconds: expected a number of seconds from 0.001"),
        ({"time_seconds": 1e9}, "limits.time_seconds: expected a number of seconds from 0.001"),
        ({"time_seconds": float("inf")}, "limits.time_seconds: expected a finite number"),
        ({"time_seconds": "fast"}, "limits.time_seconds: expected a finite number"),
        ({"memory_mb": 10}, "limits.memory_mb: expected an integer >= 64, got 10"),
        ({"memory_mb": "4GB"}, "limits.memory_mb: expected an integer >= 64"),
        ({"quantile_bins": 1}, "limits.quantile_bins: expected an integer >= 2, got 1"),
        ({"quantile_bins": 5000}, "limits.quantile_bins: expected a whole number from 2 to 4096"),
        ({"threads": 2}, "limits.threads: unknown field (allowed: max_noisy_columns, "
                         "max_noisy_values, max_sql_chars, memory_mb, plan_seconds, quantile_bins, "
                         "time_seconds)"),
        ({"plan_seconds": 0}, "limits.plan_seconds: expected a number of seconds from 0.001"),
        ({"max_sql_chars": 99}, "limits.max_sql_chars: expected an integer >= 100, got 99"),
        ({"max_noisy_columns": 0}, "limits.max_noisy_columns: expected an integer >= 1, got 0"),
        ({"quantile_bins": 128, "max_noisy_columns": 100},
         "limits.quantile_bins: 128 bins are more than limits.max_noisy_columns (100)"),
        ([1], "limits: expected a mapping"),
    ],
)
def test_bad_limits_name_the_field(limits, message):
    with pytest.raises(PolicyError) as info:
        parse_policy(_limits_policy(limits))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_plan_time_limit_refuses_with_exit_2_before_the_data(capsys, setup, tmp_path, monkeypatch):
    policy = write_policy(tmp_path / "small.yaml", {"limits": {"max_noisy_values": 7}})
    paths = ["--db", str(setup.db), "--policy", str(policy), "--ledger", str(setup.ledger)]
    ran = []
    monkeypatch.setattr(execute, "run", lambda *args: ran.append(args))
    sql = "SELECT state, COUNT(*), SUM(income) FROM people GROUP BY state"  # 4 groups x 2
    for command in ("query", "explain"):
        code, out, err = run_cli(capsys, command, *paths, "--epsilon", "1", sql)
        assert code == 2 and out == ""
        assert err.strip() == (
            "error: query refused: it would release 8 noisy values (4 group(s) x 2 noisy "
            "aggregate(s)), over the policy's limit of 7 (limits.max_noisy_values); "
            "nothing was charged")
    assert ran == [] and charge_count(setup.ledger) == 0
    with PrivateDatabase.connect(setup.db, policy, setup.ledger) as db:
        with pytest.raises(QueryTooLarge) as info:
            db.query(sql, epsilon=1)
        assert (info.value.noisy_values, info.value.limit) == (8, 7)
        assert db.budget().spent_dp == 0
        monkeypatch.undo()
        # At the limit it runs: 4 groups x (COUNT, SUM, COUNT for AVG) = 12 > 7, but 4 x 1 = 4.
        assert len(db.query("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=1).df) == 4


def test_a_million_groups_is_refused_by_default_before_any_work(tmp_path):
    data = tmp_path / "grid.duckdb"
    with duckdb.connect(str(data)) as conn:
        conn.execute("CREATE TABLE grid AS SELECT (i % 1000)::INT AS a, (i // 1000)::INT AS b "
                     "FROM range(2000) r(i)")
    policy = {"budget": {"epsilon": 10.0}, "dependence": {"k": 1, "eta": 0.0},
              "tables": {"grid": {"columns": {
                  "a": {"type": "int", "domain": list(range(1000))},
                  "b": {"type": "int", "domain": list(range(1000))}}}}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(policy))
    with PrivateDatabase.connect(data, tmp_path / "grid.yaml", tmp_path / "l.sqlite", create=True) as db:
        start = time.perf_counter()
        with pytest.raises(QueryTooLarge, match="1000000 noisy values") as info:
            db.query("SELECT a, b, COUNT(*) FROM grid GROUP BY a, b", epsilon=1)
        assert time.perf_counter() - start < 5.0  # it used to run 13 s to 100 s
        assert info.value.limit == Limits().max_noisy_values
        assert db.budget().spent_dp == 0


@pytest.fixture(scope="module")
def slow_db(tmp_path_factory):
    """A table on which SLOW_SQL takes far longer than 50 ms, and a tiny one beside it."""
    path = tmp_path_factory.mktemp("slow") / "slow.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE big AS SELECT (i % 4)::INT AS g, 'row number ' || i::VARCHAR "
                     f"|| ' of the big table' AS note FROM range({SLOW_ROWS}) r(i)")
        conn.execute("CREATE TABLE small AS SELECT (i % 4)::INT AS g, 'x' AS note "
                      "FROM range(10) r(i)")
    return path


def _slow_policy(path, limits: dict):
    table = {"columns": {"g": {"type": "int", "domain": [0, 1, 2, 3]}, "note": {"type": "str"}}}
    policy = {"budget": {"epsilon": 100.0}, "dependence": {"k": 1, "eta": 0.0},
              "tables": {"big": table, "small": table}, "limits": limits}
    path.write_text(yaml.safe_dump(policy))
    return path


def test_time_limit_cancels_charges_nothing_and_the_next_query_runs(slow_db, tmp_path):
    policy = _slow_policy(tmp_path / "p.yaml", {"time_seconds": 0.05})
    ledger = tmp_path / "l.sqlite"
    with PrivateDatabase.connect(slow_db, policy, ledger, create=True) as db:
        start = time.perf_counter()
        with pytest.raises(ResourceLimitExceeded) as info:
            db.query(SLOW_SQL, epsilon=1)
        assert time.perf_counter() - start < 1.0  # cancelled, not run to the end
        assert (info.value.limit, info.value.value) == ("limits.time_seconds", 0.05)
        assert str(info.value) == ("query cancelled: it ran longer than the time limit of 0.05 s "
                                   "(limits.time_seconds in the policy); nothing was charged")
        assert db.budget().spent_dp == 0 and charge_count(ledger) == 0
        answer = db.query(FAST_SQL, epsilon=1)  # the same connection still answers
        assert len(answer.df) == 1 and db.budget().spent_dp == pytest.approx(1)
    assert charge_count(ledger) == 1


def test_time_limit_through_the_cli_is_one_line_and_exit_2(capsys, slow_db, tmp_path):
    policy = _slow_policy(tmp_path / "p.yaml", {"time_seconds": 0.05})
    paths = ["--db", str(slow_db), "--policy", str(policy), "--ledger",
             str(create_ledger(tmp_path / "l.sqlite", policy))]
    code, out, err = run_cli(capsys, "query", *paths, "--epsilon", "1", SLOW_SQL)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "time limit of 0.05 s (limits.time_seconds in the policy)" in err
    assert charge_count(tmp_path / "l.sqlite") == 0


def _bytes(setting: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+) (\w+)", setting).groups()
    return float(number) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


@pytest.mark.parametrize("suffix", [".duckdb", ".csv"])
def test_memory_limit_is_set_on_the_data_connection(people_db, tmp_path, suffix):
    data = people_db
    if suffix == ".csv":
        data = tmp_path / "people.csv"
        with duckdb.connect(str(people_db), read_only=True) as conn:
            conn.execute(f"COPY people TO '{data}' (HEADER)")
    policy = parse_policy(_limits_policy({"memory_mb": 321, "time_seconds": 2.5}))
    conn = execute.open_data(data, policy)
    try:
        memory, temp = conn.execute(
            "SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchone()
        assert _bytes(memory) == pytest.approx(321e6, abs=0.05 * 2**20)
        assert temp == ""  # nothing spills to disk
        with pytest.raises(duckdb.Error, match="locked"):
            conn.execute("SET memory_limit = '10GB'")
    finally:
        conn.close()


def test_a_query_over_the_memory_limit_is_cancelled_and_charges_nothing(tmp_path):
    data = tmp_path / "units.duckdb"
    with duckdb.connect(str(data)) as conn:  # 3M units: hashing them needs far more than 64 MB
        conn.execute("CREATE TABLE visits AS SELECT i AS person_id, (i % 2 = 0) AS sick "
                     "FROM range(3000000) r(i)")
        conn.execute("CREATE TABLE small AS SELECT (i % 2 = 0) AS sick FROM range(10) r(i)")
    sick = {"sick": {"type": "bool"}}
    policy = {"budget": {"epsilon": 100.0}, "dependence": {"k": 1, "eta": 0.0},
              "tables": {"visits": {"privacy_unit": "person_id", "columns": sick},
                         "small": {"columns": sick}},
              "limits": {"memory_mb": 64}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(policy))
    with PrivateDatabase.connect(data, tmp_path / "p.yaml", tmp_path / "l.sqlite", create=True) as db:
        with pytest.raises(ResourceLimitExceeded) as info:
            db.query("SELECT COUNT(DISTINCT person_id) FROM visits", epsilon=1)
        assert (info.value.limit, info.value.value) == ("limits.memory_mb", 64)
        assert str(info.value) == ("query cancelled: it needed more than the memory limit of "
                                   "64 MB (limits.memory_mb in the policy); nothing was charged")
        assert db.budget().spent_dp == 0
        assert len(db.query("SELECT sick, COUNT(*) FROM small GROUP BY sick", epsilon=1).df) == 2
