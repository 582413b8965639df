"""Per-unit bounding: at most m rows per unit, chosen by a keyed hash of each unit's own rows
over the columns a query reads (docs/theory.md §28)."""

from __future__ import annotations

import copy
import hashlib
import math
import random
from dataclasses import replace

from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import bounded_table, read_columns, rewrite
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import BASE_POLICY, STATES, bound_plans, people_in_memory

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
INDEX = {"person_id": 0, "state": 1, "age": 2, "income": 3, "sick": 4, "note": 5}
POLICY_COLUMNS = sorted(set(INDEX) - {"person_id"})
scopes = st.sets(st.sampled_from(POLICY_COLUMNS)).map(frozenset)


def _table_spec(limit: int):
    raw = copy.deepcopy(BASE_POLICY)
    raw["tables"]["people"]["max_rows_per_unit"] = limit
    return parse_policy(raw)


def _kept(conn, limit: int, key: str, scope: frozenset[str] | None = None) -> list[tuple]:
    """The rows a query reading `scope` (None: every column) sees after bounding, as sorted
    tuples of the unit and those columns (in the order of COLUMNS), under the rule of a table
    whose calibration depends on the columns read (docs/theory.md §28)."""
    table = replace(_table_spec(limit).tables["people"], scoped=True)
    execute.bound_units(conn, table, key, scope)
    names = [c for c in INDEX if scope is None or c == "person_id" or c in scope]
    return sorted(conn.execute(f"SELECT {', '.join(names)} FROM "
                               f"{bounded_table(table, scope).sql('duckdb')}").fetchall(), key=repr)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, limit=st.integers(1, 4), key=st.text("abcdef0123456789", min_size=1, max_size=8))
def test_each_unit_keeps_min_of_its_rows_and_the_limit(rows, limit, key):
    conn = people_in_memory(rows)
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


def _reference(rows: list[tuple], limit: int, key: str,
               scope: frozenset[str] | None = None) -> list[tuple]:
    """The rows the rule keeps, computed in Python: per unit, the `limit` rows with the smallest
    MD5 of key|person_id|<the columns read, sorted by name>, ties broken by those values, NULL
    first; each as the unit and the columns read in the order of COLUMNS."""
    read = sorted(POLICY_COLUMNS if scope is None else scope)
    hashed = [INDEX["person_id"]] + [INDEX[c] for c in read]
    shown = [i for c, i in INDEX.items() if c == "person_id" or c in read]
    full = [(*r, "row") for r in rows]  # person_id, state, age, income, sick, note

    def order(r: tuple) -> tuple:
        content = [r[i] for i in hashed]
        text = "|".join([key] + [_text(r[i], i == INDEX["income"]) for i in hashed])
        return (hashlib.md5(text.encode()).hexdigest(),
                *((v is not None, v if v is not None else 0) for v in content))

    kept = [r for r in full if r[0] is None]
    for unit in {r[0] for r in full} - {None}:
        kept += sorted((r for r in full if r[0] == unit), key=order)[:limit]
    return sorted((tuple(r[i] for i in shown) for r in kept), key=repr)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, limit=st.integers(1, 4), key=st.text("abcdef0123456789", min_size=1, max_size=8),
       scope=scopes)
def test_a_column_sets_copy_keeps_the_rows_its_rule_names(rows, limit, key, scope):
    """The copy for the columns a query reads keeps, per unit, min(rows, limit) rows chosen by
    the keyed hash of the unit and those columns only."""
    kept = _kept(people_in_memory(rows), limit, key, scope)
    for unit in {r[0] for r in rows}:
        have = sum(1 for r in rows if r[0] == unit)
        assert sum(1 for r in kept if r[0] == unit) == (have if unit is None else min(have, limit))
    assert kept == _reference(rows, limit, key, scope)


def _redraw(row: tuple, scope: frozenset[str], rng: random.Random) -> tuple:
    """`row` with every policy column outside `scope` drawn anew (the unit is kept)."""
    fresh = {"state": rng.choice(STATES), "age": rng.choice([None, rng.randint(-5, 110)]),
             "income": rng.choice([None, rng.uniform(-50, 1200)]), "sick": rng.random() < 0.5}
    return tuple(value if name == "person_id" or name in scope else fresh[name]
                 for name, value in zip(INDEX, row, strict=False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, limit=st.integers(1, 3), scope=scopes, seed=st.integers(0, 2 ** 32 - 1))
def test_what_a_column_sets_copy_holds_depends_only_on_those_columns(rows, limit, scope, seed):
    """Redrawing every column a query does not read, in every row, leaves its copy unchanged:
    what the query sees is a function of the units and the columns read (docs/theory.md §28)."""
    rng = random.Random(seed)
    redrawn = [_redraw(row, scope, rng) for row in rows]
    assert _kept(people_in_memory(redrawn), limit, "k", scope) == \
        _kept(people_in_memory(rows), limit, "k", scope)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, other=rows_strategy, limit=st.integers(1, 3),
       scope=st.one_of(st.none(), scopes))
def test_what_a_unit_keeps_does_not_depend_on_other_units(rows, other, limit, scope):
    """Adding another unit's rows anywhere (shifting every rowid) leaves each unit's kept rows
    alone, under the rule of every column set."""
    intruder = [(99, *r[1:]) for r in other]
    alone = _kept(people_in_memory(rows), limit, "k", scope)
    mixed = _kept(people_in_memory(intruder + rows), limit, "k", scope)
    assert [r for r in mixed if r[0] != 99] == alone


def _exact(conn, policy, sql: str) -> list:
    plan = build_plan(parse_select(sql), policy, sql)
    bound_plans(conn, [plan], "k")
    return execute.run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values["__m0"]


def test_each_null_unit_row_is_a_unit_of_its_own_and_queries_skip_dropped_rows():
    conn = people_in_memory([(None, "CA", 1, 1.0, True)] * 5 + [(1, "NY", 2, 2.0, False)] * 4
                  + [(2, "TX", 3, 3.0, False)] * 2)
    policy = _table_spec(3)
    assert _exact(conn, policy, "SELECT COUNT(*) FROM people") == [5 + 3 + 2]
    assert _exact(conn, policy, "SELECT COUNT(DISTINCT person_id) FROM people") == [5 + 1 + 1]
    assert _exact(conn, policy, "SELECT COUNT(DISTINCT person_id) FROM people WHERE sick") == [5]
    grouped = "SELECT state, COUNT(DISTINCT person_id) FROM people GROUP BY state"
    assert _exact(conn, policy, grouped) == [5, 1, 1, 0]


def test_the_bounded_copy_is_read_even_when_no_unit_is_over_the_limit():
    """The SQL never says whether some unit is over the bound: it always reads the copy."""
    conn = people_in_memory([(1, "CA", 1, 1.0, True), (2, "NY", 2, 2.0, False)])
    policy = _table_spec(1)
    sql = "SELECT COUNT(*) FROM people"
    assert "dpsql_bounded" in rewrite(build_plan(parse_select(sql), policy, sql)).sql("duckdb")
    assert _exact(conn, policy, sql) == [2]


def test_a_query_reads_the_copy_of_exactly_the_columns_it_names():
    """WHERE, group keys and aggregate arguments name the columns read; the rewrite reads the
    copy of that set, of every column when it names them all, of none for COUNT(*)."""
    policy = _table_spec(2)
    table = policy.tables["people"]
    cases = {"SELECT COUNT(*) FROM people WHERE sick": {"sick"},
             "SELECT COUNT(*) FROM people": set(),
             "SELECT COUNT(DISTINCT person_id) FROM people": set(),
             "SELECT state, SUM(income) FROM people WHERE age > 3 GROUP BY state": {"state", "income", "age"},
             "SELECT COUNT(note) FROM people WHERE sick AND age > 1 AND state = 'CA' AND income > 0":
                 set(POLICY_COLUMNS)}
    for sql, read in cases.items():
        plan = build_plan(parse_select(sql), policy, sql)
        assert read_columns(plan) == read, sql
        copy = bounded_table(table, None if read == set(POLICY_COLUMNS) else read).sql("duckdb")
        assert copy in rewrite(plan).sql("duckdb"), sql
    conn = people_in_memory([(1, "CA", 1, 1.0, True)] * 3 + [(2, "NY", 2, 2.0, False)])
    assert _exact(conn, policy, "SELECT COUNT(*) FROM people WHERE sick") == [2]
