"""The TPC-H queries' rewritten SQL alone against plain DuckDB: where dpsql's overhead on the data is.

For each query of benchmarks/tpch.py: the exact SQL dpsql runs (over the bounded copies, made
first and not timed) and the analyst's SQL in plain DuckDB, on the same data in one process,
one after the other; the CPU time of the process (all DuckDB threads) per run, median of `--repeats`,
which a loaded machine disturbs less than wall time. No planning, noise or ledger: for the end
to end figures run benchmarks/tpch.py.

Run: `python -m benchmarks.tpch_sql --scale 1 [--repeats 7] [--folder DIR] [--explain Q1]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
from dpsql.engine import PrivateDatabase
from dpsql.engine.policy_yaml import load_policy
from dpsql.engine.rewrite import copies_to_bound

from benchmarks.tpch import EPSILON, POLICY, QUERIES, generate


def _cpu_ms(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "dpsql-tpch")
    parser.add_argument("--explain", default=None, help="print EXPLAIN ANALYZE of this query's "
                        "rewritten SQL and of its plain SQL")
    args = parser.parse_args()
    db = generate(args.scale, args.folder)
    twin = db.with_name(f"{db.stem}-plain.duckdb")  # plain DuckDB reads a copy (see tpch.py)
    plain = duckdb.connect(str(twin), read_only=True) if twin.is_file() else None
    if plain is None:
        raise SystemExit(f"run benchmarks.tpch at this scale first (it makes {twin})")
    load = os.getloadavg()[0]
    print("| query | plain DuckDB CPU ms | rewritten SQL CPU ms | ratio |\n|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp, \
            PrivateDatabase.connect(db, load_policy(POLICY), Path(tmp) / "ledger.sqlite",
                                    create=True) as conn:
        backend = conn._backend
        for name, sql in QUERIES.items():
            prepared = conn._preparer.prepare(sql, EPSILON, None)
            for table, columns in copies_to_bound(prepared.plan):
                backend.bound(table, conn.ledger.hash_key, columns)
            rewritten = prepared.sql
            backend.conn.execute(rewritten).fetchall()
            plain.execute(sql).fetchall()
            ours = _cpu_ms(lambda q=rewritten: backend.conn.execute(q).fetchall(), args.repeats)
            theirs = _cpu_ms(lambda q=sql: plain.execute(q).fetchall(), args.repeats)
            print(f"| {name} | {theirs:.0f} | {ours:.0f} | {ours / theirs:.2f} |")
            if name == args.explain:
                for text, con in ((rewritten, backend.conn), (sql, plain)):
                    print(con.execute(f"EXPLAIN ANALYZE {text}").fetchall()[0][1])
    plain.close()
    print(f"\nCommand: `python -m benchmarks.tpch_sql --scale {args.scale:g} --repeats "
          f"{args.repeats}` (load average {load:.1f} to {os.getloadavg()[0]:.1f} on 2 cores)")


if __name__ == "__main__":
    main()
