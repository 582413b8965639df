"""VAR_POP, VAR_SAMP, STDDEV_POP, STDDEV_SAMP: post-processing of noisy COUNT, SUM and SUM of
squares of the clamped values, with a conservative interval."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select

from tests.support import BASE_POLICY, cli_paths, create_ledger, run_cli, write_policy
from tests.test_expressions import ROW_LEVEL

POLICY = parse_policy(BASE_POLICY)


def test_three_measurements_shared_with_avg_and_their_sensitivities():
    sql = "SELECT VAR_POP(age - 50), STDDEV_SAMP(age - 50), AVG(age - 50) FROM people"
    plan = build_plan(parse_select(sql), POLICY, sql)
    assert [m.label for m in plan.measurements] == \
        ["COUNT(age - 50)", "SUM(age - 50)", "SUM((age - 50) * (age - 50))"]
    # m = 2: COUNT m, SUM m·(max(hi,0) − min(lo,0)), squares m·max(lo², hi²)
    assert [sensitivity(m, plan) for m in plan.measurements] == [2, 200, 5000]


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT VAR_POP(note) FROM people", "VAR_POP(note) refused: the column is str, not numeric"),
    ("SELECT STDDEV(income / age) FROM people", "the divisor age can be 0"),
    ("SELECT VAR_SAMP(DISTINCT age) FROM people", "DISTINCT is supported only"),
])
def test_refusals(sql, fragment):
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select(sql), POLICY, sql)
    assert fragment in str(info.value)


@pytest.mark.parametrize("function, exact", [
    ("VAR_POP", "VAR_POP"), ("VAR_SAMP", "VAR_SAMP"), ("STDDEV_POP", "STDDEV_POP"),
    ("STDDEV", "STDDEV_SAMP")])
def test_interval_covers_the_exact_value_of_the_clamped_rows(people_db, tmp_path, function, exact):
    """At ε = 20, per state, the released value lies within its 95% interval of the exact value
    (plain DuckDB over the clamped values) in at least 17 of 20 runs per group (the interval
    is conservative: it holds with probability >= 95% each time)."""
    policy = write_policy(tmp_path / "policy.yaml", {**ROW_LEVEL, "budget": {"epsilon": 1e9}})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with duckdb.connect(str(people_db), read_only=True) as conn:
        truth = np.array([v for _, v in conn.execute(
            f"SELECT state, {exact}(LEAST(GREATEST(age, 0), 100)) FROM people "
            "WHERE state IN ('CA', 'NY', 'TX', 'WA') GROUP BY state ORDER BY state").fetchall()])
    hits = np.zeros(4)
    with PrivateDatabase.connect(people_db, policy, ledger, reuse=False) as db:
        for _ in range(20):
            result = db.query(f"SELECT state, {function}(age) AS v FROM people GROUP BY state",
                              epsilon=20)
            value, width = result.df["v"].to_numpy(float), result.ci95["v"].to_numpy(float)
            hits += np.abs(value - truth) <= width
            assert (width > 0).all()
    assert (hits >= 17).all(), (hits, truth)


def test_at_a_large_epsilon_the_value_is_close(people_db, tmp_path):
    """At ε = 100 without groups (about 540 rows), the standard deviation is within 5% of the
    exact one in each of 10 runs (noise scale on the SUM of squares ~ 10000·6/100, far below
    the 1.6M it measures)."""
    policy = write_policy(tmp_path / "policy.yaml", {**ROW_LEVEL, "budget": {"epsilon": 1e9}})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with duckdb.connect(str(people_db), read_only=True) as conn:
        (truth,) = conn.execute("SELECT STDDEV_POP(LEAST(GREATEST(age, 0), 100)) FROM people").fetchone()
    with PrivateDatabase.connect(people_db, policy, ledger, reuse=False) as db:
        for _ in range(10):
            value = db.query("SELECT STDDEV_POP(age) AS s FROM people", epsilon=100).df["s"][0]
            assert abs(value - truth) <= 0.05 * truth


def test_cli_and_explain_show_the_three_measurements(setup, capsys):
    code, out, err = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "1",
                             "SELECT STDDEV(income) FROM people")
    assert code == 0, err
    assert "SUM((income) * (income))" in out and "COUNT(income)" in out
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--format", "json",
                             "SELECT STDDEV(income) AS s FROM people")
    assert code == 0, err and '"s"' in out


def test_sqrt_is_total_on_every_double():
    """SQRT is whitelisted because DuckDB gives NaN below 0 (and for NaN or -inf), never an error."""
    with duckdb.connect(config={"error_on_division_by_zero": False}) as conn:
        values = conn.execute("SELECT sqrt(x) FROM (VALUES (-1.0::DOUBLE), ('nan'::DOUBLE), "
                              "('-inf'::DOUBLE), ('inf'::DOUBLE), (NULL::DOUBLE)) t(x)").fetchall()
    assert len(values) == 5


def test_a_variance_after_a_count_of_the_same_column_keeps_its_bounds(setup):
    """COUNT(age) first binds `age` without bounds; VAR_POP(age) after it still gets its interval."""
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query("SELECT COUNT(age) AS n, VAR_POP(age) AS v FROM people GROUP BY state",
                          epsilon=1.0)
    assert (result.ci95["v"] > 0).all() and (result.ci95["v"] <= 2500).all()
