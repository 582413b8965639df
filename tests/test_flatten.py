"""CTEs and FROM-subqueries that keep one row per row are flattened into the one-table SELECT
the binder validates: the same gate, the same executed SQL, the same sensitivity as the query
written by hand. Everything else is refused, naming the construct and the alternative."""

from __future__ import annotations

import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select

from tests.support import BASE_POLICY, charge_count, cli_paths, run_cli

POLICY = parse_policy(BASE_POLICY)

# (query with CTEs or FROM-subqueries, the same query written on the table)
EQUIVALENT = [
    ("WITH adults AS (SELECT * FROM people WHERE age >= 18) "
     "SELECT state, COUNT(*), SUM(income) FROM adults GROUP BY state",
     "SELECT state, COUNT(*), SUM(income) FROM people WHERE age >= 18 GROUP BY state"),
    ("SELECT band, COUNT(*) AS n FROM (SELECT FLOOR(age / 10) AS band FROM people) AS t GROUP BY band",
     "SELECT FLOOR(age / 10) AS band, COUNT(*) AS n FROM people GROUP BY FLOOR(age / 10)"),
    ("WITH a AS (SELECT age AS years, sick FROM people), b AS (SELECT years FROM a WHERE sick) "
     "SELECT AVG(years) AS mean_age FROM b",
     "SELECT AVG(age) AS mean_age FROM people WHERE sick"),
    ("WITH u AS (SELECT person_id AS pid, state AS s FROM people) "
     "SELECT s, COUNT(DISTINCT pid) AS units FROM u GROUP BY s",
     "SELECT state AS s, COUNT(DISTINCT person_id) AS units FROM people GROUP BY state"),
    ("SELECT SUM(x) AS total FROM (SELECT * FROM (SELECT income * 2 AS x, age FROM people) AS i "
     "WHERE age < 50) AS o",
     "SELECT SUM(income * 2) AS total FROM people WHERE age < 50"),
    ("SELECT age, COUNT(*) AS \"Rows\" FROM (SELECT * FROM people) AS t GROUP BY 1 ORDER BY 2 DESC LIMIT 3",
     "SELECT age, COUNT(*) AS \"Rows\" FROM people GROUP BY 1 ORDER BY 2 DESC LIMIT 3"),
    ("SELECT state, SUM(age) FROM (SELECT * FROM people) AS t GROUP BY state ORDER BY 2",
     "SELECT state, SUM(age) FROM people GROUP BY state ORDER BY 2"),
]


@pytest.fixture(scope="module")
def db(people_db, tmp_path_factory):
    from tests.support import create_ledger, write_policy

    root = tmp_path_factory.mktemp("flatten")
    policy = write_policy(root / "policy.yaml")
    conn = PrivateDatabase.connect(people_db, policy, create_ledger(root / "ledger.sqlite", policy))
    yield conn
    conn.close()


@pytest.mark.parametrize("nested, flat", EQUIVALENT)
def test_a_flattened_query_runs_the_same_sql_with_the_same_sensitivity(db, nested, flat):
    ours, theirs = db.explain(nested, epsilon=1.0), db.explain(flat, epsilon=1.0)
    assert ours.rewritten_sql == theirs.rewritten_sql
    assert [(a.column, a.sensitivity, a.scale) for a in ours.aggregates] == \
        [(a.column, a.sensitivity, a.scale) for a in theirs.aggregates]
    assert ours.columns_read == theirs.columns_read and ours.group_by == theirs.group_by
    assert ours.flattened_sql and not theirs.flattened_sql
    assert list(db.query(nested, epsilon=1.0).df.columns) == list(db.query(flat, epsilon=1.0).df.columns)


def test_unnamed_outputs_keep_the_name_the_analyst_wrote():
    sql = "WITH a AS (SELECT age AS years FROM people) SELECT COUNT(*), SUM(years), years FROM a GROUP BY years"
    flat = flatten(parse_select(sql), POLICY)
    assert [item.alias_or_name for item in flat.expressions] == ["COUNT(*)", "SUM(years)", "years"]


def test_a_query_without_cte_or_subquery_is_not_touched():
    select = parse_select("SELECT COUNT(*) FROM people")
    assert flatten(select, POLICY) is select


@pytest.mark.parametrize("sql, fragment", [
    # Read through another subquery (not an aggregate over its released rows, §33).
    ("WITH c AS (SELECT state, COUNT(*) AS n FROM people GROUP BY state) "
     "SELECT SUM(n) FROM (SELECT n FROM c) AS d",
     "GROUP BY in CTE c refused: a CTE or subquery may only filter, rename and compute columns of "
     "one table (one row per row); write the aggregate in the outer SELECT"),
    ("WITH c AS (SELECT COUNT(*) AS n FROM people) SELECT SUM(n) FROM (SELECT n FROM c) AS d",
     "aggregate COUNT(*) in CTE c refused: an answer aggregates once, with noise; write the "
     "aggregate in the outer SELECT"),
    ("SELECT COUNT(*) FROM (SELECT * FROM people LIMIT 5) AS s", "LIMIT in subquery in FROM refused"),
    ("SELECT COUNT(*) FROM (SELECT * FROM (SELECT DISTINCT age FROM people) AS a) AS b",
     "DISTINCT in subquery in subquery in FROM refused"),
    ("WITH c AS (SELECT * FROM c) SELECT COUNT(*) FROM c", "CTE c reads itself"),
    ("WITH c AS (SELECT * FROM people WHERE age IN (SELECT age FROM people)) SELECT COUNT(*) FROM c",
     "subquery refused (outside FROM and WITH; filter on the table's columns directly)"),
    ("WITH RECURSIVE c AS (SELECT * FROM people) SELECT COUNT(*) FROM c", "WITH RECURSIVE refused"),
    ("SELECT COUNT(*) FROM (SELECT 1 AS one FROM people) AS s GROUP BY one",
     "CTE or subquery refused: it does not flatten into one SELECT on the table"),
    ("WITH c AS (SELECT age FROM people) SELECT SUM(income) FROM c",
     "could not resolve the CTE or subquery: Column 'income' could not be resolved"),
    ("WITH c AS (SELECT person_id AS pid, age FROM people) SELECT SUM(age) FROM c WHERE pid = 7",
     "column person_id is the privacy unit"),
])
def test_what_does_not_flatten_is_refused_naming_the_construct(db, sql, fragment):
    with pytest.raises(QueryRefused) as info:
        db.explain(sql, epsilon=1.0)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_the_cli_explains_the_flattened_sql_and_answers_it_once_charged(setup, capsys):
    sql = "WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT COUNT(*) AS n FROM adults"
    code, out, err = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "1", "--", sql)
    assert code == 0, err
    assert "flattened SQL" in out and "SELECT COUNT(*) AS n FROM people WHERE age >= 18" in out
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--", sql)
    assert code == 0, err
    assert charge_count(setup.ledger) == 1


def _chain(count: int, body: str, first: str = "SELECT * FROM people") -> str:
    """WITH c0 AS (first), c1 AS (body over c0), ..., the last CTE's name substituted for {prev}."""
    ctes = [f"c0 AS ({first})"] + [f"c{i} AS ({body.format(prev=f'c{i - 1}')})" for i in range(1, count)]
    return "WITH " + ", ".join(ctes) + f" SELECT {{out}} FROM c{count - 1}"


@pytest.mark.parametrize("sql, fragment", [
    (_chain(300, "SELECT * FROM {prev}").format(out="COUNT(*)"),
     "query declares 300 CTEs; at most 100 are accepted in one WITH clause"),
    (_chain(60, "SELECT age + 1 AS age FROM {prev}", "SELECT age FROM people").format(out="SUM(age)"),
     "query is nested more than 100 levels deep once its CTEs and subqueries are merged"),
])
def test_a_long_chain_of_ctes_is_refused_in_one_line_and_charges_nothing(db, sql, fragment):
    """Refused before the recursive steps: the computed chain overflowed Python's stack (a
    RecursionError in the type check) before these checks."""
    before = db.budget().spent_dp
    with pytest.raises(QueryRefused) as info:
        db.query(sql, epsilon=1.0)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert db.budget().spent_dp == before


def test_a_modest_chain_of_ctes_still_answers(db):
    copies = _chain(20, "SELECT * FROM {prev}").format(out="COUNT(*)")
    computed = _chain(20, "SELECT age + 1 AS age FROM {prev}", "SELECT age FROM people").format(out="SUM(age)")
    assert db.explain(copies, epsilon=1.0).rewritten_sql == \
        db.explain("SELECT COUNT(*) FROM people", epsilon=1.0).rewritten_sql
    assert "+ 1" in db.explain(computed, epsilon=1.0).flattened_sql
