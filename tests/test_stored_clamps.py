"""The clamped values stored in bounded copies (docs/theory.md §34): every exact aggregate that
reads them equals the one that clamps each row in the query, NULL, NaN, infinities, values at
and beyond the bounds and units over the row bound included, in process and in a prepared copy."""

from __future__ import annotations

import itertools
import math
import shutil
from pathlib import Path

import duckdb
import pytest
from dpsql.engine import rewrite as rewriting
from dpsql.engine.backends import bounded_store
from dpsql.engine.backends.duckdb import DuckDBBackend
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import copies_to_bound, rewrite
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select
from dpsql.engine.stored_clamps import clamped_columns, companion

from tests.support import BASE_POLICY, STATES, add_regions, with_regions

POLICY = parse_policy(BASE_POLICY)
KEY = "stored-clamp-key"
AGES = [None, -5, 0, 37, 100, 150]
INCOMES = [None, float("nan"), float("inf"), float("-inf"), -1.0, 0.0, 999.5, 1000.0, 1e30]
# Queries whose every aggregate of a bare bounded column reads the stored value.
STORED = [
    "SELECT SUM(age), SUM(income), AVG(age), AVG(income), COUNT(income), COUNT(age) FROM people",
    "SELECT VAR_POP(income), STDDEV_SAMP(age), VARIANCE(age), STDDEV_POP(income) FROM people",
    "SELECT state, SUM(income), AVG(age), VAR_SAMP(income) FROM people WHERE sick GROUP BY state",
    "SELECT sick, SUM(age), AVG(income) FROM people WHERE income > 10 OR age < 20 GROUP BY sick",
    # Two-level (§29): the per-unit SUM, AVG, MIN, MAX and COUNT of a bare column.
    "SELECT SUM(s), AVG(a), MAX(top), SUM(n), SUM(low) FROM (SELECT person_id, SUM(income) AS s, "
    "AVG(age) AS a, MAX(income) AS top, COUNT(age) AS n, MIN(age) AS low FROM people "
    "GROUP BY person_id)",
    "WITH per_state AS (SELECT person_id, state, SUM(age) AS s, AVG(income) AS m FROM people "
    "GROUP BY person_id, state) SELECT state, SUM(s), AVG(m), COUNT(*) FROM per_state GROUP BY state",
]
# Aggregates of expressions keep the CASE per row; these read no stored value.
CLAMPED_IN_QUERY = [
    "SELECT SUM(age * 2), SUM(CASE WHEN sick THEN income END), AVG(income - 500), "
    "SUM(income) FILTER (WHERE age > 30) FROM people",
    "SELECT COUNT(DISTINCT age), SUM(DISTINCT income), MEDIAN(income) FROM people",
]


def _rows() -> list[tuple]:
    """Every (age, income) pair of the edge values, spread over units of 1 to 5 rows (the bound
    is 2), a few rows with a NULL unit."""
    pairs = list(itertools.product(AGES, INCOMES))
    rows, unit, i = [], 0, 0
    while i < len(pairs):
        size = 1 + unit % 5
        for age, income in pairs[i:i + size]:
            rows.append((unit if unit % 11 else None, STATES[unit % len(STATES)], age, income,
                         unit % 3 == 0, "x"))
        i, unit = i + size, unit + 1
    return rows


def _data(path: Path, schema: str) -> Path:
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE people ({schema})")
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", _rows())
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The edge rows as the policy's declared types."""
    return _data(tmp_path_factory.mktemp("stored") / "people.duckdb",
                 "person_id BIGINT, state VARCHAR, age BIGINT, income DOUBLE, sick BOOLEAN, note VARCHAR")


def _plan(sql: str, policy=POLICY):
    return build_plan(flatten(parse_select(sql), policy), policy, sql)


def _exact(backend: DuckDBBackend, sql: str, stored: bool, monkeypatch, policy=POLICY) -> dict[str, list]:
    """The exact measurements of `sql` on `backend`, reading the stored clamped values or (with
    `stored` False) clamping every row in the query."""
    plan = _plan(sql, policy)
    for table, columns in copies_to_bound(plan):
        backend.bound(table, KEY, columns)
    with monkeypatch.context() as patch:
        if not stored:
            patch.setattr(rewriting, "stored", lambda plan: plan)
        rendered = backend.render(rewrite(plan))
    backend.check(rendered)
    return backend.run(rendered, len(plan.group_by)).values


def _same(a: dict[str, list], b: dict[str, list]) -> bool:
    return a.keys() == b.keys() and all(
        x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        for name in a for x, y in zip(a[name], b[name], strict=True))


@pytest.mark.parametrize("sql", STORED + CLAMPED_IN_QUERY)
def test_stored_clamps_give_the_exact_answers_of_clamping_in_the_query(data, sql, monkeypatch):
    backend = DuckDBBackend.open(data, POLICY)
    try:
        with_stored = _exact(backend, sql, True, monkeypatch)
        in_query = _exact(backend, sql, False, monkeypatch)
    finally:
        backend.close()
    assert _same(with_stored, in_query), (with_stored, in_query)
    assert all(v is None or math.isfinite(v) for values in with_stored.values() for v in values)


JOINED = [
    "SELECT r.region, SUM(p.income), AVG(p.age), SUM(r.population) FROM people AS p "
    "JOIN regions AS r ON p.state = r.state GROUP BY r.region",
    "SELECT SUM(income), VAR_POP(age), COUNT(income) FROM people LEFT JOIN regions "
    "ON people.state = regions.state WHERE regions.population > 10 OR regions.population IS NULL",
]


@pytest.mark.parametrize("sql", JOINED)
def test_a_join_reads_the_stored_values_of_its_from_table(tmp_path, sql, monkeypatch):
    """The FROM table's rows carry their stored values through the join; a joined table's
    columns are clamped in the query."""
    policy = parse_policy({**BASE_POLICY, **with_regions()})
    db = add_regions(_data(tmp_path / "people.duckdb", "person_id BIGINT, state VARCHAR, age BIGINT, "
                                                       "income DOUBLE, sick BOOLEAN, note VARCHAR"))
    rendered = rewrite(_plan(sql, policy)).sql("duckdb")
    assert companion("income") in rendered and companion("population") not in rendered
    backend = DuckDBBackend.open(db, policy)
    try:
        with_stored = _exact(backend, sql, True, monkeypatch, policy)
        assert _same(with_stored, _exact(backend, sql, False, monkeypatch, policy))
    finally:
        backend.close()


@pytest.mark.parametrize("sql", STORED)
def test_an_aggregate_of_a_bare_bounded_column_reads_its_stored_value(sql):
    rendered = rewrite(_plan(sql)).sql("duckdb")
    assert companion("age") in rendered or companion("income") in rendered
    assert "CASE WHEN" not in rendered.split(" FROM ")[0] or "__per_unit" in rendered


@pytest.mark.parametrize("sql", CLAMPED_IN_QUERY)
def test_an_aggregate_of_an_expression_or_distinct_values_clamps_in_the_query(sql):
    rendered = rewrite(_plan(sql)).sql("duckdb")
    assert companion("age") not in rendered and companion("income") not in rendered


ROW_LEVEL = parse_policy({**BASE_POLICY, "tables": {"people": {
    key: value for key, value in BASE_POLICY["tables"]["people"].items()
    if key not in ("privacy_unit", "max_rows_per_unit")}}})


def test_a_row_level_table_is_read_through_its_own_copy():
    sql = "SELECT SUM(income), AVG(age) FROM people"
    rendered = rewrite(_plan(sql, ROW_LEVEL)).sql("duckdb")
    assert 'FROM dpsql_bounded.main."people"' in rendered
    assert companion("income") in rendered and companion("age") in rendered
    assert "CASE WHEN" not in rendered
    for other in ("SELECT COUNT(*) FROM people WHERE age > 3", "SELECT SUM(age * 2) FROM people"):
        assert 'FROM people' in rewrite(_plan(other, ROW_LEVEL)).sql("duckdb")  # nothing stored read


@pytest.mark.parametrize("stored_as", ["BIGINT, income DOUBLE", "INTEGER, income REAL"])
def test_a_row_level_tables_copy_gives_the_exact_answers_of_clamping_each_row(
        tmp_path, stored_as, monkeypatch):
    """Every row of a table without a privacy unit is read, from the view that clamps as it
    reads and from the copy `prepare` writes, and every exact answer is the one clamping each
    row in the query gives, whatever type of the family the file stores."""
    db = _data(tmp_path / "people.duckdb", f"person_id BIGINT, state VARCHAR, age {stored_as}, "
                                           "sick BOOLEAN, note VARCHAR")
    ledger = tmp_path / "ledger.sqlite"
    written = DuckDBBackend.prepare_copies(db, ROW_LEVEL, ledger, KEY)
    assert [(c.table, c.rows) for c in written] == [("people", len(_rows()))]
    in_process = DuckDBBackend.open(shutil.copy(db, tmp_path / "same.duckdb"), ROW_LEVEL)
    prepared = DuckDBBackend.open(db, ROW_LEVEL, ledger, KEY)
    try:
        for sql in STORED[:4] + CLAMPED_IN_QUERY:
            exact = _exact(in_process, sql, False, monkeypatch, ROW_LEVEL)
            assert _same(_exact(in_process, sql, True, monkeypatch, ROW_LEVEL), exact), sql
            assert _same(_exact(prepared, sql, True, monkeypatch, ROW_LEVEL), exact), sql
        copy = rewriting.bounded_table(ROW_LEVEL.tables["people"]).sql("duckdb")
        views = dict(prepared.conn.execute(
            "SELECT database_name, sql FROM duckdb_views() WHERE view_name = 'people' "
            "AND NOT temporary").fetchall())
        assert bounded_store.COPY_CATALOG + "people_0" in views["dpsql_bounded"]
        assert prepared.conn.execute(f"SELECT COUNT(*) FROM {copy}").fetchall()[0][0] == len(_rows())
    finally:
        in_process.close()
        prepared.close()


def test_prepare_skips_a_row_level_table_without_a_bounded_number(tmp_path, data):
    """Such a table's copy would store nothing a query reads: no file is written for it."""
    policy = parse_policy({**BASE_POLICY, "tables": {"people": {"columns": {
        "state": BASE_POLICY["tables"]["people"]["columns"]["state"]}}}})
    assert DuckDBBackend.prepare_copies(data, policy, tmp_path / "ledger.sqlite", KEY) == ()


def test_the_copy_stores_the_clamp_of_every_bounded_numeric_column(data):
    table = POLICY.tables["people"]
    assert [c.name for c in clamped_columns(table)] == ["age", "income"]
    assert [c.name for c in clamped_columns(table, {"income", "state"})] == ["income"]
    backend = DuckDBBackend.open(data, POLICY)
    try:
        backend.bound(table, KEY)
        copy = rewriting.bounded_table(table).sql("duckdb")
        kinds = dict(backend.conn.execute(f"SELECT column_name, column_type FROM (DESCRIBE {copy})").fetchall())
        assert kinds[companion("age")] == "BIGINT" and kinds[companion("income")] == "DOUBLE"
        wrong = backend.conn.execute(
            f"SELECT COUNT(*) FROM {copy} WHERE {companion('age')} IS DISTINCT FROM "
            f"(CASE WHEN age < 0 THEN 0 WHEN age > 100 THEN 100 ELSE age END) OR "
            f"{companion('income')} IS DISTINCT FROM (CASE WHEN income < 0.0 THEN 0.0 WHEN "
            f"income > 1000.0 THEN 1000.0 ELSE income END)").fetchall()[0][0]
        assert wrong == 0
    finally:
        backend.close()


def test_a_prepared_copy_of_other_stored_types_gives_the_same_answers(tmp_path, data, monkeypatch):
    """A file storing age as INTEGER and income as REAL is read as BIGINT and DOUBLE: the
    prepared copy clamps the values as queries read them, so every answer is the in-process one."""
    other = _data(tmp_path / "people.duckdb",
                  "person_id BIGINT, state VARCHAR, age INTEGER, income REAL, sick BOOLEAN, note VARCHAR")
    ledger = tmp_path / "ledger.sqlite"
    prepared = DuckDBBackend.prepare_copies(other, POLICY, ledger, KEY)
    assert prepared
    attached = DuckDBBackend.open(other, POLICY, ledger, KEY)
    in_memory = DuckDBBackend.open(shutil.copy(other, tmp_path / "same.duckdb"), POLICY)
    try:
        for sql in STORED:
            prepared = _exact(attached, sql, True, monkeypatch)
            assert _same(prepared, _exact(in_memory, sql, True, monkeypatch)), sql
            assert _same(prepared, _exact(attached, sql, False, monkeypatch)), sql
        assert any(name.startswith(bounded_store.COPY_CATALOG) for (name,) in attached.conn.execute(
            "SELECT database_name FROM duckdb_databases()").fetchall())
    finally:
        in_memory.close()
        attached.close()


def test_a_prepared_copy_is_named_by_the_bounds_it_clamps_to(tmp_path, data):
    """Changing a bound changes the stored values, so a copy made under other bounds (or before
    values were stored) is never attached."""
    table = POLICY.tables["people"]
    types = {"person_id": "BIGINT", "age": "BIGINT", "income": "DOUBLE"}
    wider = parse_policy({**BASE_POLICY, "tables": {"people": {
        **BASE_POLICY["tables"]["people"], "columns": {
            **BASE_POLICY["tables"]["people"]["columns"],
            "income": {"type": "float", "lower": 0.0, "upper": 2000.0}}}}}).tables["people"]
    assert bounded_store.copy_path(tmp_path, data, table, KEY, types) != \
        bounded_store.copy_path(tmp_path, data, wider, KEY, types)


@pytest.mark.parametrize("sql", [
    "SELECT SUM(__clamped_income) FROM people",
    "SELECT COUNT(*) FROM people WHERE \"__clamped_age\" > 50",
    "SELECT state, SUM(age) FROM people GROUP BY state, __clamped_age",
    "SELECT SUM(income) FROM dpsql_bounded.main.people",
])
def test_a_row_level_copys_names_are_not_the_analysts(tmp_path, data, sql):
    """The copy of a table without a privacy unit is read by the rewrite only: naming its
    stored values or the copy itself is refused before any data is read, and charges nothing."""
    from dpsql.engine import PrivateDatabase
    from dpsql.engine.errors import QueryRefused

    from tests.support import charge_count

    ledger = tmp_path / "ledger.sqlite"
    with PrivateDatabase.connect(data, ROW_LEVEL, ledger, create=True) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query(sql, 1.0)
    assert "\n" not in str(refused.value)
    assert charge_count(ledger) == 0
