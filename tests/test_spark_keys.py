"""Conformance of keys given as a public table's rows and over a moved date (docs/theory.md
§32): the Spark engine reads the catalogue's distinct rows through its `public_rows` and gives
the same key rows and exact aggregates as DuckDB, over the same library data."""

from __future__ import annotations

import copy

import pytest
from dpsql.engine.plan import ExactAnswer
from dpsql.engine.policy_yaml import parse_policy

from tests.library import LIBRARY_POLICY, checkout, library_files
from tests.test_spark_conformance import _same

pytest.importorskip("pyspark")

from tests.test_spark_joins import Pair  # noqa: E402

ROWS = [checkout(p, b, d, h) for p, b, d, h in [
    (1, 1, 0, 1), (1, 3, 1, 23), (1, 4, 2, 5), (1, 7, 3, 12), (2, 2, 2, 22), (2, 9, 3, 0),
    (3, 7, 4, 13), (3, 5, 5, 6), (None, 3, 6, 21), (4, None, 1, 8), (5, 6, 6, 23)]]
QUERIES = [
    "SELECT c.title, c.author, COUNT(*), SUM(spent) FROM checkouts k JOIN catalogue c ON "
    "k.book_id = c.book_id GROUP BY c.title, c.author",
    "SELECT k.genre, c.title, COUNT(*) FROM checkouts k LEFT JOIN catalogue c ON k.book_id = "
    "c.book_id GROUP BY k.genre, c.title",
    "SELECT CAST(seen + INTERVAL 20 HOUR AS DATE) AS d, COUNT(*) FROM checkouts GROUP BY d",
    "SELECT date_trunc('week', day + INTERVAL 3 DAY) AS w, EXTRACT(dow FROM day - INTERVAL 1 DAY) "
    "AS dow, COUNT(*) FROM checkouts GROUP BY w, dow",
]


@pytest.fixture(scope="module")
def library(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("spark_keys")
    db, _ = library_files(folder, ROWS)
    # A cold JVM on a loaded machine can take longer than the default limits to plan and bound.
    limits = {"time_seconds": 600, "plan_seconds": 600}
    policy = parse_policy({**copy.deepcopy(LIBRARY_POLICY), "limits": limits})
    both = Pair(spark, db, policy, folder)
    yield both
    both.close()


@pytest.mark.parametrize("sql", QUERIES)
def test_both_engines_give_the_same_keys_and_exact_aggregates(library, sql):
    duck, spark = library.exact(sql)
    assert isinstance(duck, ExactAnswer), duck
    assert isinstance(spark, ExactAnswer) and _same(duck, spark), (sql, duck, spark)
