"""Property: changing one privacy unit's rows moves each exact aggregate by at most its sensitivity."""

from __future__ import annotations

import duckdb
import pytest
from dpsql.engine.backends.duckdb_execute import bound_units, run
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import copy_scope, read_columns, rewrite
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.library import POLICY as LIBRARY
from tests.library import checkout, reader, write_library
from tests.support import BASE_POLICY, REGIONS, STATES, bound_plans, with_regions, with_visits

POLICY = parse_policy(BASE_POLICY)
QUERIES = [
    "SELECT COUNT(*) FROM people",
    "SELECT COUNT(age), SUM(age), SUM(income), COUNT(DISTINCT person_id) FROM people",
    "SELECT state, COUNT(*), SUM(income), AVG(age), COUNT(DISTINCT person_id) FROM people GROUP BY state",
    "SELECT sick, state, SUM(age), COUNT(income) FROM people WHERE age > 20 OR income < 100 "
    "GROUP BY sick, state",
    # Aggregates over row expressions: bounds by interval arithmetic, the value clamped to them.
    "SELECT SUM(age + 1), AVG(sick), SUM(CASE WHEN age > 30 THEN income ELSE -income / 2 END), "
    "COUNT(*) FILTER (WHERE sick), SUM(income) FILTER (WHERE age < 50), COUNT(age * 2), "
    "SUM(ABS(age - 50) * 3), SUM(income % 7), SUM(FLOOR(income / 100)), SUM(age > 40) FROM people",
    "SELECT state, SUM(age - 50), AVG(income / 10), COUNT(*) FILTER (WHERE income > 100), "
    "SUM(CASE WHEN sick THEN 1 ELSE 0 END), SUM(LEAST(age, 30) - GREATEST(income, 500)), "
    "AVG(COALESCE(age, 7) * -2) FROM people GROUP BY state",
    # GROUP BY keys computed from the row: buckets, a bounded int column, a pruned domain.
    "SELECT FLOOR(age / 25), CASE WHEN income < 100 THEN 'low' ELSE 'high' END, COUNT(*), "
    "SUM(income), AVG(sick) FROM people GROUP BY 1, 2",
    "SELECT age, COUNT(*), SUM(age * 2 - 1), COUNT(DISTINCT person_id) FROM people "
    "WHERE age BETWEEN 5 AND 60 AND state IN ('CA', 'NY') GROUP BY age",
    # VAR and STDDEV: COUNT, SUM and SUM of squares of the clamped values.
    "SELECT VAR_POP(age), STDDEV_SAMP(income - 500), VARIANCE(sick) FROM people",
    "SELECT state, STDDEV_POP(age - 50), VAR_SAMP(income) FROM people GROUP BY state",
    # Quantiles: one histogram of the clamped values over the policy's bins (every cell).
    "SELECT MEDIAN(income), QUANTILE_CONT(age, 0.9), MIN(age - 50), MAX(sick) FROM people",
    "SELECT state, PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY income), MIN(income), "
    "MAX(age) FILTER (WHERE sick) FROM people GROUP BY state",
    # CTEs and FROM-subqueries, flattened into one SELECT on the table (docs/theory.md §16).
    "WITH adults AS (SELECT * FROM people WHERE age >= 18), rich AS (SELECT income * 2 AS twice, "
    "state AS s, sick, person_id AS pid FROM adults WHERE income > 100) "
    "SELECT s, COUNT(*), SUM(twice), AVG(sick), COUNT(DISTINCT pid) FROM rich GROUP BY s",
    "SELECT band, COUNT(*), SUM(x), MEDIAN(x) FROM (SELECT FLOOR(age / 20) AS band, income - 500 AS x "
    "FROM (SELECT * FROM people WHERE NOT sick) AS healthy) AS t GROUP BY band",
    # Other dialects' spellings (docs/theory.md §23): COUNT(unit) counts rows with a unit;
    # TOP, STDDEV and functions of released values add no measurement of their own.
    "SELECT COUNT(person_id), COUNT(*), COUNT(DISTINCT person_id) FROM people",
    "SELECT TOP 3 state, COUNT(people.person_id), STDDEV(age), EXP(AVG(income) / 1000) "
    "FROM people GROUP BY state",
    # Computed keys (docs/theory.md §26): a row falls in one key or none.
    "SELECT FLOOR(age / 10) * 10, UPPER(state), COALESCE(age, 1) % 3 = 0, COUNT(*), SUM(income), "
    "AVG(age) FROM people GROUP BY 1, 2, 3",
    "SELECT CAST(CEIL(income / 100.0) AS INTEGER) AS c, COUNT(*), SUM(age) FROM people GROUP BY c",
    # DISTINCT aggregates of non-unit columns (docs/theory.md §26).
    "SELECT COUNT(DISTINCT age), COUNT(DISTINCT state), COUNT(DISTINCT sick), SUM(DISTINCT income), "
    "AVG(DISTINCT age - 50), COUNT(DISTINCT FLOOR(income / 100)) FROM people",
    "SELECT state, COUNT(DISTINCT age), SUM(DISTINCT age - 50), AVG(DISTINCT income) FROM people "
    "GROUP BY state",
    # SELECT DISTINCT de-duplicates released rows; a list of quantiles reads one histogram
    # (docs/theory.md §26.1, §26.2): the measurements are the query's without them.
    "SELECT DISTINCT sick, COUNT(*) > 3, QUANTILE_CONT(income, [0.1, 0.5, 0.9]) FROM people "
    "GROUP BY state, sick",
    "SELECT PERCENTILE_CONT([0.25, 0.75]) WITHIN GROUP (ORDER BY age - 50) AS q, "
    "QUANTILE_CONT(age, [0, 1]) FROM people WHERE income > 10",
    # Two-level aggregation (docs/theory.md §29): per-unit values in their derived bounds, r rows
    # per unit (1 by the unit alone, min(m, keys) with keys), a SUM of per-unit sums as one row.
    "SELECT SUM(n), AVG(a), SUM(LEAST(s, 100)), COUNT(DISTINCT pid), MAX(top), SUM(s) FROM "
    "(SELECT person_id AS pid, COUNT(*) AS n, AVG(age) AS a, SUM(income - 500) AS s, MAX(age) AS top "
    "FROM people WHERE age > 10 GROUP BY person_id) AS u WHERE n > 1",
    "WITH per_state AS (SELECT person_id, state, SUM(income) AS s, COUNT(age) AS n, MIN(age) AS low "
    "FROM people GROUP BY person_id, state) SELECT state, SUM(s), COUNT(*), AVG(n), SUM(low) "
    "FROM per_state GROUP BY state",
    "SELECT COUNT(*), SUM(n), SUM(n * n) FROM (SELECT person_id, sick, COUNT(*) AS n FROM people "
    "GROUP BY 1, 2)",
    "SELECT state, COUNT(*), SUM(s) FROM (SELECT person_id, state, SUM(age) AS s FROM people "
    "GROUP BY person_id, state HAVING COUNT(*) > 1 OR MAX(income) < 500) GROUP BY state",
    # An integer per-unit value as the outer key (§33.2): its public keys 0..m (0..2 for the
    # distinct values of a bool), r rows per unit each in one group.
    "SELECT n, COUNT(*) FROM (SELECT person_id, COUNT(*) AS n FROM people GROUP BY person_id) GROUP BY n",
    "SELECT d, COUNT(*), SUM(s) FROM (SELECT person_id, state, COUNT(DISTINCT sick) AS d, SUM(age) AS s "
    "FROM people GROUP BY person_id, state) GROUP BY d",
    # Aggregates over released rows (§33.1): the inner query's measurements, post-processed.
    "SELECT AVG(c), MAX(s), SUM(a) FROM (SELECT state, COUNT(*) AS c, SUM(income) AS s, AVG(age) AS a "
    "FROM people GROUP BY state)",
    # An outer query over released rows: the inner query's measurements, post-processed (§29).
    "SELECT state, n, s / 2 FROM (SELECT state, COUNT(*) AS n, SUM(income) AS s FROM people "
    "GROUP BY state) AS r WHERE s > 0 ORDER BY n",
]
PLANS = [build_plan(flatten(parse_select(q), POLICY), POLICY, q) for q in QUERIES]
SQLS = [rewrite(plan).sql("duckdb") for plan in PLANS]  # rendered once, as the engine caches them
TABLE = POLICY.tables["people"]
# Each plan reads the bounded copy of the columns it reads (docs/theory.md §28): one per set.
SCOPES = list(dict.fromkeys(copy_scope(TABLE, read_columns(plan)) for plan in PLANS))
CONN = duckdb.connect()  # one connection for every example, as the engine keeps one open

row = st.tuples(
    st.sampled_from(STATES + ["ZZ", None]),
    st.one_of(st.none(), st.integers(-20, 150)),
    st.one_of(st.none(), st.floats(-200, 2000, allow_nan=False)),
    st.booleans(),
)
unit_rows = st.lists(row, max_size=5)


def _exact(table: dict[int, list[tuple]], nulls: list[tuple] = ()) -> list[dict[str, list]]:
    """Exact measurements of every plan; `nulls` are rows whose unit is NULL."""
    CONN.execute("CREATE OR REPLACE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, "
                 "income DOUBLE, sick BOOLEAN, note VARCHAR)")
    records = [(unit, *r, "x") for unit, rows in table.items() for r in rows]
    records += [(None, *r, "x") for r in nulls]
    if records:
        CONN.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", records)
    for scope in SCOPES:
        bound_units(CONN, TABLE, "fixed-key", scope)
    return [run(CONN, sql, len(plan.group_by)).values for plan, sql in zip(PLANS, SQLS, strict=True)]


def _assert_within(plan, a: dict[str, list], b: dict[str, list]) -> None:
    """Each measurement of `plan`, summed over its cells and groups, moves from `a` to `b` by at
    most the sensitivity its noise is calibrated to."""
    for m in plan.measurements:
        moved = sum(abs(float(x) - float(y)) for cell in m.cells
                    for x, y in zip(a[cell], b[cell], strict=True))
        bound = sensitivity(m, plan)
        assert moved <= bound * (1 + 1e-9), (plan.sql, m.label, moved, bound)


def _unit_moves_within(others, unit, before, after) -> None:
    first = {**others, unit: before}
    second = {**others, unit: after}
    for plan, a, b in zip(PLANS, _exact(first), _exact(second), strict=True):
        _assert_within(plan, a, b)


UNIT_CHANGES = {"others": st.dictionaries(st.integers(0, 6), unit_rows, max_size=6),
                "unit": st.integers(0, 9), "before": unit_rows, "after": unit_rows}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**UNIT_CHANGES)
# The worst cases, always run: a unit's rows moving between groups at the extremes of the bounds.
@example(others={}, unit=0, before=[("CA", 150, 2000.0, True)] * 3, after=[("NY", -20, -200.0, False)] * 3)
@example(others={1: [("TX", 5, 1.0, True)]}, unit=0, before=[], after=[("WA", 150, 2000.0, True)] * 4)
def test_one_unit_moves_each_aggregate_within_its_sensitivity(others, unit, before, after):
    """15 random neighbouring tables and the two worst cases; the slow variant runs 300."""
    _unit_moves_within(others, unit, before, after)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**UNIT_CHANGES)
def test_one_unit_moves_each_aggregate_within_its_sensitivity_slow(others, unit, before, after):
    _unit_moves_within(others, unit, before, after)


def _null_row_moves_within(others, nulls, before, after) -> None:
    for plan, a, b in zip(PLANS, _exact(others, nulls + before), _exact(others, nulls + after),
                          strict=True):
        _assert_within(plan, a, b)


NULL_ROW_CHANGES = {"others": st.dictionaries(st.integers(0, 6), unit_rows, max_size=4),
                    "nulls": st.lists(row, max_size=6), "before": st.lists(row, max_size=1),
                    "after": st.lists(row, max_size=1)}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**NULL_ROW_CHANGES)
@example(others={0: [("CA", 150, 2000.0, True)] * 3}, nulls=[("NY", 1, 1.0, False)] * 2,
         before=[], after=[("CA", 150, 2000.0, True)])
def test_one_null_unit_row_moves_each_aggregate_within_its_sensitivity(others, nulls, before, after):
    """A row whose unit is NULL is an individual of its own: adding, removing or changing one
    moves every aggregate, COUNT(DISTINCT unit) included, within its sensitivity (10 random
    tables and an added extreme row; the slow variant runs 200)."""
    _null_row_moves_within(others, nulls, before, after)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**NULL_ROW_CHANGES)
def test_one_null_unit_row_moves_each_aggregate_within_its_sensitivity_slow(others, nulls, before, after):
    _null_row_moves_within(others, nulls, before, after)


def test_null_unit_rows_are_each_counted():
    nulls = [("CA", 30, 10.0, False)] * 5
    assert _exact({0: nulls * 2}, nulls)[0]["__m0"] == [2 + 5]
    assert _exact({0: nulls * 2}, nulls)[1]["__m3"] == [1 + 5]


def test_bounding_is_tight_for_a_heavy_unit():
    """A unit with many rows contributes exactly max_rows_per_unit (2) rows to COUNT(*)."""
    heavy = {0: [("CA", 30, 10.0, False)] * 7}
    assert _exact(heavy)[0]["__m0"] == [2]
    assert _exact({})[0]["__m0"] == [0]


# Several joins in one query (docs/theory.md §25): people (m = 2) joined to visits (m = 3) on the
# unit and to the public regions table on its key, so a person has at most 2 · 3 joined rows.
JOIN_POLICY = parse_policy({**BASE_POLICY, **with_visits(with_regions()["tables"])})
JOIN_QUERIES = [
    "SELECT regions.region, COUNT(*), SUM(days), SUM(income), COUNT(DISTINCT person_id) FROM people "
    "JOIN visits ON people.person_id = visits.person_id JOIN regions ON people.state = regions.state "
    "GROUP BY regions.region",
    "SELECT COUNT(*), SUM(days * population), AVG(age) FROM people, visits, regions WHERE "
    "people.person_id = visits.person_id AND people.state = regions.state AND population > days",
    "SELECT clinic, COUNT(*), MEDIAN(days), SUM(population) FROM people LEFT JOIN visits ON "
    "people.person_id = visits.person_id LEFT JOIN regions ON people.state = regions.state "
    "GROUP BY clinic",
    # Joins written inside a CTE, a public table under two aliases (docs/theory.md §30.3, §30.4).
    "WITH pv AS (SELECT days, income, people.state AS st FROM people JOIN visits ON "
    "people.person_id = visits.person_id WHERE days > 2) SELECT r1.region, COUNT(*), SUM(days), "
    "SUM(r2.population) FROM pv JOIN regions AS r1 ON pv.st = r1.state JOIN regions AS r2 ON "
    "r1.state = r2.state GROUP BY r1.region",
    # JOIN ... USING (the unit), a public table written first (§30.6, §30.7).
    "SELECT COUNT(*), SUM(days), AVG(income) FROM people JOIN visits USING (person_id) WHERE urgent",
    "SELECT regions.region, COUNT(*), SUM(days) FROM regions JOIN people ON regions.state = "
    "people.state JOIN visits ON people.person_id = visits.person_id GROUP BY regions.region",
]
JOIN_PLANS = [build_plan(flatten(parse_select(q), JOIN_POLICY), JOIN_POLICY, q) for q in JOIN_QUERIES]
visit = st.tuples(st.one_of(st.none(), st.integers(-5, 40)), st.one_of(st.none(), st.booleans()),
                  st.sampled_from(["north", "south", "east", None]))
person = st.tuples(unit_rows, st.lists(visit, max_size=5))


def _exact_joined(people: dict[int, tuple[list, list]]) -> list[dict[str, list]]:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, income DOUBLE, "
                 "sick BOOLEAN, note VARCHAR)")
    conn.execute("CREATE TABLE visits (person_id BIGINT, days BIGINT, urgent BOOLEAN, clinic VARCHAR)")
    conn.execute("CREATE TABLE regions (state VARCHAR, region VARCHAR, population BIGINT)")
    conn.executemany("INSERT INTO regions VALUES (?, ?, ?)", REGIONS)
    rows = [(unit, *r, "x") for unit, (mine, _) in people.items() for r in mine]
    visits = [(unit, *v) for unit, (_, theirs) in people.items() for v in theirs]
    if rows:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", rows)
    if visits:
        conn.executemany("INSERT INTO visits VALUES (?, ?, ?, ?)", visits)
    bound_plans(conn, JOIN_PLANS)
    answers = [run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values for plan in JOIN_PLANS]
    conn.close()
    return answers


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(others=st.dictionaries(st.integers(0, 6), person, max_size=4), before=person, after=person)
@example(others={}, before=([("CA", 150, 2000.0, True)] * 4, [(40, True, "north")] * 5),
         after=([("NY", -20, -200.0, False)] * 4, [(-5, False, "south")] * 5))
def test_one_unit_moves_each_aggregate_of_a_three_table_join_within_its_sensitivity(others, before, after):
    """Person 9's rows change in people and visits, regions stays: every measurement of a join
    of three tables (JOIN ... ON, commas, LEFT) moves by at most §8's sensitivity with the join
    tree's m = 2 · 3 (§25)."""
    for plan, a, b in zip(JOIN_PLANS, _exact_joined({**others, 9: before}),
                          _exact_joined({**others, 9: after}), strict=True):
        assert plan.rows_per_unit == 6
        _assert_within(plan, a, b)


# Library checkouts with a public catalogue (docs/theory.md §32): keys given as the catalogue's
# distinct rows (alone and crossed with a declared domain), and keys over a date or timestamp
# moved by a fixed INTERVAL; patron 9's rows change, the catalogue stays.
LIBRARY_QUERIES = [
    "SELECT c.title, c.author, COUNT(*), SUM(spent), COUNT(DISTINCT patron) FROM checkouts k "
    "JOIN catalogue c ON k.book_id = c.book_id GROUP BY c.title, c.author",
    "SELECT k.genre, c.title, COUNT(*), AVG(spent) FROM checkouts k LEFT JOIN catalogue c "
    "ON k.book_id = c.book_id WHERE c.title <> 'Maus' GROUP BY k.genre, c.title",
    "SELECT day + INTERVAL 1 DAY, COUNT(*), SUM(spent) FROM checkouts GROUP BY 1",
    "SELECT CAST(seen + INTERVAL 20 HOUR AS DATE) AS d, EXTRACT(dow FROM day - INTERVAL 1 DAY) AS w, "
    "COUNT(*), MEDIAN(spent) FROM checkouts GROUP BY d, w",
    "SELECT date_trunc('week', day + INTERVAL 3 DAY), c.author, COUNT(*) FROM checkouts k JOIN "
    "catalogue c ON k.book_id = c.book_id GROUP BY 1, 2",
]
library_row = st.tuples(st.sampled_from([1, 2, 3, 5, 7, 8, 9, None]), st.integers(-2, 9),
                        st.integers(0, 23), st.sampled_from(["Fiction", "History", "Comics", None]),
                        st.one_of(st.none(), st.floats(-10, 80, allow_nan=False)))
library_rows = st.lists(library_row, max_size=5)


def _exact_library(patrons: dict[int, list[tuple]]) -> tuple[list, list[dict[str, list]]]:
    """The plans (keys read from the catalogue on this connection) and their exact values."""
    conn = duckdb.connect()
    rows = [checkout(unit, book, day, hour, genre, spent)
            for unit, mine in patrons.items() for book, day, hour, genre, spent in mine]
    write_library(conn, rows)
    plans = [build_plan(flatten(parse_select(q), LIBRARY), LIBRARY, q, None, reader(conn))
             for q in LIBRARY_QUERIES]
    bound_plans(conn, plans)
    answers = [run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values for plan in plans]
    conn.close()
    return plans, answers


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(others=st.dictionaries(st.integers(0, 6), library_rows, max_size=4), before=library_rows,
       after=library_rows)
@example(others={}, before=[(1, 0, 0, "Fiction", 80.0)] * 5, after=[(7, 6, 23, "History", -10.0)] * 5)
def test_one_unit_moves_each_aggregate_over_public_row_and_moved_date_keys_within_its_sensitivity(
        others, before, after):
    plans, first = _exact_library({**others, 9: before})
    again, second = _exact_library({**others, 9: after})
    for plan, replan, a, b in zip(plans, again, first, second, strict=True):
        assert plan.key_rows == replan.key_rows and plan.group_by == replan.group_by
        _assert_within(plan, a, b)


# UNNEST of a declared list column (docs/theory.md §31): checkouts (m = 2) whose genres hold up
# to 3 items read each, so a person has at most 2 · 3 item rows.
LIST_POLICY = parse_policy({**BASE_POLICY, "tables": {"checkouts": {
    "privacy_unit": "person_id", "max_rows_per_unit": 2, "columns": {
        "genres": {"type": "str", "list": {"separator": ";", "max_items": 3,
                                           "domain": ["Fiction", "Mystery", "History"]}},
        "pages": {"type": "int", "lower": 0, "upper": 500},
        "branch": {"type": "str", "domain": ["North", "South"]}}}}})
LIST_QUERIES = [
    "SELECT item, COUNT(*), SUM(pages), AVG(pages), COUNT(DISTINCT person_id) FROM checkouts, "
    "UNNEST(string_split(genres, ';')) AS g(item) GROUP BY item",
    "SELECT COUNT(*), SUM(pages - 250), COUNT(DISTINCT person_id), MEDIAN(pages) FROM (SELECT "
    "person_id, pages, UNNEST(string_split(genres, ';')) AS item FROM checkouts) WHERE item = 'Mystery'",
    "SELECT branch, item, COUNT(*), COUNT(DISTINCT item) FROM checkouts CROSS JOIN "
    "UNNEST(string_split(genres, ';')) AS item WHERE pages > 100 GROUP BY branch, item",
    "SELECT UNNEST(string_split(genres, ';')) AS item, VAR_POP(pages) FROM checkouts GROUP BY item",
]
LIST_PLANS = [build_plan(flatten(parse_select(q), LIST_POLICY), LIST_POLICY, q) for q in LIST_QUERIES]
LIST_SQLS = [rewrite(plan).sql("duckdb") for plan in LIST_PLANS]
genre_list = st.one_of(st.none(), st.lists(st.sampled_from(["Fiction", "Mystery", "History", "Poetry", ""]),
                                           max_size=6).map(";".join))
listed_checkout = st.tuples(genre_list, st.one_of(st.none(), st.integers(-50, 800)),
                     st.sampled_from(["North", "South", "East", None]))


def _exact_items(people: dict[int, list[tuple]]) -> list[dict[str, list]]:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE checkouts (person_id BIGINT, genres VARCHAR, pages BIGINT, branch VARCHAR)")
    rows = [(unit, *r) for unit, mine in people.items() for r in mine]
    if rows:
        conn.executemany("INSERT INTO checkouts VALUES (?, ?, ?, ?)", rows)
    bound_plans(conn, LIST_PLANS)
    answers = [run(conn, sql, len(plan.group_by)).values
               for plan, sql in zip(LIST_PLANS, LIST_SQLS, strict=True)]
    conn.close()
    return answers


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(others=st.dictionaries(st.integers(0, 6), st.lists(listed_checkout, max_size=4), max_size=4),
       before=st.lists(listed_checkout, max_size=5), after=st.lists(listed_checkout, max_size=5))
# The worst case: two rows of three listed genres each, all moved to the others at the extremes.
@example(others={}, before=[("Fiction;Fiction;Mystery;History", 800, "North")] * 3,
         after=[("History;History;History", -50, "South")] * 3)
def test_one_unit_moves_each_aggregate_over_list_items_within_its_sensitivity(others, before, after):
    """Person 9's checkouts change: every measurement over the unnested items moves by at most
    §8's sensitivity with m = 2 · 3 (§31), whatever the lists hold (long, empty, NULL, unlisted)."""
    for plan, a, b in zip(LIST_PLANS, _exact_items({**others, 9: before}),
                          _exact_items({**others, 9: after}), strict=True):
        assert plan.rows_per_unit == 6
        _assert_within(plan, a, b)
