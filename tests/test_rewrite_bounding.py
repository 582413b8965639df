"""Per-unit bounding: at most m rows per unit, chosen by a keyed hash of each unit's own rows."""

from __future__ import annotations

import copy
import hashlib
import math

import duckdb
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import BASE_POLICY, STATES

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
COLUMNS = "person_id, state, age, income, sick, note"


def _table(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(":memory:")
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age INTEGER, "
                 "income DOUBLE, sick BOOLEAN, note VARCHAR)")
    if rows:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, 'row')", rows)
    return conn


def _table_spec(limit: int):
    raw = copy.deepcopy(BASE_POLICY)
    raw["tables"]["people"]["max_rows_per_unit"] = limit
    return parse_policy(raw)


def _kept(conn, limit: int, key: str) -> list[tuple]:
    """The rows a query sees after bounding, as sorted content tuples."""
    execute.bound_units(conn, _table_spec(limit).tables["people"], key)
    return sorted(conn.execute(f"SELECT {COLUMNS} FROM dpsql_bounded.people").fetchall(), key=repr)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, limit=st.integers(1, 4), key=st.text("abcdef0123456789", min_size=1, max_size=8))
def test_each_unit_keeps_min_of_its_rows_and_the_limit(rows, limit, key):
    conn = _table(rows)
    kept = _kept(conn, limit, key)
    for unit in {r[0] for r in rows}:
        have = sum(1 for r in rows if r[0] == unit)
        # A row with a NULL unit is a unit of its own: every one is kept.
        assert sum(1 for r in kept if r[0] == unit) == (have if unit is None else min(have, limit))
    assert kept == _reference(rows, limit, key)


def _text(value, is_float: bool) -> str:
    """The rule's canonical text of one value, written independently of the engine's SQL."""
    if value is None:
        return "N"
    if isinstance(value, bool):
        return "V" + str(value).lower()
    if is_float:
        scaled = float(value) * 2 ** 20
        if abs(scaled) < 2 ** 62:
            return f"V{math.floor(scaled)}"
        return f"V{int(scaled)}" if math.isfinite(scaled) and abs(scaled) < 1e38 else "Vbig"
    return f"V{value}"


def _reference(rows: list[tuple], limit: int, key: str) -> list[tuple]:
    """The rows the rule keeps, computed in Python: per unit, the `limit` rows with the smallest
    MD5 of key|person_id|age|income|note|sick|state, ties broken by the values, NULL first."""
    full = [(*r, "row") for r in rows]  # person_id, state, age, income, sick, note

    def order(r: tuple) -> tuple:
        content = (r[0], r[2], r[3], r[5], r[4], r[1])  # the policy's columns, sorted by name
        text = "|".join([key] + [_text(v, i == 2) for i, v in enumerate(content)])
        return (hashlib.md5(text.encode()).hexdigest(),
                *((v is not None, v if v is not None else 0) for v in content))

    kept = [r for r in full if r[0] is None]
    for unit in {r[0] for r in full} - {None}:
        kept += sorted((r for r in full if r[0] == unit), key=order)[:limit]
    return sorted(kept, key=repr)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, other=rows_strategy, limit=st.integers(1, 3))
def test_what_a_unit_keeps_does_not_depend_on_other_units(rows, other, limit):
    """Adding another unit's rows anywhere (shifting every rowid) leaves each unit's kept rows alone."""
    intruder = [(99, *r[1:]) for r in other]
    alone = _kept(_table(rows), limit, "k")
    mixed = _kept(_table(intruder + rows), limit, "k")
    assert [r for r in mixed if r[0] != 99] == alone


def _exact(conn, policy, sql: str) -> list:
    plan = build_plan(parse_select(sql), policy, sql)
    return execute.run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values["__m0"]


def test_each_null_unit_row_is_a_unit_of_its_own_and_queries_skip_dropped_rows():
    conn = _table([(None, "CA", 1, 1.0, True)] * 5 + [(1, "NY", 2, 2.0, False)] * 4
                  + [(2, "TX", 3, 3.0, False)] * 2)
    policy = _table_spec(3)
    execute.bound_units(conn, policy.tables["people"], "k")
    assert _exact(conn, policy, "SELECT COUNT(*) FROM people") == [5 + 3 + 2]
    assert _exact(conn, policy, "SELECT COUNT(DISTINCT person_id) FROM people") == [5 + 1 + 1]
    assert _exact(conn, policy, "SELECT COUNT(DISTINCT person_id) FROM people WHERE sick") == [5]
    grouped = "SELECT state, COUNT(DISTINCT person_id) FROM people GROUP BY state"
    assert _exact(conn, policy, grouped) == [5, 1, 1, 0]


def test_the_bounded_copy_is_read_even_when_no_unit_is_over_the_limit():
    """The SQL never says whether some unit is over the bound: it always reads the copy."""
    conn = _table([(1, "CA", 1, 1.0, True), (2, "NY", 2, 2.0, False)])
    policy = _table_spec(1)
    execute.bound_units(conn, policy.tables["people"], "k")
    sql = "SELECT COUNT(*) FROM people"
    assert "dpsql_bounded" in rewrite(build_plan(parse_select(sql), policy, sql)).sql("duckdb")
    assert _exact(conn, policy, sql) == [2]
