"""TPC-H with the customer as the privacy unit: plain DuckDB against dpsql, side by side in one run.

Data from `tpchgen-cli` (`pip install -e .[bench]`), loaded into one DuckDB file; the policy is
benchmarks/tpch_policy.yaml (orders reach the customer through o_custkey, line items through
their order). For each query: plain DuckDB (median of `--repeats` runs after one warm-up), dpsql
on a warm connection (median, end to end with the durable charge), the one-time bounding of the
tables it reads (apart), and each answer's largest relative error over its cells at epsilon 1
with how many runs' answers lay inside their 95% intervals of the exact SQL answer.

With `--prepare` (the default from scale 10), the owner's one-time step is `dpsql prepare` (run as
the command, timed apart): it writes the bounded copy of every table, which the joined tables of
Q5 read; each query's FROM table is still bounded for the columns it reads on the connection's
first query reading them (docs/theory.md §28), also timed apart, per query.

Run: `python -m benchmarks.tpch --scale 1 [--repeats 5] [--folder DIR] [--prepare]`. Prints a
Markdown section for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.policy_yaml import load_policy
from dpsql.engine.result import QueryResult
from dpsql.engine.rewrite import copies_to_bound

POLICY = Path(__file__).resolve().parent / "tpch_policy.yaml"
TABLES = ("customer", "orders", "lineitem", "part", "supplier", "nation", "region")
EPSILON = 1.0

_REVENUE = "SUM(l_extendedprice * (1 - l_discount))"
QUERIES = {
    "Q1": "SELECT l_returnflag, l_linestatus, SUM(l_quantity) AS sum_qty, SUM(l_extendedprice) AS "
          f"sum_base_price, {_REVENUE} AS sum_disc_price, SUM(l_extendedprice * (1 - l_discount) * "
          "(1 + l_tax)) AS sum_charge, AVG(l_quantity) AS avg_qty, AVG(l_extendedprice) AS "
          "avg_price, AVG(l_discount) AS avg_disc, COUNT(*) AS count_order FROM lineitem WHERE "
          "l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus "
          "ORDER BY l_returnflag, l_linestatus",
    "Q6": "SELECT SUM(l_extendedprice * l_discount) AS revenue FROM lineitem WHERE l_shipdate >= "
          "DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND "
          "0.07 AND l_quantity < 24",
    "Q14": "SELECT 100.00 * SUM(CASE WHEN p_type LIKE 'PROMO%' THEN l_extendedprice * (1 - "
           f"l_discount) ELSE 0 END) / {_REVENUE} AS promo_revenue FROM lineitem JOIN part ON "
           "l_partkey = p_partkey WHERE l_shipdate >= DATE '1995-09-01' AND l_shipdate < "
           "DATE '1995-10-01'",
    "Q19": f"SELECT {_REVENUE} AS revenue FROM lineitem JOIN part ON p_partkey = l_partkey WHERE "
           "(p_brand = 'Brand#12' AND p_container IN ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG') "
           "AND l_quantity >= 1 AND l_quantity <= 11 AND p_size BETWEEN 1 AND 5 AND l_shipmode "
           "IN ('AIR', 'AIR REG') AND l_shipinstruct = 'DELIVER IN PERSON') OR (p_brand = "
           "'Brand#23' AND p_container IN ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK') AND "
           "l_quantity >= 10 AND l_quantity <= 20 AND p_size BETWEEN 1 AND 10 AND l_shipmode IN "
           "('AIR', 'AIR REG') AND l_shipinstruct = 'DELIVER IN PERSON') OR (p_brand = 'Brand#34' "
           "AND p_container IN ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG') AND l_quantity >= 20 AND "
           "l_quantity <= 30 AND p_size BETWEEN 1 AND 15 AND l_shipmode IN ('AIR', 'AIR REG') AND "
           "l_shipinstruct = 'DELIVER IN PERSON')",
}
# Q5 joins along the whole chain and to three lookup tables (lineitem ⋈ orders ⋈ customer ⋈
# supplier ⋈ nation ⋈ region, docs/theory.md §25), written with JOIN ... ON and with commas.
_Q5_WHERE = ("r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE "
             "'1995-01-01' GROUP BY n_name ORDER BY revenue DESC")
QUERIES["Q5"] = (f"SELECT n_name, {_REVENUE} AS revenue FROM customer JOIN orders ON c_custkey = "
                 "o_custkey JOIN lineitem ON l_orderkey = o_orderkey JOIN supplier ON l_suppkey = "
                 "s_suppkey AND c_nationkey = s_nationkey JOIN nation ON s_nationkey = n_nationkey "
                 f"JOIN region ON n_regionkey = r_regionkey WHERE {_Q5_WHERE}")
QUERIES["Q5 (commas)"] = (f"SELECT n_name, {_REVENUE} AS revenue FROM customer, orders, lineitem, "
                          "supplier, nation, region WHERE c_custkey = o_custkey AND l_orderkey = "
                          "o_orderkey AND l_suppkey = s_suppkey AND c_nationkey = s_nationkey AND "
                          "s_nationkey = n_nationkey AND n_regionkey = r_regionkey AND "
                          f"{_Q5_WHERE}")
GROUP_KEYS = {"Q1": 2, "Q5": 1, "Q5 (commas)": 1}
"""The leading group-key columns of a query's answer (the others are noisy)."""

NEEDS_JOINS: dict[str, str] = {}
"""Queries reported with the reason they are refused instead of measured (none at present)."""


def generator() -> str:
    """The tpchgen-cli program (beside this Python, else on PATH), or an error saying how to
    install it."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    found = str(beside) if beside.is_file() else shutil.which("tpchgen-cli")
    if found is None:
        raise SystemExit("tpchgen-cli not found: pip install -e .[bench]")
    return found


def generate(scale: float, folder: Path) -> Path:
    """The DuckDB file of TPC-H at `scale` in `folder`, generated (Parquet) and loaded once."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / f"tpch-sf{scale:g}.duckdb"
    if db.is_file():
        return db
    parquet = folder / f"sf{scale:g}"
    subprocess.run([generator(), "parquet", "-s", f"{scale:g}", "--output-dir", str(parquet),
                    "--overwrite"], check=True, capture_output=True)
    writing = folder / f".{db.name}.writing"
    writing.unlink(missing_ok=True)
    with duckdb.connect(str(writing)) as conn:
        for table in TABLES:
            conn.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet(?)",
                         [str(parquet / f"{table}.parquet")])
    os.replace(writing, db)
    shutil.rmtree(parquet)
    return db


def maxima(db: Path) -> tuple[int, int, int]:
    """The data's most orders per customer, line items per customer and line items per order."""
    with duckdb.connect(str(db), read_only=True) as conn:
        return tuple(conn.execute(
            "SELECT (SELECT max(n) FROM (SELECT count(*) n FROM orders GROUP BY o_custkey)), "
            "(SELECT max(n) FROM (SELECT count(*) n FROM lineitem JOIN orders ON l_orderkey = "
            "o_orderkey GROUP BY o_custkey)), "
            "(SELECT max(n) FROM (SELECT count(*) n FROM lineitem GROUP BY l_orderkey))").fetchone())


@dataclass(frozen=True)
class Accuracy:
    """How one answer compares with the exact SQL answer."""

    relative_error: float  # largest |noisy - exact| / |exact| over cells whose exact value is not 0
    inside: int  # cells within their 95% interval of the exact value
    cells: int  # cells with an interval
    bare: int  # cells shown without an interval (a ratio whose divisor's interval reaches 0)


def accuracy(result: QueryResult, exact: list[tuple], keys: int) -> Accuracy:
    """Match the answer's groups to the exact rows (a group the data does not hold is 0 for a
    SUM or COUNT and has no AVG) and compare each noisy cell."""
    truth = {tuple(row[:keys]): row[keys:] for row in exact}
    worst, inside, cells, bare = 0.0, 0, 0, 0
    for (_, noisy), (_, half) in zip(result.df.iterrows(), result.ci95.iterrows(), strict=True):
        values = truth.get(tuple(noisy.iloc[:keys]), (None,) * (len(noisy) - keys))
        for i, value in enumerate(values):
            if value is None and result.df.columns[keys + i].startswith("avg"):
                continue
            cell, width = float(noisy.iloc[keys + i]), float(half.iloc[keys + i])
            exact_value = 0.0 if value is None else float(value)
            if math.isnan(width):
                bare += 1
            else:
                cells += 1
                inside += abs(cell - exact_value) <= width
            if exact_value != 0:
                worst = max(worst, abs(cell - exact_value) / abs(exact_value))
    return Accuracy(worst, inside, cells, bare)


def _ms(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


@dataclass(frozen=True)
class Row:
    """One query's figures."""

    query: str
    plain_ms: float
    dpsql_ms: float
    errors: tuple[float, ...]
    inside: int  # cells within their intervals, over all runs
    cells: int  # cells with an interval, over all runs
    bare: int  # cells without one, over all runs
    bounding_s: float  # the copies it reads that were not made yet, bounded on the connection


def prepared(db: Path, ledger: Path) -> float:
    """Create the ledger and run `dpsql prepare` on it, as the owner does; its seconds."""
    cli = [sys.executable, "-m", "dpsql.engine.cli"]
    subprocess.run([*cli, "ledger", "init", "--ledger", str(ledger), "--policy", str(POLICY)],
                   check=True, capture_output=True)
    start = time.perf_counter()
    subprocess.run([*cli, "prepare", "--db", str(db), "--policy", str(POLICY), "--ledger",
                    str(ledger)], check=True, capture_output=True)
    return time.perf_counter() - start


def measure(db: Path, repeats: int, prepare: bool) -> tuple[list[Row], float | None, dict[str, str]]:
    """Each query's row, the seconds `dpsql prepare` took (None: not run) and the queries that
    are refused (with why)."""
    policy = load_policy(POLICY)
    # DuckDB shares one instance per file in a process, and dpsql's is locked down: plain DuckDB
    # reads a copy of the file.
    twin = db.with_name(f"{db.stem}-plain.duckdb")
    if not twin.is_file():
        shutil.copyfile(db, twin)
    plain = duckdb.connect(str(twin), read_only=True)
    rows, refused = [], {}
    with tempfile.TemporaryDirectory(dir=db.parent) as tmp:
        ledger = Path(tmp) / "ledger.sqlite"
        preparing = prepared(db, ledger) if prepare else None
        with PrivateDatabase.connect(db, policy, ledger, create=not prepare,
                                     reuse=False) as conn:  # timed again: charged
            for name, sql in QUERIES.items():
                rows.append(_row(conn, plain, name, sql, repeats))
            for name, sql in NEEDS_JOINS.items():
                try:
                    conn.explain(sql, EPSILON)
                except QueryRefused as exc:
                    refused[name] = str(exc)
    plain.close()
    return rows, preparing, refused


def _row(conn: PrivateDatabase, plain: duckdb.DuckDBPyConnection, name: str, sql: str,
         repeats: int) -> Row:
    """One query measured: the bounding of the copies it reads (those not made yet), then
    plain DuckDB and dpsql warm, alternately."""
    start = time.perf_counter()
    for table, columns in copies_to_bound(conn._preparer.prepare(sql, EPSILON, None).plan):
        conn._backend.bound(table, conn.ledger.hash_key, columns)
    bounding = time.perf_counter() - start
    exact = plain.execute(sql).fetchall()
    conn.query(sql, EPSILON)  # warm-up: the plan is cached as any repeated query's
    plain_times: list[float] = []
    dpsql_times: list[float] = []
    found: list[Accuracy] = []
    for _ in range(repeats):
        plain_times.append(_ms(lambda sql=sql: plain.execute(sql).fetchall()))
        start = time.perf_counter()
        result = conn.query(sql, EPSILON)
        dpsql_times.append((time.perf_counter() - start) * 1e3)
        found.append(accuracy(result, exact, GROUP_KEYS.get(name, 0)))
    return Row(name, statistics.median(plain_times), statistics.median(dpsql_times),
               tuple(a.relative_error for a in found), sum(a.inside for a in found),
               sum(a.cells for a in found), sum(a.bare for a in found), bounding)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "dpsql-tpch")
    parser.add_argument("--prepare", action=argparse.BooleanOptionalAction, default=None,
                        help="bound every table once with dpsql prepare first (default: from "
                             "scale 10)")
    args = parser.parse_args()
    prepare = args.prepare if args.prepare is not None else args.scale >= 10
    started = time.perf_counter()
    db = generate(args.scale, args.folder)
    made = time.perf_counter() - started
    orders, lines, per_order = maxima(db)
    load = os.getloadavg()[0]
    rows, preparing, refused = measure(db, args.repeats, prepare)
    flag = " --prepare" if prepare and args.scale < 10 else ""
    print(f"Command: `python -m benchmarks.tpch --scale {args.scale:g} --repeats {args.repeats}{flag}` "
          f"(load average {load:.1f} to {os.getloadavg()[0]:.1f} on 2 cores; data generated and "
          f"loaded in {made:.0f} s)\n")
    print(f"The data holds at most {orders} orders and {lines} line items per customer and "
          f"{per_order} line items per order; the policy bounds them at 60 and 420.\n")
    print("| query | plain DuckDB ms | dpsql warm ms | dpsql / plain | largest relative error "
          "of a cell at ε = 1 (median, max of runs) | cells inside their 95% interval | "
          "one-time bounding of the copies it reads, s |")
    print("|---|---:|---:|---:|---|---|---:|")
    for row in rows:
        bare = f" ({row.bare} shown without one)" if row.bare else ""
        print(f"| {row.query} | {row.plain_ms:.1f} | {row.dpsql_ms:.1f} | "
              f"{row.dpsql_ms / row.plain_ms:.2f} | {statistics.median(row.errors):.2e}, "
              f"{max(row.errors):.2e} | {row.inside} of {row.cells}{bare} | {row.bounding_s:.1f} |")
    print("\nThe last column is the bounding a connection does for a query's first run, apart from "
          "the warm times: the copies of the columns it reads that no earlier query or `dpsql "
          "prepare` made (docs/theory.md §28); 0.0 when they were made already.")
    if preparing is not None:
        print(f"\n`dpsql prepare` (the owner's one-time step, every table's bounded copy of every "
              f"column, as a command): {preparing:.1f} s.")
    for name, why in refused.items():
        print(f"\n{name} is not run yet: {why}")


if __name__ == "__main__":
    main()
