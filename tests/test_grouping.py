"""GROUP BY keys whose values follow from the policy: bounded int columns, CASE buckets with
literal results, FLOOR(col / width) buckets, ordinals and aliases; every possible key appears,
and a public WHERE condition on a grouped column prunes the keys, from the query text alone."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.columns import columns_read
from dpsql.engine.sql.parse import parse_select

from tests.support import BASE_POLICY, create_ledger, write_policy
from tests.test_expressions import ROW_LEVEL

POLICY = parse_policy(BASE_POLICY)
BANDS = "CASE WHEN age < 18 THEN 'minor' WHEN age < 65 THEN 'adult' ELSE 'senior' END"


def _keys(sql: str) -> list[tuple]:
    plan = build_plan(parse_select(sql), POLICY, sql)
    return [key.keys for key in plan.group_by]


@pytest.mark.parametrize("sql, keys", [
    ("SELECT age, COUNT(*) FROM people GROUP BY age", [tuple(range(0, 101))]),
    ("SELECT age, COUNT(*) FROM people WHERE age BETWEEN 17 AND 20 GROUP BY age", [(17, 18, 19, 20)]),
    ("SELECT age, COUNT(*) FROM people WHERE sick AND age >= 98 AND 99 >= age GROUP BY age", [(98, 99)]),
    ("SELECT age, COUNT(*) FROM people WHERE age IN (3, 5, 500) AND age <> 5 GROUP BY age", [(3,)]),
    ("SELECT age, COUNT(*) FROM people WHERE age < 2.5 GROUP BY age", [(0, 1, 2)]),
    ("SELECT age, COUNT(*) FROM people WHERE (age > 97) AND (income > 5) GROUP BY age", [(98, 99, 100)]),
    # Terms that are not an AND of conditions on the grouped column alone prune nothing.
    ("SELECT age, COUNT(*) FROM people WHERE age < 3 OR sick GROUP BY age", [tuple(range(0, 101))]),
    ("SELECT age, COUNT(*) FROM people WHERE NOT (age < 99) GROUP BY age", [tuple(range(0, 101))]),
    ("SELECT age, COUNT(*) FROM people WHERE age + 0 < 3 GROUP BY age", [tuple(range(0, 101))]),
    ("SELECT state, sick, COUNT(*) FROM people WHERE state IN ('CA', 'NY') AND NOT sick "
     "GROUP BY state, sick", [("CA", "NY"), (False,)]),
    ("SELECT state, COUNT(*) FROM people WHERE 'TX' = state GROUP BY 1", [("TX",)]),
    ("SELECT sick, COUNT(*) FROM people WHERE sick = TRUE GROUP BY sick", [(True,)]),
    (f"SELECT {BANDS} AS band, COUNT(*) FROM people GROUP BY band", [("minor", "adult", "senior")]),
    (f"SELECT {BANDS}, COUNT(*) FROM people GROUP BY 1", [("minor", "adult", "senior")]),
    ("SELECT FLOOR(age / 10) AS decade, COUNT(*) FROM people GROUP BY decade", [tuple(range(0, 11))]),
    ("SELECT COUNT(*) FROM people GROUP BY FLOOR(age / 30), sick", [(0, 1, 2, 3), (False, True)]),
    ("SELECT COUNT(*) FROM people GROUP BY CASE WHEN sick THEN 1 END", [(1,)]),
    # A whole-number expression of a bounded float: every whole number of its range (§26).
    ("SELECT COUNT(*) FROM people GROUP BY FLOOR(income / 10)", [tuple(range(0, 101))]),
])
def test_every_possible_key_follows_from_the_policy_and_the_query_text(sql, keys):
    assert _keys(sql) == keys


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM people GROUP BY income",
     "GROUP BY income refused: the column has no public domain in the policy (group on a bool "
     "column, a column with a domain, a bounded int or date column, a CASE with literal results, "
     "FLOOR(col / width) of a bounded int column, EXTRACT(part FROM col) or "
     "date_trunc('month', col) of a date or timestamp column, or an int, bool, text or date "
     "expression of such columns)"),
    ("SELECT COUNT(*) FROM people GROUP BY age / 10", "write FLOOR(age / 10) for width buckets"),
    ("SELECT COUNT(*) FROM people GROUP BY income * 2", "people.income lists no values in the policy"),
    ("SELECT COUNT(*) FROM people GROUP BY CASE WHEN sick THEN note END", "must be a text, whole number"),
    ("SELECT COUNT(*) FROM people GROUP BY 1", "item 1 is an aggregate"),
    ("SELECT COUNT(*) FROM people GROUP BY 3", "positions run from 1 to 1"),
    ("SELECT COUNT(*) FROM people WHERE age BETWEEN 200 AND 300 GROUP BY age",
     "leaves none of its values possible"),
    ("SELECT COUNT(*) FROM people GROUP BY LOWER(note)", "GROUP BY LOWER(note) refused"),
    ("SELECT age + 1, COUNT(*) FROM people GROUP BY FLOOR(age / 10)", "column age in SELECT refused"),
])
def test_other_keys_are_refused_naming_what_is_accepted(sql, fragment):
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select(sql), POLICY, sql)
    assert fragment in str(info.value)


def test_expression_keys_have_the_grouped_sensitivity():
    sql = f"SELECT {BANDS}, COUNT(*), SUM(age - 10) FROM people GROUP BY 1"
    plan = build_plan(parse_select(sql), POLICY, sql)
    assert [sensitivity(m, plan) for m in plan.measurements] == [4, 4 * 90]


def test_pruning_reads_the_query_text_not_the_data(setup, tmp_path):
    """The same query on an empty table and on the people data lists the same keys."""
    empty = tmp_path / "empty.duckdb"
    with duckdb.connect(str(empty)) as conn:
        conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, "
                     "income DOUBLE, sick BOOLEAN, note VARCHAR)")
    sql = "SELECT age, COUNT(*) FROM people WHERE age BETWEEN 17 AND 20 AND income > 3 GROUP BY age"
    answers = []
    for db_path in (setup.db, empty):
        ledger = create_ledger(tmp_path / f"{db_path.stem}.ledger", setup.policy)
        with PrivateDatabase.connect(db_path, setup.policy, ledger) as db:
            assert db.explain(sql, epsilon=1.0).groups == 4
            answers.append(list(db.query(sql, epsilon=1.0).df["age"]))
    assert answers == [[17, 18, 19, 20]] * 2


def test_bucket_answers_centre_on_the_exact_values(people_db, tmp_path):
    """At ε = 100, the answers lie within their 95% intervals of the exact values (plain
    DuckDB): at least 323 of the 360 cells over 20 runs (a 5% miss rate expects 342 with a
    standard deviation of 4.1, so fewer happen with probability 1.5e-5) and at least 12 of 20
    for every cell (fewer for any of the 18 with probability 3.6e-6).
    A row's key is computed from its value as stored: ages above the policy's 100 fall in
    bucket FLOOR(age / 50) = 2 and are counted there (their SUM clamped to 100)."""
    policy = write_policy(tmp_path / "policy.yaml", {**ROW_LEVEL, "budget": {"epsilon": 1e9}})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    sql = (f"SELECT {BANDS} AS band, FLOOR(age / 50) AS half, COUNT(*) AS n, SUM(age) AS s "
           "FROM people WHERE sick GROUP BY 1, 2")
    with duckdb.connect(str(people_db), read_only=True) as conn:
        exact = dict(((band, int(half)), (n, s)) for band, half, n, s in conn.execute(
            f"SELECT {BANDS}, FLOOR(age / 50), COUNT(*), SUM(LEAST(GREATEST(age, 0), 100)) "
            "FROM people WHERE sick GROUP BY 1, 2").fetchall())
    hits = None
    with PrivateDatabase.connect(people_db, policy, ledger, reuse=False) as db:
        for _ in range(20):
            result = db.query(sql, epsilon=100)
            keys = list(zip(result.df["band"], result.df["half"], strict=True))
            assert keys == [(b, h) for b in ("adult", "minor", "senior") for h in (0, 1, 2)]
            truth = np.array([exact.get(k, (0, 0)) for k in keys], dtype=float)
            answer = result.df[["n", "s"]].to_numpy(dtype=float)
            hit = np.abs(answer - truth) <= result.ci95[["n", "s"]].to_numpy(dtype=float)
            hits = hit.astype(int) if hits is None else hits + hit
    assert hits is not None and hits.sum() >= 323 and (hits >= 12).all(), hits


def test_explain_lists_the_keys_as_written(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        explained = db.explain("SELECT FLOOR(age / 10) AS d, sick, COUNT(*) FROM people GROUP BY 1, 2",
                               epsilon=1.0)
    assert explained.group_by == ("FLOOR(age / 10)", "sick") and explained.groups == 22


@pytest.mark.parametrize("sql, read", [
    ("SELECT COUNT(*) FROM people", set()),
    ("SELECT SUM(age + 1) FROM people", {"age"}),
    ("SELECT AVG(sick) FROM people", {"sick"}),
    ("SELECT COUNT(*) FILTER (WHERE income > 5) FROM people", {"income"}),
    ("SELECT SUM(CASE WHEN sick THEN age END), COUNT(note) FROM people", {"sick", "age", "note"}),
    ("SELECT FLOOR(age / 10), COUNT(*) FROM people GROUP BY 1", {"age"}),
    ("SELECT COUNT(*) FROM people GROUP BY CASE WHEN income < 5 THEN 'a' ELSE 'b' END", {"income"}),
    ("SELECT state, COUNT(*) FROM people GROUP BY 1", {"state"}),
    ("SELECT age, COUNT(*) FROM people WHERE age BETWEEN 17 AND 20 GROUP BY age", {"age"}),
    ("SELECT age, AVG(income / 10) FROM people WHERE sick GROUP BY age", {"age", "income", "sick"}),
    ("SELECT STDDEV(income - age), VAR_POP(sick) FROM people", {"age", "income", "sick"}),
])
def test_the_columns_each_new_form_reads(sql, read):
    """Column-scoped eta calibrates by the columns a query reads: every new form's WHERE,
    GROUP BY expression and aggregate argument is counted (on a row-level table, where a query
    reads only the columns it names)."""
    policy = parse_policy({**BASE_POLICY, **ROW_LEVEL})
    plan = build_plan(parse_select(sql), policy, sql)
    assert columns_read(plan) == frozenset(f"people.{name}" for name in read)
