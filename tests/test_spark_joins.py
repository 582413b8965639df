"""Conformance of joins: public lookup tables, parent tables, two private tables on their unit,
and join trees along a chain (customer <- orders <- lineitem, with public supplier, nation and
region) give the same exact aggregates (before noise) on Spark as on DuckDB, over the same data,
with every table the plan reads bounded by both engines' one rule."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import duckdb
import pytest
from dpsql.engine import postprocess
from dpsql.engine.backends.duckdb import DuckDBBackend
from dpsql.engine.errors import DpsqlError, PolicyError
from dpsql.engine.plan import ExactAnswer
from dpsql.engine.policy import Policy
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.prepare import Preparer
from dpsql.engine.rewrite import copies_to_bound, rewrite

from tests.support import (
    BASE_POLICY,
    HOUSEHOLDS,
    REGIONS,
    add_households,
    add_regions,
    add_visits,
    make_people,
    with_households,
    with_regions,
    with_visits,
)
from tests.test_join_tree import POLICY as TREE_POLICY
from tests.test_join_tree import QUERIES as TREE_QUERIES
from tests.test_join_tree import base_units, make_db
from tests.test_joins import (
    PARENT_PLANS,
    PARENT_QUERIES,
    PARENTS,
    PLANS,
    QUERIES,
    UNIT_PLANS,
    UNIT_QUERIES,
    UNITS,
)
from tests.test_joins import POLICY as REGIONS_POLICY
from tests.test_spark_conformance import _same

pytest.importorskip("pyspark")

from dpsql.engine.backends.spark import SparkBackend  # noqa: E402
from dpsql.engine.backends.spark_tables import needed  # noqa: E402

KEY = "join-conformance-key"


def parquet_of(db: Path, policy: Policy, folder: Path) -> dict[str, Path]:
    """Every table the Spark engine reads, written to Parquet by DuckDB."""
    paths = {}
    with duckdb.connect(str(db), read_only=True) as conn:
        for name in needed(policy):
            paths[name] = folder / f"{name}.parquet"
            conn.execute(f"COPY {name} TO '{paths[name]}' (FORMAT parquet)")
    return paths


class Pair:
    """The same data and policy behind both backends, each with its own preparer."""

    def __init__(self, spark, db: Path, policy: Policy, folder: Path) -> None:
        self.post = postprocess.connect()
        files = parquet_of(db, policy, folder)  # before DuckDB opens the file locked down
        self.backends = (DuckDBBackend.open(db, policy), SparkBackend.open(spark, files, policy))
        self.preparers = [Preparer(policy, b, self.post) for b in self.backends]

    def exact(self, sql: str) -> list[ExactAnswer | str]:
        """Each backend's exact answer to `sql` (every copy the plan reads bounded), or its
        refusal as text."""
        out: list[ExactAnswer | str] = []
        for backend, preparer in zip(self.backends, self.preparers, strict=True):
            try:
                prepared = preparer.prepare(sql, 1.0, None)
            except DpsqlError as exc:
                out.append(f"{type(exc).__name__}: {exc}")
                continue
            for table, columns in copies_to_bound(prepared.plan):
                backend.bound(table, KEY, columns)
            out.append(backend.run(prepared.sql, len(prepared.plan.group_by)))
        return out

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
        self.post.close()


@pytest.fixture(scope="module")
def lookups(spark, tmp_path_factory):
    """people (units over the bound) with the public regions, the parent households and the
    private visits, on both engines."""
    folder = tmp_path_factory.mktemp("spark_joins")
    db = make_people(folder / "people.duckdb")
    for add in (add_regions, add_households, add_visits):
        db = add(db)
    tables = {**with_regions()["tables"], **with_households()["tables"], **with_visits()["tables"]}
    tables["people"] = with_households()["tables"]["people"]
    # A cold JVM on a loaded machine can take longer than the default 30 s to bound a table.
    policy = parse_policy({**BASE_POLICY, "tables": tables, "limits": {"time_seconds": 600}})
    both = Pair(spark, db, policy, folder)
    yield both
    both.close()


@pytest.mark.parametrize("sql", [QUERIES[1], PARENT_QUERIES[0], UNIT_QUERIES[0]])
def test_public_parent_and_unit_joins_give_identical_exact_aggregates(lookups, sql):
    duck, spark = lookups.exact(sql)
    assert isinstance(duck, ExactAnswer) and isinstance(spark, ExactAnswer), (duck, spark)
    assert _same(duck, spark), (sql, duck, spark)


@pytest.mark.slow
@pytest.mark.parametrize("sql", [QUERIES[0], *QUERIES[2:], *PARENT_QUERIES[1:], *UNIT_QUERIES[1:]])
def test_every_join_query_of_the_join_tests_gives_identical_exact_aggregates(lookups, sql):
    duck, spark = lookups.exact(sql)
    assert isinstance(duck, ExactAnswer) and isinstance(spark, ExactAnswer), (duck, spark)
    assert _same(duck, spark), (sql, duck, spark)


@pytest.fixture(scope="module")
def shop(spark, tmp_path_factory):
    """The join tree tests' TPC-H-shaped data (customer, orders, lineitem; public part,
    supplier, nation, region), with a hostile customer over every bound (6 orders of 6 lines)
    and lines whose order is NULL or dangling, on both engines."""
    folder = tmp_path_factory.mktemp("spark_shop")
    units = base_units()
    units[77] = ([(77_000 + j, 1994, 900.0, [((j + i) % 8, (j * 3 + i) % 10, 80.0 + i, 40 + i)
                                             for i in range(6)]) for j in range(6)], [])
    db = make_db(folder / "shop.duckdb", units, [(None, 1, 2, 10.0, 3), (55_555, 2, 3, 20.0, 4)])
    both = Pair(spark, db, parse_policy({**TREE_POLICY, "limits": {"time_seconds": 600}}), folder)
    yield both
    both.close()


@pytest.mark.parametrize("sql", [TREE_QUERIES[0]])
def test_join_trees_along_a_chain_give_identical_exact_aggregates(shop, sql):
    """TPC-H Q5's shape (six tables): every private table of the tree bounded per customer
    through its chain on both engines, then joined (the other trees: slow)."""
    duck, spark = shop.exact(sql)
    assert isinstance(duck, ExactAnswer) and isinstance(spark, ExactAnswer), (duck, spark)
    assert _same(duck, spark), (sql, duck, spark)
    assert any(v != 0 for values in duck.values.values() for v in values)  # rows were joined


@pytest.mark.slow
@pytest.mark.parametrize("sql", TREE_QUERIES[1:])
def test_every_join_tree_of_the_tree_tests_gives_identical_exact_aggregates(shop, sql):
    duck, spark = shop.exact(sql)
    assert isinstance(duck, ExactAnswer) and isinstance(spark, ExactAnswer), (duck, spark)
    assert _same(duck, spark), (sql, duck, spark)


def test_a_repeated_public_key_is_refused_on_spark_as_on_duckdb(spark, tmp_path):
    """Opening checks the public key on Spark too, with the DuckDB engine's words."""
    db = add_regions(Path(shutil.copy(make_people(tmp_path / "p.duckdb", units=20),
                                      tmp_path / "people.duckdb")),
                     [("CA", "West", 39), ("CA", "East", 1), ("NY", "East", 19)])
    policy = parse_policy({**BASE_POLICY, **with_regions()})
    messages = []
    files = parquet_of(db, policy, tmp_path)
    for open_ in (lambda: DuckDBBackend.open(db, policy), lambda: SparkBackend.open(spark, files, policy)):
        with pytest.raises(PolicyError) as info:
            open_()
        messages.append((str(info.value), info.value.repeated))
    assert messages[0] == messages[1]
    assert messages[0][0].startswith("tables.regions.key: state is not unique in the data (1 value(s)")


def test_a_public_table_in_a_data_file_is_read_alike_on_both_engines(spark, tmp_path):
    """`data:` names a CSV of the public rows: both engines read it with the declared types."""
    db = make_people(tmp_path / "people.duckdb", units=40)
    csv = tmp_path / "regions.csv"
    csv.write_text("state,region,population\n" + "".join(f"{s},{r},{p}\n" for s, r, p in
                                                           [("CA", "West", 39), ("NY", "East", 19)]))
    tables = with_regions()["tables"]
    tables["regions"]["data"] = str(csv)
    both = Pair(spark, db, parse_policy({**BASE_POLICY, "tables": tables,
                                         "limits": {"time_seconds": 600}}), tmp_path)
    try:
        duck, spark_answer = both.exact(QUERIES[0])
        assert isinstance(duck, ExactAnswer) and _same(duck, spark_answer), (duck, spark_answer)
    finally:
        both.close()


# Each join form's SQL as rendered for Spark (the join tests' plans) passes Spark's own check;
# here, beside the other Spark tests, so that one test worker starts the JVM.
def test_spark_renders_a_public_join_over_its_own_views(spark):
    """Spark loads the public table and reads it in the rendered SQL (answers: the tests above)."""
    people = spark.createDataFrame([(1, "CA", 30, 1.0, True, "x")],
                                   "person_id long, state string, age long, income double, "
                                   "sick boolean, note string")
    regions = spark.createDataFrame(REGIONS, "state string, region string, population long")
    # The key check runs on Spark when it opens: a loaded machine's cold JVM may need > 30 s.
    policy = dataclasses.replace(REGIONS_POLICY,
                                 limits=dataclasses.replace(REGIONS_POLICY.limits, time_seconds=600))
    backend = SparkBackend.open(spark, {"people": people, "regions": regions}, policy)
    sql = backend.render(rewrite(PLANS[0]))
    backend.check(sql)
    assert "dpsql_regions" in sql and "dpsql_bounded_people" in sql


def test_spark_renders_a_parent_join_through_its_copy_of_one_row_per_key(spark):
    people = spark.createDataFrame([(1, "CA", 30, 1.0, True, "x", 1)],
                                   "person_id long, state string, age long, income double, "
                                   "sick boolean, note string, household_id long")
    households = spark.createDataFrame(HOUSEHOLDS, "household_id long, area string, rooms long")
    backend = SparkBackend.open(spark, {"people": people, "households": households}, PARENTS)
    sql = backend.render(rewrite(PARENT_PLANS[0]))
    backend.check(sql)
    assert "dpsql_bounded_households" in sql


def test_spark_renders_a_unit_join_through_both_bounded_copies(spark):
    people = spark.createDataFrame([(1, "CA", 30, 1.0, True, "x")],
                                   "person_id long, state string, age long, income double, "
                                   "sick boolean, note string")
    visits = spark.createDataFrame([(1, 3, True, "north")],
                                   "person_id long, days long, urgent boolean, clinic string")
    backend = SparkBackend.open(spark, {"people": people, "visits": visits}, UNITS)
    sql = backend.render(rewrite(UNIT_PLANS[0]))
    backend.check(sql)
    assert "dpsql_bounded_visits" in sql and "dpsql_bounded_people" in sql
