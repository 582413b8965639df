"""Dates and timestamps on Spark: read without time zone, the same exact aggregates (before noise)
as DuckDB for comparisons with DATE and TIMESTAMP literals, EXTRACT (Sunday is day 0, whole
seconds) and date_trunc; a cast of a date to text is refused, naming the form."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.errors import PolicyError, QueryRefused
from dpsql.engine.plan import ExactAnswer
from dpsql.engine.policy_yaml import parse_policy

from tests.support import BASE_POLICY, write_policy
from tests.test_dates import DATES_POLICY
from tests.test_spark_conformance import _same
from tests.test_spark_joins import Pair

pytest.importorskip("pyspark")

# In the bounds, outside them, NULL; unit 1 over its bound of 3 (the keyed rule picks the same
# rows on both engines: a date's and a timestamp's text are the same ISO text on both).
ROWS = [
    (1, "2024-01-05", "2024-01-05 08:30:00", "2024-01-05", 30),
    (1, "2024-01-20", "2024-01-20 23:10:00.25", "2023-12-31", 40),
    (1, "2024-06-16", "2024-06-16 06:00:59.75", "2024-06-16", 41),
    (1, "2024-07-07", "2024-07-07 07:07:07", "2024-07-07", 42),
    (1, "2024-09-29", "2024-09-29 12:30:00", "2024-09-29", 43),
    (2, "2024-02-29", "2024-02-29 12:00:00", "2024-02-29", 50),
    (3, "2024-03-01", "2024-03-01 00:00:00", "1999-03-01", 60),
    (4, "2024-03-03", "2024-03-03 17:45:00", "2024-03-03", 70),
    (5, "2024-12-31", "2024-12-31 23:59:59", "2030-07-10", 20),
    (6, "2023-12-31", "2023-12-31 23:59:59", "0001-01-01", 10),
    (7, "2025-01-01", "2025-01-01 00:00:00", "2025-01-01", 10),
    (11, None, None, None, 10),
]
QUERIES = [
    "SELECT date_trunc('month', day) AS m, COUNT(*), SUM(age) FROM visits WHERE day >= DATE '2024-02-01' "
    "GROUP BY 1",
    "SELECT EXTRACT(dow FROM ts) AS d, COUNT(*), AVG(EXTRACT(second FROM ts)), SUM(EXTRACT(isodow FROM day)) "
    "FROM visits GROUP BY 1",
    "SELECT date_trunc('week', day) AS w, EXTRACT(hour FROM ts) AS h, COUNT(*) FROM visits WHERE ts < "
    "TIMESTAMP '2024-03-02 00:00:00' GROUP BY 1, 2",
    "SELECT YEAR(day) AS y, COUNT(*), SUM(EXTRACT(doy FROM day) + EXTRACT(week FROM ts)) FROM visits "
    "WHERE seen >= DATE '2000-01-01' GROUP BY 1",
    "SELECT date_trunc('hour', ts) AS h, COUNT(*) FROM visits WHERE ts BETWEEN TIMESTAMP "
    "'2024-01-05 00:00:00' AND TIMESTAMP '2024-01-06 00:00:00' GROUP BY 1",
    "SELECT CAST(ts AS DATE) AS d, COUNT(*) FROM visits WHERE day < DATE '2024-01-08' GROUP BY 1",
]


@pytest.fixture(scope="module")
def visits(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("spark_dates")
    db = folder / "visits.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE TABLE visits (person_id BIGINT, day DATE, ts TIMESTAMP, seen DATE, age BIGINT)")
        conn.executemany("INSERT INTO visits VALUES (?, ?::DATE, ?::TIMESTAMP, ?::DATE, ?)", ROWS)
    policy = parse_policy({**BASE_POLICY, **DATES_POLICY, "limits": {"time_seconds": 600}})
    both = Pair(spark, db, policy, folder)
    yield both
    both.close()


def test_date_queries_give_identical_exact_aggregates(visits):
    for sql in QUERIES:
        duck, spark = visits.exact(sql)
        assert isinstance(duck, ExactAnswer) and isinstance(spark, ExactAnswer), (sql, duck, spark)
        assert _same(duck, spark), (sql, duck, spark)


def test_a_date_cast_to_text_is_refused_on_spark_by_name(visits):
    sql = "SELECT COUNT(*) FROM visits WHERE CAST(day AS VARCHAR) LIKE '2024%'"
    _, spark = visits.exact(sql)
    assert spark == f"{QueryRefused.__name__}: CAST of a date or timestamp to VARCHAR is not " \
        "supported on the Spark engine (DuckDB and Spark print them differently)"


def test_spark_refuses_a_zoned_timestamp_column_by_name(spark, tmp_path):
    """Spark's `timestamp` has the session's time zone: like DuckDB's TIMESTAMPTZ, refused when
    the data is opened (date and timestamp_ntz columns are read: the tests above)."""
    frame = spark.createDataFrame([(1, dt.datetime(2024, 1, 5))], "person_id long, ts timestamp")
    policy = write_policy(tmp_path / "policy.yaml", {"tables": {"visits": {
        "privacy_unit": "person_id", "columns": {"ts": {"type": "timestamp"}}}}})
    with pytest.raises(PolicyError, match=r"tables\.visits\.columns\.ts\.type: the data column is "
                                          "Spark's timestamp"):
        PrivateDatabase.connect({"visits": frame}, policy, tmp_path / "l.sqlite", create=True,
                                engine="spark", spark=spark)
    assert not (tmp_path / "l.sqlite").exists()
