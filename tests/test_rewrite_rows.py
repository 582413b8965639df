"""Aggregates over rows that select only bare columns read those rows' FROM and WHERE directly
(`engine/rewrite.py`, `_over_rows`): the same exact values as reading them through the `rows`
subquery, on data with NULL, NaN, ±inf and out-of-bound values, grouped or not, joined or not;
and they count as reading the same columns."""

from __future__ import annotations

import math

import duckdb
import pytest
from dpsql.engine import rewrite as rewriting
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.columns import columns_read
from dpsql.engine.sql.parse import parse_select
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp, parse_one

from tests.support import (
    BASE_POLICY,
    REGIONS,
    STATES,
    bound_plans,
    people_in_memory,
    with_regions,
)

QUERIES = [  # (query, whether its rows select only bare columns: an expression key or a
    # quantile's clamped value is a named row value, read through the subquery)
    ("SELECT COUNT(*) FROM people", True),
    ("SELECT COUNT(*) FROM people WHERE age > 30 AND income < 500", True),
    ("SELECT SUM(income), AVG(age), COUNT(age) FROM people WHERE sick", True),
    ("SELECT state, COUNT(*), SUM(age) FROM people GROUP BY state", True),
    ("SELECT state, sick, AVG(income) FROM people WHERE age BETWEEN 10 AND 90 GROUP BY state, "
     "sick", True),
    ("SELECT COUNT(DISTINCT person_id) FROM people WHERE age > 20", True),
    ("SELECT region, COUNT(*), SUM(income) FROM people JOIN regions ON people.state = "
     "regions.state WHERE population > 2 GROUP BY region", True),
    ("SELECT SUM(income * 2), COUNT(*) FROM people", True),
    ("SELECT state, SUM(age + 1) FROM people WHERE sick GROUP BY state", True),
    ("SELECT COUNT(*) FILTER (WHERE age > 50), SUM(income) FROM people", True),
    ("SELECT CASE WHEN age > 50 THEN 'old' ELSE 'young' END AS band, SUM(income) FROM people "
     "GROUP BY band", False),
    ("SELECT FLOOR(age / 10) AS decade, COUNT(*) FROM people WHERE sick GROUP BY decade", False),
    ("SELECT state, COUNT(*), MEDIAN(age) FROM people GROUP BY state", False),
]

rows_strategy = st.lists(
    st.tuples(
        st.integers(0, 12),
        st.sampled_from(STATES + ["ZZ"]),
        st.one_of(st.none(), st.integers(-5, 130)),
        st.one_of(st.none(), st.sampled_from([math.nan, math.inf, -math.inf, -3.5, 0.0, 7.25,
                                              999.0, 5000.0])),
        st.one_of(st.none(), st.booleans()),
    ),
    max_size=40,
)


def _policy(row_level: bool = False):
    raw = with_regions()
    raw.update({k: v for k, v in BASE_POLICY.items() if k != "tables"})
    if row_level:  # each row one individual: the row-level copy and its stored clamps (§34)
        del raw["tables"]["people"]["privacy_unit"], raw["tables"]["people"]["max_rows_per_unit"]
    return parse_policy(raw)


def _connection(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    conn = people_in_memory(rows)
    conn.execute("CREATE TABLE regions (state VARCHAR, region VARCHAR, population BIGINT)")
    conn.executemany("INSERT INTO regions VALUES (?, ?, ?)", REGIONS)
    return conn


def _nested(monkeypatch, plan) -> str:
    """The plan's SQL as it was before the flat form: every aggregate over the `rows` subquery."""
    with monkeypatch.context() as patched:
        patched.setattr(rewriting, "_over_rows", lambda source, projections: rewriting.exp.select(
            *projections).from_(source.subquery("rows", copy=False), copy=False))
        return rewriting.rewrite(plan).sql("duckdb")


def _same(left: list[tuple], right: list[tuple]) -> bool:
    return len(left) == len(right) and all(
        len(a) == len(b) and all(x == y or (isinstance(x, float) and isinstance(y, float) and (
            math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-9) or (math.isnan(x) and math.isnan(y))))
            for x, y in zip(a, b, strict=True)) for a, b in zip(left, right, strict=True))


@pytest.mark.parametrize("sql,flat", QUERIES)
def test_only_rows_of_bare_columns_are_read_directly(sql, flat):
    """The flat form is a function of the plan alone: taken exactly when the rows select bare
    columns (or nothing), never around a row value such as a clamped expression."""
    policy = _policy()
    text = rewriting.rewrite(build_plan(parse_select(sql), policy, sql)).sql("duckdb")
    assert ("AS rows" not in text) == flat, text


def test_a_row_level_query_reads_the_columns_its_nested_form_names(monkeypatch):
    """The columns whose eta calibrates a query are those its SQL names (§11): a flat query
    summing a stored clamp (`__clamped_age`) no longer names `age` among the rows, and still
    reads it, as the nested form did."""
    policy = _policy(row_level=True)
    for sql, _ in QUERIES:
        if "person_id" in sql:  # no unit to count without a privacy unit
            continue
        plan = build_plan(parse_select(sql), policy, sql)
        nested = parse_one(_nested(monkeypatch, plan), dialect="duckdb")
        named = {column.name.lower() for column in nested.find_all(exp.Column)}
        assert columns_read(plan) == {f"people.{name}" for name in policy.tables["people"].columns
                                      if name in named}, sql


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_strategy)
def test_the_flat_form_gives_the_nested_forms_exact_values(monkeypatch, rows):
    policy = _policy()
    plans = [build_plan(parse_select(sql), policy, sql) for sql, _ in QUERIES]
    conn = _connection(rows)
    try:
        bound_plans(conn, plans)
        for plan in plans:
            flat = conn.execute(rewriting.rewrite(plan).sql("duckdb")).fetchall()
            nested = conn.execute(_nested(monkeypatch, plan)).fetchall()
            assert _same(flat, nested), (plan.sql, flat, nested)
    finally:
        conn.close()
