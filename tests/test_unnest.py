"""UNNEST of a list column (docs/theory.md §31), Tumult's flat_map with max_rows: library
checkouts whose genres column holds a ';'-separated list. The policy field's one-line errors, the
accepted forms (one plan whatever the spelling), exact answers against plain DuckDB with each
list cut to its first max_items, sensitivities, refusals in one line, a plan that reads no data,
and the coverage of the 95% intervals."""

from __future__ import annotations

import copy

import duckdb
import numpy as np
import pytest
import yaml
from dpsql.engine import PolicyError, PrivateDatabase, QueryRefused
from dpsql.engine.backends.duckdb_execute import bound_units, run
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select

from tests.support import bound_plans, create_ledger

GENRES = ["Fiction", "Mystery", "History", "Science"]
CHECKOUTS = {
    "budget": {"epsilon": 1e9},
    "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
    "tables": {"checkouts": {"privacy_unit": "person_id", "max_rows_per_unit": 2, "columns": {
        "genres": {"type": "str", "list": {"separator": ";", "max_items": 3, "domain": GENRES}},
        "pages": {"type": "int", "lower": 0, "upper": 500},
        "branch": {"type": "str", "domain": ["North", "South"]},
        "title": {"type": "str"}}}},
}
POLICY = parse_policy(CHECKOUTS)
BY_GENRE = ("SELECT item, COUNT(*) AS n FROM checkouts, UNNEST(string_split(genres, ';')) AS g(item) "
            "GROUP BY item")


def _plan(sql: str, policy=POLICY):
    return build_plan(flatten(parse_select(sql), policy), policy, sql)


def _with_list(**changes) -> dict:
    policy = copy.deepcopy(CHECKOUTS)
    policy["tables"]["checkouts"]["columns"]["genres"]["list"].update(changes)
    return policy


@pytest.mark.parametrize("change, fragment", [
    ({"separator": ""}, "tables.checkouts.columns.genres.list.separator: expected text of 1 to 16"),
    ({"separator": 3}, "list.separator: expected text"),
    ({"max_items": 0}, "tables.checkouts.columns.genres.list.max_items: expected a whole number "
                       "from 1 to 1000, got 0"),
    ({"max_items": True}, "list.max_items: expected a whole number"),
    ({"max_items": 1001}, "list.max_items: expected a whole number from 1 to 1000, got 1001"),
    ({"domain": []}, "list.domain: expected a non-empty list"),
    ({"domain": ["a;b"]}, "list.domain: 'a;b' holds the separator ';'"),
    ({"domain": ["a", "a"]}, "list.domain: values must be distinct"),
    ({"domain": ["a", 1]}, "list.domain: expected text values, got 1"),
    ({"max": 3}, "tables.checkouts.columns.genres.list.max: unknown field (allowed: domain, "
                 "max_items, separator)"),
])
def test_the_list_field_is_checked_with_one_line_errors(change, fragment):
    with pytest.raises(PolicyError) as error:
        parse_policy(_with_list(**change))
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_a_list_on_a_column_that_is_not_text_is_refused():
    policy = copy.deepcopy(CHECKOUTS)
    policy["tables"]["checkouts"]["columns"]["pages"]["list"] = {"separator": ";", "max_items": 2}
    with pytest.raises(PolicyError, match=r"columns.pages.list: only a str column may hold a list"):
        parse_policy(policy)
    policy = copy.deepcopy(CHECKOUTS)
    del policy["tables"]["checkouts"]["columns"]["genres"]["list"]["max_items"]
    with pytest.raises(PolicyError, match=r"genres.list.max_items: required field is missing"):
        parse_policy(policy)


# One question, the forms users write it in: DuckDB's comma join with a column alias, the
# CROSS JOIN UNNEST ... AS item of GoogleSQL and Tumult's docs, JOIN ... ON TRUE, UNNEST as a
# SELECT item grouped by its name, and a CTE or FROM-subquery that unnests.
SAME_AS_BY_GENRE = [
    "SELECT item, COUNT(*) AS n FROM checkouts CROSS JOIN UNNEST(string_split(genres, ';')) AS item "
    "GROUP BY item",
    "SELECT g.item, COUNT(*) AS n FROM checkouts AS c JOIN UNNEST(str_split(c.genres, ';')) AS g(item) "
    "ON TRUE GROUP BY g.item",
    "SELECT UNNEST(string_split(genres, ';')) AS item, COUNT(*) AS n FROM checkouts GROUP BY item",
    "WITH items AS (SELECT UNNEST(string_split(genres, ';')) AS item FROM checkouts) "
    "SELECT item, COUNT(*) AS n FROM items GROUP BY item",
    "SELECT item, COUNT(*) AS n FROM (SELECT person_id, item FROM checkouts, "
    "UNNEST(string_to_array(genres, ';')) AS g(item)) AS t GROUP BY item",
]


@pytest.mark.parametrize("sql", SAME_AS_BY_GENRE)
def test_every_accepted_form_is_the_same_plan(sql):
    mine, theirs = _plan(sql), _plan(BY_GENRE)
    assert rewrite(mine).sql("duckdb") == rewrite(theirs).sql("duckdb")
    assert mine.unnest == theirs.unnest and mine.rows_per_unit == 6
    assert [k.keys for k in mine.group_by] == [tuple(GENRES)]


@pytest.mark.parametrize("sql, expected", [
    # m = 2 rows per person, at most 3 items each: 6 item rows per person.
    ("SELECT COUNT(*) FROM (SELECT UNNEST(string_split(genres, ';')) AS item FROM checkouts) "
     "WHERE item = 'Mystery'", {"COUNT(*)": 6}),
    (BY_GENRE, {"COUNT(*)": 12}),
    ("SELECT SUM(pages), AVG(pages), COUNT(DISTINCT person_id) FROM checkouts, "
     "UNNEST(string_split(genres, ';')) AS g(item)",
     {"SUM(pages)": 6 * 500, "COUNT(pages)": 6, "COUNT(DISTINCT unit)": 1}),
    ("SELECT branch, item, SUM(pages) FROM checkouts, UNNEST(string_split(genres, ';')) AS g(item) "
     "GROUP BY branch, item", {"SUM(pages)": 2 * 6 * 500}),
    # The list column read as a whole, without UNNEST: one row, m = 2, as before.
    ("SELECT COUNT(*) FROM checkouts WHERE genres LIKE '%Fiction%'", {"COUNT(*)": 2}),
])
def test_sensitivity_is_max_items_times_the_rows_bound(sql, expected):
    plan = _plan(sql)
    assert {m.label: sensitivity(m, plan) for m in plan.measurements} == expected


def _rows(seed: int, units: int = 40, most: int = 2, items: int = 3) -> list[tuple]:
    """Checkouts: each person 1 to `most` rows, each row 0 to `items` genres (an unlisted one,
    Poetry, among them), some lists NULL or empty, pages beyond the bound of 500 at times."""
    rng = np.random.default_rng(seed)
    out = []
    for person in range(units):
        for _ in range(int(rng.integers(1, most + 1))):
            chosen = rng.choice(GENRES + ["Poetry"], size=int(rng.integers(0, items + 1)), replace=False)
            text = None if rng.random() < 0.1 else ";".join(chosen)
            out.append((person, text, int(rng.integers(0, 600)), str(rng.choice(["North", "South"])),
                        f"t{person}"))
    return out


def _load(conn, rows) -> None:
    conn.execute("CREATE TABLE checkouts (person_id BIGINT, genres VARCHAR, pages BIGINT, "
                 "branch VARCHAR, title VARCHAR)")
    conn.executemany("INSERT INTO checkouts VALUES (?, ?, ?, ?, ?)", rows)


def _exact(rows, sql: str) -> dict[str, list]:
    plan = _plan(sql)
    conn = duckdb.connect()
    _load(conn, rows)
    bound_plans(conn, [plan])
    return run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values


@pytest.mark.parametrize("sql, plain", [
    (BY_GENRE, "SELECT g, COUNT(*) FROM (SELECT UNNEST(string_split(genres, ';')) AS g FROM checkouts) "
               "WHERE g IN ('Fiction', 'History', 'Mystery', 'Science') GROUP BY g ORDER BY g"),
    ("SELECT COUNT(*), SUM(pages) FROM (SELECT pages, UNNEST(string_split(genres, ';')) AS item "
     "FROM checkouts) WHERE item = 'Mystery'",
     "SELECT COUNT(*), SUM(LEAST(pages, 500)) FROM (SELECT pages, UNNEST(string_split(genres, ';')) "
     "AS item FROM checkouts) WHERE item = 'Mystery'"),
    ("SELECT COUNT(*), COUNT(DISTINCT person_id) FROM checkouts CROSS JOIN "
     "UNNEST(string_split(genres, ';')) AS item WHERE item <> 'History' AND branch = 'North'",
     "SELECT COUNT(*), COUNT(DISTINCT person_id) FROM checkouts, UNNEST(string_split(genres, ';')) "
     "AS u(item) WHERE item <> 'History' AND branch = 'North'"),
])
def test_exact_values_are_plain_duckdbs_on_data_within_the_bounds(sql, plain):
    rows = _rows(3)
    values = _exact(rows, sql)
    conn = duckdb.connect()
    _load(conn, rows)
    expected = conn.execute(plain).fetchall()
    got = list(zip(*values.values(), strict=True))
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        numbers = [v for v in theirs if isinstance(v, (int, float))]
        assert [float(v) for v in mine] == [float(v) for v in numbers], (mine, theirs)


def test_a_long_list_gives_its_first_max_items_and_a_heavy_person_two_rows():
    """A person with 9 rows of 6 genres each: 2 rows kept, each its first 3 items."""
    long = "Science;History;Mystery;Fiction;Science;History"
    rows = [(0, long, 10, "North", "x")] * 9 + [(1, "Fiction", 10, "North", "y")]
    values = _exact(rows, BY_GENRE)
    assert dict(zip(sorted(GENRES), (int(v) for v in values["__m0"]), strict=True)) == \
        {"Fiction": 1, "Mystery": 2, "History": 2, "Science": 2}


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ',')) AS g(item)",
     "string_split(genres, ',') refused: the policy splits genres at ';'"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(title, ';')) AS g(item)",
     "title is no list column of checkouts in the policy; its list columns: genres (separator ';')"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST([1, 2]) AS g(item)",
     "UNNEST refused: UNNEST([1, 2]) reads no list column"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(regexp_split_to_array(genres, ';')) AS g(item)",
     "UNNEST refused: UNNEST(REGEXP_SPLIT_TO_ARRAY(genres, ';')) reads no list column"),
    ("SELECT COUNT(*) FROM checkouts LEFT JOIN UNNEST(string_split(genres, ';')) AS g(item) ON TRUE",
     "this join of UNNEST refused: it is joined to its one table by a comma or CROSS JOIN"),
    ("SELECT COUNT(*) FROM checkouts JOIN UNNEST(string_split(genres, ';')) AS g(item) ON item = 'x'",
     "this join of UNNEST refused"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';')) WITH ORDINALITY AS g(item, i)",
     "WITH OFFSET or ORDINALITY refused"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';'))",
     "UNNEST without a name for its item refused"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';')) AS g(a), "
     "UNNEST(string_split(genres, ';')) AS h(b)", "2 UNNESTs refused: a query unnests one list column"),
    ("SELECT COUNT(*) FROM checkouts WHERE 'Fiction' IN UNNEST(string_split(genres, ';'))",
     "UNNEST refused here: UNNEST is read only as a table in FROM or as a SELECT item"),
    ("SELECT COUNT(*) FROM checkouts WHERE list_contains(string_split(genres, ';'), 'Fiction')",
     "function ARRAY_CONTAINS() (allowed: "),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';')) AS g(pages)",
     "UNNEST(...) AS pages refused: checkouts already has a column pages"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';')) AS g(__x)",
     "names starting with __ are the engine's own"),
    ("SELECT COUNT(*) FROM (SELECT UNNEST(string_split(genres, ';'), recursive := true) AS item "
     "FROM checkouts)", "a list column's items are unnested as they are"),
    ("WITH c AS (SELECT * FROM checkouts) SELECT COUNT(*) FROM c, UNNEST(string_split(genres, ';')) "
     "AS g(item)", "UNNEST refused: it reads a list column of the private table in the same FROM"),
    ("SELECT AVG(n) FROM (SELECT person_id, COUNT(*) AS n FROM checkouts, UNNEST(string_split(genres, "
     "';')) AS g(item) GROUP BY person_id)", "UNNEST in a two-level query refused"),
    ("SELECT item, COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';')) AS g(item) "
     "WHERE item = 'Poetry' GROUP BY item", "GROUP BY item refused"),
    ("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';')) AS g(item) WHERE item = 'Poetr'",
     "'Poetr'"),
])
def test_other_forms_are_refused_in_one_line_naming_what_is_accepted(sql, fragment):
    with pytest.raises(QueryRefused) as error:
        _plan(sql)
    assert fragment in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_items_without_a_domain_are_counted_but_not_grouped():
    plain = copy.deepcopy(CHECKOUTS)
    del plain["tables"]["checkouts"]["columns"]["genres"]["list"]["domain"]
    policy = parse_policy(plain)
    plan = _plan("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ';')) AS g(item) "
                 "WHERE item = 'Poetry'", policy)
    assert plan.rows_per_unit == 6
    with pytest.raises(QueryRefused, match="GROUP BY item refused"):
        _plan(BY_GENRE, policy)


def _db(tmp_path, name: str, rows) -> PrivateDatabase:
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(CHECKOUTS))
    db_path = tmp_path / f"{name}.duckdb"
    with duckdb.connect(str(db_path)) as conn:
        _load(conn, rows)
    return PrivateDatabase.connect(db_path, policy_path,
                                   create_ledger(tmp_path / f"{name}.sqlite", policy_path), reuse=False)


def test_the_plan_its_sql_keys_and_refusals_depend_on_the_text_and_policy_only(tmp_path):
    """Explain (the rewritten SQL, rows per unit, the keys, each sensitivity) and a refusal are the
    same on two data sets, one with a person far over the bound and lists far over max_items."""
    heavy = [(0, ";".join(GENRES * 5), 900, "North", "x")] * 30
    seen = []
    for name, rows in (("a", _rows(1)), ("b", heavy)):
        with _db(tmp_path, name, rows) as db:
            e = db.explain(BY_GENRE, epsilon=1.0)
            with pytest.raises(QueryRefused) as refused:
                db.query("SELECT COUNT(*) FROM checkouts, UNNEST(string_split(genres, ',')) AS g(i)",
                         epsilon=1.0)
            seen.append((e.rewritten_sql, e.max_rows_per_unit, e.groups,
                         [(a.function, a.sensitivity) for a in e.aggregates], e.columns_read,
                         str(refused.value)))
    assert seen[0] == seen[1]
    assert seen[0][1:5] == (6, 4, [("COUNT(*)", 12.0)], ("checkouts.genres",))
    assert "LIST_SLICE(STR_SPLIT(\"genres\", ';'), 1, 3)" in seen[0][0]


def test_a_workload_answers_an_item_count_alone(tmp_path):
    """A workload's linear counts are counts of the table's rows: a count of items is not one."""
    with _db(tmp_path, "w", _rows(2)) as db:
        result = db.query_many([BY_GENRE, "SELECT branch, COUNT(*) AS n FROM checkouts GROUP BY branch"],
                               epsilon=100.0)
    assert result.answers[0].answered.startswith("alone: it reads the items of the list column genres")


@pytest.mark.slow
def test_intervals_of_item_counts_and_sums_cover(tmp_path):
    """200 runs at epsilon = 1 of an item count per genre and a sum of pages over one genre's
    items: each 95% interval holds the exact value in at least 180 of 200 runs per cell (10
    misses expected, s.d. 3.1; 20 misses is 3.2 deviations away)."""
    rows = _rows(5, units=300)
    conn = duckdb.connect()
    _load(conn, rows)
    counts = dict(conn.execute("SELECT g, COUNT(*) FROM (SELECT UNNEST(string_split(genres, ';')) "
                               "AS g FROM checkouts) GROUP BY g").fetchall())
    total = conn.execute("SELECT SUM(LEAST(pages, 500)) FROM (SELECT pages, UNNEST(string_split("
                         "genres, ';')) AS g FROM checkouts) WHERE g = 'History'").fetchone()[0]
    truth = np.array([counts.get(g, 0) for g in sorted(GENRES)], dtype=float)
    hits, pages_hits = np.zeros(len(GENRES)), 0
    with _db(tmp_path, "c", rows) as db:
        for _ in range(200):
            result = db.query(BY_GENRE, epsilon=1.0)
            assert list(result.df["item"]) == sorted(GENRES)
            hits += np.abs(result.df["n"].to_numpy(dtype=float) - truth) <= \
                result.ci95["n"].to_numpy(dtype=float)
            summed = db.query("SELECT SUM(pages) AS s FROM checkouts CROSS JOIN UNNEST(string_split("
                              "genres, ';')) AS item WHERE item = 'History'", epsilon=1.0)
            pages_hits += abs(float(summed.df["s"][0]) - total) <= float(summed.ci95["s"][0])
    print(f"95% intervals held in {hits.astype(int).tolist()} of 200 runs (one count per genre) "
          f"and {pages_hits} of 200 (the sum of pages)")
    assert (hits >= 180).all() and pages_hits >= 180, (hits, pages_hits)


def test_the_public_schema_shows_the_list():
    """An analyst reads the separator, the items read per row and their domain before asking."""
    from dpsql.engine.service.schema import public_schema

    columns = public_schema(POLICY)["tables"]["checkouts"]["columns"]
    assert columns["genres"]["list"] == {"separator": ";", "max_items": 3, "domain": GENRES}
    assert "list" not in columns["pages"]


def test_a_table_whose_rows_are_individuals_gives_max_items_item_rows_each():
    """Without a privacy unit each row is an individual (m = 1): at most 3 item rows, its first 3."""
    policy = copy.deepcopy(CHECKOUTS)
    del policy["tables"]["checkouts"]["privacy_unit"], policy["tables"]["checkouts"]["max_rows_per_unit"]
    plan = _plan(BY_GENRE, parse_policy(policy))
    assert plan.rows_per_unit == 3 and [sensitivity(m, plan) for m in plan.measurements] == [6]
    conn = duckdb.connect()
    _load(conn, [(0, "Fiction;Mystery;Fiction;History", 1, "North", "x"), (1, None, 2, "South", "y")])
    bound_units(conn, plan.table, "key")  # the table's own copy: every row
    counts = run(conn, rewrite(plan).sql("duckdb"), 1).values["__m0"]
    assert dict(zip(sorted(GENRES), counts, strict=True)) == \
        {"Fiction": 2, "History": 0, "Mystery": 1, "Science": 0}
