"""The Spark engine through the public API and the CLI: private answers charged to the same
ledger, only rendered SQL reaching Spark, data failures halting, limits cancelling."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import duckdb
import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.errors import EngineHalted, InputError, PolicyError, QueryRefused, ResourceLimitExceeded

from tests.support import BASE_POLICY, charge_count, create_ledger, make_people, run_cli, write_policy

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spark_api")
    db = make_people(folder / "people.duckdb")
    path = folder / "people.parquet"
    with duckdb.connect(str(db)) as conn:
        conn.execute(f"COPY people TO '{path}' (FORMAT parquet)")
    return path


def _ledger(tmp_path, policy):
    return create_ledger(tmp_path / "ledger.sqlite", policy)


def test_a_query_on_spark_is_answered_and_charged_to_the_ledger(spark, parquet, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = _ledger(tmp_path, policy)
    with PrivateDatabase.connect(parquet, policy, ledger, engine="spark", spark=spark) as db:
        explained = db.explain("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=1.0)
        result = db.query("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=1.0)
    assert "dpsql_bounded_people" in explained.rewritten_sql
    assert list(result.df["state"]) == ["CA", "NY", "TX", "WA"]
    assert charge_count(ledger) == 1
    with PrivateDatabase.connect(parquet.with_suffix(".duckdb"), policy, ledger) as db:
        assert db.budget().spent_dp == pytest.approx(result.epsilon_dp)  # the same ledger


def test_a_dataframe_and_a_session_view_are_sources_too(spark, parquet, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml")
    frame = spark.read.parquet(str(parquet))
    frame.createOrReplaceTempView("people_source")
    answers = []
    for source in (frame, "people_source", {"people": frame}):
        ledger = create_ledger(tmp_path / f"{len(answers)}.sqlite", policy)
        with PrivateDatabase.connect(source, policy, ledger, engine="spark", spark=spark) as db:
            answers.append(db._preparer.prepare("SELECT COUNT(*) FROM people", 1.0, None).sql)
            db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
        assert charge_count(ledger) == 1
    assert len(set(answers)) == 1


def test_only_sql_rendered_from_a_plan_reaches_spark(spark, parquet, tmp_path):
    """The analyst's text is never given to spark.sql, not even to be refused."""
    policy = write_policy(tmp_path / "policy.yaml")
    with PrivateDatabase.connect(parquet, policy, _ledger(tmp_path, policy), engine="spark",
                                 spark=spark) as db:
        backend = db._backend
        seen: list[str] = []
        for session in (backend._spark, backend._empty):
            real = session.sql
            session.sql = lambda text, real=real, **kw: (seen.append(text), real(text, **kw))[1]
        hostile = ["SELECT COUNT(*) FROM people WHERE reflect('java.lang.System', 'exit', 0) = 1",
                   "SET spark.sql.ansi.enabled = true", "SELECT COUNT(*) FROM parquet.`/etc`",
                   "SELECT COUNT(*) FROM people; DROP TABLE people"]
        for sql in hostile:
            with pytest.raises(QueryRefused):
                db.query(sql, epsilon=1.0)
        db.query("SELECT SUM(age) FROM people WHERE state = 'CA'", epsilon=1.0)
    # Each text is a query rendered from a plan, the bounding rule's SQL, or the empty view of
    # a bounded copy the plan reads (its columns of a table's view).
    copy_view = re.compile(r"SELECT `\w+`(, `\w+`)* FROM dpsql_\w+")
    assert seen and all(text in backend._duckdb or "dpsql_rank" in text or copy_view.fullmatch(text)
                        for text in seen)
    assert not any(h in text for h in hostile for text in seen)


def test_a_failure_on_the_data_halts_the_database_and_charges_nothing(spark, tmp_path):
    """A source whose reading fails on one row (a Python function raising on it) is a data
    failure: the database halts, exactly as on DuckDB, instead of refusing one query."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def fragile(age: int) -> int:
        if age == 37:
            raise ValueError("boom")
        return age

    rows = [(i, "CA", 30 + i % 10, 1.0, True, "r") for i in range(20)]
    frame = spark.createDataFrame(rows, "person_id long, state string, age long, income double, "
                                        "sick boolean, note string")
    frame = frame.withColumn("age", F.udf(fragile, LongType())("age"))
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = _ledger(tmp_path, policy)
    with PrivateDatabase.connect(frame, policy, ledger, engine="spark", spark=spark) as db:
        with pytest.raises(EngineHalted):
            db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
        with pytest.raises(EngineHalted):
            db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
        assert "bounding rows per privacy unit failed" in db.ledger.halted()
    assert charge_count(ledger) == 0


def test_a_query_past_the_time_limit_is_cancelled_and_charges_nothing(spark, tmp_path):
    """Rows that are each an individual (no bounding step), read slowly: the query's Spark job
    is cancelled at the policy's time limit."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def slow(age: int) -> int:
        time.sleep(0.5)
        return age

    rows = [(i, "CA", 30, 1.0, True, "r") for i in range(60)]
    frame = spark.createDataFrame(rows, "person_id long, state string, age long, income double, "
                                        "sick boolean, note string").repartition(1)
    frame = frame.withColumn("age", F.udf(slow, LongType(), useArrow=False)("age"))
    people = dict(BASE_POLICY["tables"]["people"])
    del people["privacy_unit"], people["max_rows_per_unit"]
    policy = write_policy(tmp_path / "policy.yaml", {"limits": {"time_seconds": 2},
                                                     "tables": {"people": people}})
    ledger = _ledger(tmp_path, policy)
    with PrivateDatabase.connect(frame, policy, ledger, engine="spark", spark=spark) as db:
        started = time.monotonic()
        with pytest.raises(ResourceLimitExceeded) as info:
            db.query("SELECT SUM(age) FROM people", epsilon=1.0)
        assert time.monotonic() - started < 20
    assert info.value.limit == "limits.time_seconds" and charge_count(ledger) == 0


def test_bad_engine_arguments_and_schemas_get_one_line_errors(spark, parquet, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = _ledger(tmp_path, policy)
    with pytest.raises(InputError, match="engine must be one of duckdb, spark, got 'sparkle'"):
        PrivateDatabase.connect(parquet, policy, ledger, engine="sparkle")
    with pytest.raises(InputError, match="pass engine='spark'"):
        PrivateDatabase.connect(spark.read.parquet(str(parquet)), policy, ledger)
    with pytest.raises(InputError, match="no Spark table or Parquet path 'nowhere'"):
        PrivateDatabase.connect("nowhere", policy, ledger, engine="spark", spark=spark)
    from pyspark.sql import functions as F

    wrong = spark.read.parquet(str(parquet)).withColumn("age", F.lit("x"))
    with pytest.raises(PolicyError, match="tables.people.columns.age.type: the policy says int"):
        PrivateDatabase.connect(wrong, policy, ledger, engine="spark", spark=spark)
    assert charge_count(ledger) == 0


def test_the_cli_answers_on_spark(spark, parquet, tmp_path, capsys):
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = _ledger(tmp_path, policy)
    code, out, err = run_cli(capsys, "query", "--engine", "spark", "--db", str(parquet),
                             "--policy", str(policy), "--ledger", str(ledger), "--epsilon", "1",
                             "--format", "json", "SELECT sick, COUNT(*) FROM people GROUP BY sick")
    assert code == 0, err
    assert [row[0] for row in json.loads(out)["rows"]] == [False, True]
    assert charge_count(ledger) == 1


@pytest.mark.slow
def test_the_cli_on_spark_prints_the_answer_alone(parquet, tmp_path):
    """A fresh process: no JVM log lines, no JVM notice and no PySpark FutureWarning on stderr
    (slow: it starts its own JVM)."""
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = _ledger(tmp_path, policy)
    done = subprocess.run([sys.executable, "-m", "dpsql.engine.cli", "query", "--engine", "spark", "--db",
                           str(parquet), "--policy", str(policy), "--ledger", str(ledger), "--epsilon", "1",
                           "--format", "json", "SELECT COUNT(*) FROM people"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0][0] is not None
    assert done.stderr == ""
