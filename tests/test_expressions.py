"""Aggregates over row expressions: SUM(expr), AVG(expr), COUNT(expr), FILTER (WHERE ...),
conditions as 0/1. Their bounds come from the policy by interval arithmetic, and the value is
clamped to them, so the sensitivity holds whatever the data holds."""

from __future__ import annotations

import copy
import math

import duckdb
import numpy as np
import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.bounds import value_range
from dpsql.engine.sql.parse import parse_select
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from tests.support import BASE_POLICY, cli_paths, create_ledger, run_cli, write_policy

POLICY = parse_policy(BASE_POLICY)
ROW_LEVEL = {"tables": {"people": {**copy.deepcopy(BASE_POLICY["tables"]["people"]),
                                   "privacy_unit": None, "max_rows_per_unit": 1}}}
del ROW_LEVEL["tables"]["people"]["privacy_unit"]


def _plan(sql: str):
    return build_plan(parse_select(sql), POLICY, sql)


@pytest.mark.parametrize("sql, label, bound", [
    ("SELECT SUM(age + 1) FROM people", "SUM(age + 1)", (1, 101)),
    ("SELECT SUM(income / 1000 - 1) FROM people", "SUM(income / 1000 - 1)", (-1, 0)),
    ("SELECT SUM(CASE WHEN age > 30 THEN 1 ELSE 0 END) FROM people",
     "SUM(CASE WHEN age > 30 THEN 1 ELSE 0 END)", (0, 1)),
    ("SELECT SUM(sick) FROM people", "SUM(sick)", (0, 1)),
    ("SELECT SUM(age > 40) FROM people", "SUM(age > 40)", (0, 1)),
    ("SELECT SUM(age) FILTER (WHERE sick) FROM people", "SUM(CASE WHEN sick THEN age END)", (0, 100)),
    ("SELECT SUM(ABS(age - 70) * -2) FROM people", "SUM(ABS(age - 70) * -2)", (-140, 0)),
    ("SELECT SUM(LEAST(age, 30)) FROM people", "SUM(LEAST(age, 30))", (0, 30)),
    ("SELECT SUM(GREATEST(age, 30)) FROM people", "SUM(GREATEST(age, 30))", (30, 100)),
    # A NULL age makes LEAST(age, 150) 150 and GREATEST(age, -15) -15 (NULL arguments skipped).
    ("SELECT SUM(LEAST(age, 150)) FROM people", "SUM(LEAST(age, 150))", (0, 150)),
    ("SELECT SUM(GREATEST(age, -15)) FROM people", "SUM(GREATEST(age, -15))", (-15, 100)),
    ("SELECT SUM(LEAST(age, income)) FROM people", "SUM(LEAST(age, income))", (0, 1000)),
    ("SELECT SUM(LEAST(COALESCE(age, 0), 150)) FROM people", "SUM(LEAST(COALESCE(age, 0), 150))",
     (0, 100)),
    ("SELECT SUM(FLOOR(income / 300)) FROM people", "SUM(FLOOR(income / 300))", (0, 3)),
    ("SELECT SUM(age % 7) FROM people", "SUM(age % 7)", (0, 7)),
    ("SELECT SUM(COALESCE(age, -5)) FROM people", "SUM(COALESCE(age, -5))", (-5, 100)),
    ("SELECT SUM(CAST(income AS INT)) FROM people", "SUM(CAST(income AS INT))", (0, 1000)),
    ("SELECT SUM(income / (age + 1)) FROM people", "SUM(income / (age + 1))", (0, 1000)),
])
def test_bounds_follow_from_the_policy_by_interval_arithmetic(sql, label, bound):
    (m,) = _plan(sql).measurements
    assert m.label == label
    assert m.operand is not None and m.operand.bounds == bound


def test_sensitivity_is_that_of_the_expression_bounds():
    """m = 2 rows per unit: m·(max(hi,0) − min(lo,0)) alone, 2m·max(|lo|, |hi|) grouped."""
    for sql, expected in (("SELECT SUM(age - 30) FROM people", 2 * 100),
                          ("SELECT state, SUM(age - 30) FROM people GROUP BY state", 4 * 70),
                          ("SELECT SUM(sick) FROM people", 2),
                          ("SELECT COUNT(*) FILTER (WHERE sick) FROM people", 2)):
        plan = _plan(sql)
        assert sensitivity(plan.measurements[0], plan) == expected, sql


def test_conditions_are_summed_as_integers_and_floats_as_floats():
    plan = _plan("SELECT SUM(sick), SUM(CASE WHEN sick THEN 1 ELSE 0 END), SUM(ABS(age)), "
                 "SUM(age / 2), AVG(sick) FROM people")
    assert [m.integer for m in plan.measurements] == [True, True, True, False, True]


def test_each_expression_is_measured_once_and_avg_shares_it():
    plan = _plan("SELECT SUM(age + 1), AVG(age + 1), COUNT(age + 1), AVG(sick), COUNT(sick) FROM people")
    assert [m.label for m in plan.measurements] == \
        ["SUM(age + 1)", "COUNT(age + 1)", "SUM(sick)", "COUNT(sick)"]


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT SUM(income / age) FROM people",
     "the divisor age can be 0 (its public range is [0, 100]), so the quotient has no bound; "
     "divide the aggregate instead"),
    ("SELECT AVG(note) FROM people", "AVG(note) refused: the column is str, not numeric "
     "(a condition counts as 0/1; or COUNT(note))"),
    ("SELECT SUM(LENGTH(note)) FROM people", "no bound follows from the policy for LENGTH"),
    ("SELECT SUM(CAST(note AS INT)) FROM people", "column note is str, not numeric"),
    ("SELECT SUM(income * 1e15) FROM people", "its values may reach [0, 1e+18]"),
    ("SELECT SUM(NULL) FROM people", "SUM(NULL) refused: the argument is always NULL"),
    ("SELECT COUNT(DISTINCT person_id) FILTER (WHERE sick) FROM people",
     "FILTER is not supported on COUNT(DISTINCT ...); put the condition in WHERE"),
    ("SELECT SUM(age + person_id) FROM people", "column person_id is the privacy unit"),
    ("SELECT SUM(age) FILTER (WHERE COUNT(*) > 2) FROM people", "aggregate COUNT(*) refused"),
    ("SELECT SUM(age, income) FROM people", "could not parse the SQL"),
])
def test_refusals_name_what_is_wrong_and_the_alternative(sql, fragment):
    with pytest.raises(QueryRefused) as info:
        _plan(sql)
    assert fragment in str(info.value)


def test_a_missing_bound_names_the_column_and_the_alternatives(tmp_path):
    policy = parse_policy({**BASE_POLICY, "tables": {"people": {
        **BASE_POLICY["tables"]["people"],
        "columns": {**BASE_POLICY["tables"]["people"]["columns"],
                    "age": {"type": "int", "domain": [1, 2, 3]}}}}})
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select("SELECT AVG(age * 2) FROM people"), policy, "")
    assert str(info.value) == (
        "AVG(age * 2) refused: the policy gives no lower/upper bounds for age, so its sensitivity "
        "is unbounded; declare them in the policy or use COUNT(age * 2); or GROUP BY age")


VALUES = {"age": st.one_of(st.none(), st.integers(0, 100)),
          "income": st.one_of(st.none(), st.floats(0, 1000)),
          "sick": st.one_of(st.none(), st.booleans())}
EXPRESSIONS = [
    "age * income - 3 * age", "CASE WHEN sick THEN -income ELSE age / 4 END", "ABS(age - income)",
    "ROUND(income / 7, 1)", "CEIL(income / 3) - FLOOR(age / 3)", "age % 13", "-(age // 3)",
    "LEAST(age, income, 50) * GREATEST(age - 90, -3)", "COALESCE(age, income, 0) / (age + 1)",
    "CAST(income AS INT) + CAST(sick AS INT)", "CAST(age > 50 AS INT) - 2",
    # LEAST and GREATEST skip a NULL argument: LEAST(NULL, 150) is 150, beyond age's bounds.
    "LEAST(age, 150)", "GREATEST(age, -15)", "LEAST(age, income + 2000)", "GREATEST(age, income - 2000)",
]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(EXPRESSIONS), st.fixed_dictionaries(VALUES))
# DuckDB's // on DOUBLE operands is a plain division, not a floor: 100 // 3 is 33.33.
@example("-(age // 3)", {"age": 100, "income": None, "sick": None})
@example("LEAST(age, 150)", {"age": None, "income": None, "sick": None})
@example("GREATEST(age, -15)", {"age": None, "income": None, "sick": None})
def test_derived_bounds_contain_every_value_within_the_column_bounds(expression, row):
    """Soundness of the interval arithmetic: DuckDB's value of each expression, on any row
    within the policy's bounds, lies in the derived range (so the clamp only acts on data
    outside the policy's bounds)."""
    (m,) = _plan(f"SELECT SUM({expression}) FROM people").measurements
    lo, hi = m.operand.bounds
    conn = duckdb.connect(config={"error_on_division_by_zero": False})
    conn.execute("CREATE TABLE people (age INTEGER, income DOUBLE, sick BOOLEAN)")
    conn.execute("INSERT INTO people VALUES (?, ?, ?)", [row["age"], row["income"], row["sick"]])
    (value,) = conn.execute(f"SELECT {m.operand.value.sql('duckdb')} FROM people").fetchone()
    if value is not None and not (isinstance(value, float) and math.isnan(value)):
        assert lo - 1e-9 * max(1.0, abs(lo)) <= float(value) <= hi + 1e-9 * max(1.0, abs(hi)), \
            (expression, row, value, lo, hi)


def test_value_range_of_a_constant_null_is_none():
    assert value_range(exp.Null(), lambda column: (0.0, 1.0)) is None


@pytest.fixture
def row_level(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", {**ROW_LEVEL, "budget": {"epsilon": 1e9}})
    return people_db, policy, create_ledger(tmp_path / "ledger.sqlite", policy)


def test_answers_centre_on_the_exact_clamped_values(row_level):
    """At ε = 100 the noise is small (the interval says how small): each answer lies within its
    95% interval of the exact value, computed here in plain DuckDB with the clamp. With a miss
    rate of at most 5%, the 320 cell-runs miss more than 34 times with probability 1.5e-5, and
    some cell misses more than 8 of its 20 runs with probability 3.2e-6; a cell centred on a
    wrong value misses nearly always."""
    db_path, policy, ledger = row_level
    sql = ("SELECT state, AVG(sick) AS rate, SUM(CASE WHEN age >= 18 THEN 1 ELSE 0 END) AS adults, "
           "COUNT(*) FILTER (WHERE income > 500) AS rich, SUM(age + 1) AS s FROM people "
           "GROUP BY state")
    with duckdb.connect(str(db_path), read_only=True) as conn:
        exact = conn.execute(
            "SELECT state, AVG(CAST(sick AS INT)), SUM(CASE WHEN age >= 18 THEN 1 ELSE 0 END), "
            "COUNT(*) FILTER (WHERE income > 500), SUM(LEAST(GREATEST(age + 1, 1), 101)) "
            "FROM people WHERE state IN ('CA', 'NY', 'TX', 'WA') GROUP BY state ORDER BY state"
        ).fetchall()
    truth = np.array([[float(v) for v in row[1:]] for row in exact])
    hits = np.zeros_like(truth)
    with PrivateDatabase.connect(db_path, policy, ledger, reuse=False) as db:
        for _ in range(20):
            result = db.query(sql, epsilon=100)
            assert list(result.df["state"]) == ["CA", "NY", "TX", "WA"]
            columns = ["rate", "adults", "rich", "s"]
            answer = result.df[columns].to_numpy(dtype=float)
            hits += np.abs(answer - truth) <= result.ci95[columns].to_numpy(dtype=float)
    misses = 20 - hits
    assert misses.sum() <= 34 and (misses <= 8).all(), (hits, truth)


def test_explain_and_the_cli_show_the_expression_and_its_sensitivity(setup, capsys):
    sql = "SELECT AVG(sick) AS rate, COUNT(*) FILTER (WHERE age > 30) FROM people"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        explained = db.explain(sql, epsilon=1.0)
    assert [(a.function, a.sensitivity) for a in explained.aggregates] == [
        ("SUM(sick)", 2), ("COUNT(sick)", 2), ("COUNT(CASE WHEN age > 30 THEN 1 END)", 2)]
    assert 'TRY_CAST("sick" AS BIGINT)' in explained.rewritten_sql
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--format",
                             "json", sql)
    assert code == 0, err
    assert '"rate"' in out and "COUNT(CASE WHEN age > 30 THEN 1 END)" in out


def test_avg_after_a_count_of_the_same_condition_keeps_its_bounds(setup):
    """COUNT(sick) first binds `sick` without bounds; AVG(sick) after it still gets an interval."""
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query("SELECT COUNT(sick) AS n, AVG(sick) AS rate FROM people", epsilon=1.0)
    assert 0 < result.ci95["rate"][0] <= 1


def test_least_of_a_null_column_and_a_literal_is_the_literal(tmp_path):
    """SQL skips a NULL argument of LEAST/GREATEST: with x in [0, 30] half NULL, SUM(LEAST(x,
    100)) counts 100 for each NULL row (the exact 27,000 here), and AVG(GREATEST(x, -15)) averages
    -15 in; the answer centres there, not on the NULL rows clamped into [0, 30]."""
    db = tmp_path / "nulls.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE TABLE t AS SELECT i AS id, CASE WHEN i % 2 = 0 THEN NULL ELSE 30 END AS x "
                     "FROM range(540) r(i)")
    policy = write_policy(tmp_path / "policy.yaml", {
        "budget": {"epsilon": 1e9}, "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
        "tables": {"t": {"privacy_unit": "id", "max_rows_per_unit": 1,
                         "columns": {"x": {"type": "int", "lower": 0, "upper": 30}}}}})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(db, policy, ledger) as database:
        result = database.query("SELECT SUM(LEAST(x, 100)) AS s, AVG(GREATEST(x, -15)) AS a FROM t",
                                epsilon=100)
    # Within 4 of its 95% half-widths (Laplace-tailed noise leaves that with probability about
    # 20^-4 = 6e-6), far from where clamping the NULL rows would centre it (8,100 and 15).
    assert abs(result.df["s"][0] - (270 * 100 + 270 * 30)) <= 4 * result.ci95["s"][0]
    assert abs(result.df["a"][0] - 7.5) <= 4 * result.ci95["a"][0]
    assert 4 * result.ci95["s"][0] < 35_100 - 8_100 and 4 * result.ci95["a"][0] < 15 - 7.5
