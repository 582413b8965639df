"""The same workload on DuckDB and on local Spark, over generated Parquet, and the Spark engine
against the plain Spark SQL of the same text, in one run.

    python -m benchmarks.spark 10000000 [100000000 ...] [--policy row_level]

Writes benchmarks/out/spark_<rows>.json (per_unit, the default: the first query bounds each
person's rows) or spark_<rows>_row_level.json (each row one individual: no bounding, so the
figures are the per-query cost alone); `python -m benchmarks.run report` renders them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
from dpsql.engine import PrivateDatabase
from dpsql.engine.policy_yaml import parse_policy

from benchmarks.generate import DATA_DIR, dataset
from benchmarks.workload import EPSILON, TEMPLATES, applies, policy_dict

OUT = Path(__file__).resolve().parent / "out"
SPARK_TEMPLATES = ("count", "filtered_count", "sum", "avg", "grouped_count", "grouped_count_sum_avg",
                   "count_distinct_unit")


@dataclass(frozen=True)
class EngineRun:
    """One engine's times on one dataset (seconds)."""

    engine: str
    rows: int
    policy: str  # per_unit or row_level (benchmarks/workload.py)
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


def bench(engine: str, path: Path, rows: int, reps: int, spark=None,
          policy_name: str = "per_unit") -> EngineRun:
    """Open, first query, then each template `reps` times through the engine and as plain SQL."""
    # Bounding 100M rows on 2 cores takes minutes, and DuckDB holds 100M rows in memory: the
    # time and memory limits are raised for the benchmark.
    policy = parse_policy({**policy_dict(policy_name), "limits": {"time_seconds": 3600,
                                                                  "memory_mb": 16384}})
    templates = [name for name in SPARK_TEMPLATES if applies(name, policy_name)]
    plain = _plain_runner(engine, path, spark)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        db = PrivateDatabase.connect(path, policy, Path(tmp) / "ledger.sqlite", create=True,
                                     engine=engine, spark=spark, reuse=False)  # timed again
        opened = time.perf_counter() - started
        with db:
            started = time.perf_counter()
            db.query(TEMPLATES["count"], epsilon=EPSILON)
            first = time.perf_counter() - started
            engine_s = {name: _median(lambda sql=TEMPLATES[name]: db.query(sql, epsilon=EPSILON), reps)
                        for name in templates}
    plain_s = {name: _median(lambda sql=TEMPLATES[name]: plain(sql), reps) for name in templates}
    return EngineRun(engine, rows, policy_name, opened, first, engine_s, plain_s,
                     {name: engine_s[name] / plain_s[name] for name in templates})


def _plain_runner(engine: str, path: Path, spark):
    """The analyst's text run as it is, without privacy, on the same engine and data."""
    if engine == "spark":
        spark.read.parquet(str(path)).createOrReplaceTempView("people")
        return lambda sql: spark.sql(sql).collect()
    conn = duckdb.connect()
    conn.execute(f"CREATE TABLE people AS SELECT * FROM read_parquet('{path}')")
    return lambda sql: conn.execute(sql).fetchall()


def section(out: Path) -> list[str]:
    """The RESULTS.md section from the stored spark_<rows>.json files."""
    lines = ["## DuckDB and Spark", ""]
    files = sorted(out.glob("spark_*.json"), key=lambda p: (int(p.stem.split("_")[1]), p.stem))
    if not files:
        return lines + ["Not measured in this run.", ""]
    commands = []
    for policy in ("per_unit", "row_level"):
        sizes = " ".join(p.stem.split("_")[1] for p in files
                         if p.stem.endswith("row_level") == (policy == "row_level"))
        if sizes:
            flag = "" if policy == "per_unit" else " --policy row_level"
            commands.append(f"`python -m benchmarks.spark {sizes} --memory 8g{flag}`")
    lines += [f"Commands: {' and '.join(commands)}. The same Parquet file (written by "
              "DuckDB from the generated table), the policy and the same templates on "
              "both engines: `PrivateDatabase.connect(..., engine=\"duckdb\")` (which loads the "
              "Parquet into memory) and `engine=\"spark\"` on a local session (`local[2]`, one "
              "shuffle partition, the driver memory given). Each template's time is the median of 3 "
              "end-to-end queries after the first one, which makes the bounded rows; plain is "
              "the same SQL text without privacy on the same engine (`spark.sql(...).collect()` "
              "over a view of the Parquet; DuckDB over an in-memory table), in the same run.", ""]
    for path in files:
        data = json.loads(path.read_text())
        runs = {r["engine"]: r for r in data["runs"]}
        bounded = runs["duckdb"].get("policy", "per_unit") == "per_unit"
        title = "per_unit policy" if bounded else "row_level policy (each row one individual: no bounding)"
        lines += [f"### {data['rows']:,} rows, {title}", "",
                  f"Load average at the start and end of the run: {data.get('load', '?')}. "
                  f"Spark session start: {data['session_start_s']:.1f} s. Open: DuckDB "
                  f"{runs['duckdb']['open_s']:.1f} s, Spark {runs['spark']['open_s']:.1f} s. First "
                  f"query{' (bounding included)' if bounded else ''}: DuckDB "
                  f"{runs['duckdb']['first_query_s']:.1f} s, Spark {runs['spark']['first_query_s']:.1f} s.",
                  "",
                  "| template | DuckDB engine s | DuckDB plain s | ratio | Spark engine s | "
                  "Spark plain s | ratio | Spark / DuckDB (engine) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name in runs["duckdb"]["template_s"]:
            d, sp = runs["duckdb"], runs["spark"]
            lines.append(f"| {name} | {d['template_s'][name]:.3f} | {d['plain_s'][name]:.3f} | "
                         f"{d['ratio'][name]:.2f} | {sp['template_s'][name]:.3f} | "
                         f"{sp['plain_s'][name]:.3f} | {sp['ratio'][name]:.2f} | "
                         f"{sp['template_s'][name] / d['template_s'][name]:.1f} |")
        lines.append("")
        speed = [sp["template_s"][n] / d["template_s"][n] for n in d["template_s"]]
        once = (f", and {runs['spark']['first_query_s'] / runs['duckdb']['first_query_s']:.0f} "
                "times as long for the one-time bounding") if bounded else ""
        lines += [f"At {data['rows']:,} rows the Spark engine took {min(speed):.1f} to "
                  f"{max(speed):.1f} times as long as the DuckDB engine per query{once}; against "
                  "plain Spark SQL on the same session its ratio was "
                  f"{min(sp['ratio'].values()):.2f} to {max(sp['ratio'].values()):.2f}.", ""]
    done = {int(p.stem.split("_")[1]) for p in files if not p.stem.endswith("row_level")}
    if 100_000_000 not in done:
        lines += ["100,000,000 rows: not run. On this machine (2 cores shared with other jobs, load "
                  "average about 12 during the 10M run) the 10M Spark bounding step alone took the "
                  "time given above, so 100M would have taken hours; no figure is given.", ""]
    lines += [
        "Tumult Analytics: `pip install tmlt.analytics` resolves to tmlt.analytics 0.21.0 with "
        "pyspark 3.5.9 and pandas 1.5.3, so it cannot run on this pyspark 4 session (nor in this "
        "environment, which needs pandas >= 2.2); it was not measured.", "",
        "Where a cluster would cross over: the DuckDB engine's time is its scan of the data on "
        "one machine; the Spark engine's is a fixed cost per query (job scheduling and code "
        "generation: 0.2 to 0.4 s here for COUNT(*), which reads Parquet statistics) plus the "
        "scan spread over the cluster's cores. On the same 2 cores the scan-bound templates "
        "(sum, avg, grouped) at 100M rows took Spark 1.6 to 2.9 times DuckDB's time without "
        "bounding and 4.6 to 24 times with it, and the one-time bounding 6 times (one shuffle "
        "partition sorts on one core). So a cluster matches one DuckDB machine on these "
        "aggregates at roughly that factor in cores, before the fixed cost, which stays. Spark "
        "wins on size, not speed: once the table (and the bounded copy, which the DuckDB engine "
        "keeps in memory: 100M rows needed a memory limit above the default 4,096 MB) no longer "
        "fits the memory of the largest single machine available, or when the data already "
        "lives in a Spark cluster and exporting it would cost more than that factor.", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rows", type=int, nargs="+")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--memory", default="4g", help="Spark driver memory")
    parser.add_argument("--policy", choices=("per_unit", "row_level"), default="per_unit",
                        help="per_unit bounds each person's rows on the first query; row_level "
                             "measures the per-query cost alone")
    args = parser.parse_args()
    from dpsql.engine.backends.spark_session import local_session

    started = time.perf_counter()
    spark = local_session(args.memory)
    session_s = time.perf_counter() - started
    OUT.mkdir(exist_ok=True)
    for rows in args.rows:
        path = parquet_of(rows)
        load = os.getloadavg()[0]
        runs = [bench("duckdb", path, rows, args.reps, policy_name=args.policy),
                bench("spark", path, rows, args.reps, spark, args.policy)]
        record = {"rows": rows, "session_start_s": session_s, "runs": [asdict(r) for r in runs],
                  "load": f"{load:.1f} and {os.getloadavg()[0]:.1f}"}
        suffix = "" if args.policy == "per_unit" else f"_{args.policy}"
        (OUT / f"spark_{rows}{suffix}.json").write_text(json.dumps(record, indent=1))
        print(json.dumps(record, indent=1), flush=True)


if __name__ == "__main__":
    main()
