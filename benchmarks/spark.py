"""The same workload on DuckDB and on local Spark, over generated Parquet, and the Spark engine
against the plain Spark SQL of the same text, in one run.

    python -m benchmarks.spark 10000000 [100000000 ...]

Writes benchmarks/out/spark_<rows>.json; `python -m benchmarks.run report` renders them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from benchmarks.generate import DATA_DIR, dataset
from benchmarks.workload import EPSILON, TEMPLATES, policy_dict
from engine import PrivateDatabase
from engine.policy import parse_policy

OUT = Path(__file__).resolve().parent / "out"
SPARK_TEMPLATES = ("count", "filtered_count", "sum", "avg", "grouped_count", "grouped_count_sum_avg",
                   "count_distinct_unit")


@dataclass(frozen=True)
class EngineRun:
    """One engine's times on one dataset (seconds)."""

    engine: str
    rows: int
    open_s: float  # opening the data under the policy (Spark: reading the Parquet schema)
    first_query_s: float  # the first query, which makes the bounded copy
    template_s: dict[str, float]  # median per template after the first query
    plain_s: dict[str, float]  # the same text as plain SQL on the same engine, no privacy
    ratio: dict[str, float]  # engine / plain


def parquet_of(rows: int) -> Path:
    """The benchmark table of this size as a Parquet file (written once by DuckDB)."""
    path = DATA_DIR / f"spark_{rows}" / "people.parquet"  # the table is named after the file
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        source = dataset(rows).path
        with duckdb.connect(str(source), read_only=True) as conn:
            conn.execute(f"COPY people TO '{path}' (FORMAT parquet)")
    return path


def _median(action, reps: int) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench(engine: str, path: Path, rows: int, reps: int, spark=None) -> EngineRun:
    """Open, first query, then each template `reps` times through the engine and as plain SQL."""
    # Bounding 100M rows on 2 cores takes minutes: the time limit is raised for the benchmark.
    policy = parse_policy({**policy_dict("per_unit"), "limits": {"time_seconds": 600,
                                                                 "memory_mb": 8192}})
    plain = _plain_runner(engine, path, spark)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        db = PrivateDatabase.connect(path, policy, Path(tmp) / "ledger.sqlite", create=True,
                                     engine=engine, spark=spark)
        opened = time.perf_counter() - started
        with db:
            started = time.perf_counter()
            db.query(TEMPLATES["count"], epsilon=EPSILON)
            first = time.perf_counter() - started
            engine_s = {name: _median(lambda sql=TEMPLATES[name]: db.query(sql, epsilon=EPSILON), reps)
                        for name in SPARK_TEMPLATES}
    plain_s = {name: _median(lambda sql=TEMPLATES[name]: plain(sql), reps) for name in SPARK_TEMPLATES}
    return EngineRun(engine, rows, opened, first, engine_s, plain_s,
                     {name: engine_s[name] / plain_s[name] for name in SPARK_TEMPLATES})


def _plain_runner(engine: str, path: Path, spark):
    """The analyst's text run as it is, without privacy, on the same engine and data."""
    if engine == "spark":
        spark.read.parquet(str(path)).createOrReplaceTempView("people")
        return lambda sql: spark.sql(sql).collect()
    conn = duckdb.connect()
    conn.execute(f"CREATE TABLE people AS SELECT * FROM read_parquet('{path}')")
    return lambda sql: conn.execute(sql).fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rows", type=int, nargs="+")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--memory", default="4g", help="Spark driver memory")
    args = parser.parse_args()
    from engine.backends.spark import local_session

    started = time.perf_counter()
    spark = local_session(args.memory)
    session_s = time.perf_counter() - started
    OUT.mkdir(exist_ok=True)
    for rows in args.rows:
        path = parquet_of(rows)
        runs = [bench("duckdb", path, rows, args.reps), bench("spark", path, rows, args.reps, spark)]
        record = {"rows": rows, "session_start_s": session_s, "runs": [asdict(r) for r in runs]}
        (OUT / f"spark_{rows}.json").write_text(json.dumps(record, indent=1))
        print(json.dumps(record, indent=1), flush=True)


if __name__ == "__main__":
    main()
