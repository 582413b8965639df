"""The fast bounding plan keeps exactly the rows the plain window over every unit keeps."""

from __future__ import annotations

import copy
from unittest import mock

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from engine import execute
from engine import rewrite as rewrite_module
from engine.parse import parse_select
from engine.plan import build_plan
from engine.policy import parse_policy
from engine.rewrite import rewrite
from tests.support import BASE_POLICY, STATES

QUERIES = [
    "SELECT COUNT(*) FROM people",
    "SELECT COUNT(*) FROM people WHERE age >= 40",
    "SELECT SUM(income) FROM people",
    "SELECT AVG(age) FROM people WHERE sick",
    "SELECT state, COUNT(*) FROM people GROUP BY state",
    "SELECT state, sick, COUNT(*), SUM(income), AVG(age) FROM people WHERE age < 90 GROUP BY state, sick",
    "SELECT COUNT(DISTINCT person_id) FROM people WHERE income > 100",
    "SELECT state, COUNT(DISTINCT person_id) FROM people GROUP BY state",
]


def _window_bounded_rows(plan, hash_key: str) -> exp.Select:
    """The reference: rank every unit's filtered rows by HASH(rowid, key), keep the first m."""
    needed = {col.name for col in plan.group_by}
    needed |= {m.column.name for m in plan.measurements if m.column is not None}
    items = [exp.column(name, quoted=True) for name in needed]
    items.append(exp.column(plan.table.privacy_unit, quoted=True))
    conditions = [plan.where.copy()] if plan.where is not None else []
    for col in plan.group_by:
        conditions.append(exp.In(this=exp.column(col.name, quoted=True),
                                 expressions=[rewrite_module._literal(v) for v in col.group_values]))
    rows = exp.select(*items).from_(exp.to_table(plan.table.name))
    if conditions:
        rows = rows.where(exp.and_(*conditions))
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column(plan.table.privacy_unit, quoted=True)],
        order=exp.Order(expressions=[exp.Ordered(
            this=exp.func("HASH", exp.column("rowid"), exp.Literal.string(hash_key)))]),
    )
    return rows.qualify(exp.LTE(this=rank, expression=exp.Literal.number(plan.table.max_rows_per_unit)))


rows_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 12)),
        st.sampled_from(STATES + ["ZZ"]),
        st.one_of(st.none(), st.integers(-5, 110)),
        st.one_of(st.none(), st.floats(-50, 1200, allow_nan=False)),
        st.booleans(),
    ),
    min_size=0, max_size=60,
)


def _table(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(":memory:")
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age INTEGER, "
                 "income DOUBLE, sick BOOLEAN, note VARCHAR)")
    if rows:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, 'row')", rows)
    return conn


def _plan(sql: str, limit: int):
    raw = copy.deepcopy(BASE_POLICY)
    raw["tables"]["people"]["max_rows_per_unit"] = limit
    return build_plan(parse_select(sql), parse_policy(raw), sql)


def _same(new: execute.ExactAnswer, old: execute.ExactAnswer) -> None:
    assert new.keys == old.keys
    assert new.values.keys() == old.values.keys()
    for name, values in new.values.items():
        assert values == pytest.approx(old.values[name], rel=1e-9, abs=1e-6), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, limit=st.integers(1, 4), sql=st.sampled_from(QUERIES),
       key=st.text("abcdef0123456789", min_size=1, max_size=8))
def test_fast_bounding_equals_window_over_every_unit(rows, limit, sql, key):
    plan = _plan(sql, limit)
    conn = _table(rows)
    fast = execute.run(conn, rewrite(plan, key), len(plan.group_by))
    with mock.patch.object(rewrite_module, "_bounded_rows", _window_bounded_rows):
        reference = execute.run(conn, rewrite(plan, key), len(plan.group_by))
    _same(fast, reference)


def test_bounding_keeps_at_most_m_rows_per_unit_even_for_null_units():
    conn = _table([(None, "CA", 1, 1.0, True)] * 5 + [(1, "NY", 2, 2.0, False)] * 4
                  + [(2, "TX", 3, 3.0, False)] * 2)
    plan = _plan("SELECT COUNT(*) FROM people", 3)
    assert execute.run(conn, rewrite(plan, "k"), 0).values["__m0"] == [3 + 3 + 2]


def test_only_units_over_the_limit_are_ranked():
    sql = rewrite(_plan("SELECT state, COUNT(*) FROM people GROUP BY state", 2), "k")
    assert "HAVING COUNT(*) > 2" in sql
    assert sql.count("ROW_NUMBER()") == 1 and "SEMI JOIN" in sql and "ANTI JOIN" in sql


def test_ungrouped_distinct_count_skips_bounding():
    sql = rewrite(_plan("SELECT COUNT(DISTINCT person_id) FROM people", 1), "k")
    assert "ROW_NUMBER" not in sql
