"""Memory on large tables under the per-unit policy: each size in a new process, which bounds the
table (no prepared copy), answers every template once, and reports its peak resident memory,
the bounded copy's footprint in memory and the table's own compressed size on disk.

Run: `python -m benchmarks.memory_large --rows 50000000 100000000 [--memory-mb 4096]`. Prints
a Markdown section for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.generate import dataset
from benchmarks.workload import EPSILON, TEMPLATES, policy_dict


def child(path: str, memory_mb: int) -> None:
    """In this process: bound, answer each template once, print what was measured as JSON."""
    import duckdb

    from engine import PrivateDatabase
    from engine.policy import parse_policy

    policy = parse_policy({**policy_dict("per_unit"),
                           "limits": {"memory_mb": memory_mb, "time_seconds": 600}})
    with tempfile.TemporaryDirectory() as tmp, \
            PrivateDatabase.connect(path, policy, Path(tmp) / "ledger.sqlite", create=True) as db:
        start = time.perf_counter()
        db.query(TEMPLATES["count"], EPSILON)
        first = time.perf_counter() - start
        seconds = {}
        for name, sql in TEMPLATES.items():
            start = time.perf_counter()
            db.query(sql, EPSILON)
            seconds[name] = time.perf_counter() - start
        conn = db._backend.conn
        copy_bytes = conn.execute("SELECT memory_usage_bytes FROM duckdb_memory() "
                                  "WHERE tag = 'IN_MEMORY_TABLE'").fetchall()[0][0]
        kept = conn.execute("SELECT count(*) FROM dpsql_bounded.main.people").fetchall()[0][0]
    with duckdb.connect(path, read_only=True) as conn:
        blocks, block_size = conn.execute(
            "SELECT used_blocks, block_size FROM pragma_database_size() "
            "WHERE database_name = current_database()").fetchall()[0]
    print(json.dumps({"first_query_s": first, "seconds": seconds, "copy_bytes": copy_bytes,
                      "kept_rows": kept, "table_bytes": blocks * block_size}))


def _run(path: Path, memory_mb: int) -> tuple[dict, float, float]:
    """The child's report, its wall seconds and its peak resident memory in MB (from wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.memory_large", "--child", str(path),
                             "--memory-mb", str(memory_mb)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read().decode() if proc.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"{path}: failed\n{err}")
    return json.loads(out.strip().splitlines()[-1]), wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[50_000_000, 100_000_000])
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="the policy's limits.memory_mb (DuckDB's memory limit)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.memory_mb)
        return
    lines = []
    for rows in args.rows:
        data = dataset(rows)
        report, wall, peak = _run(data.path, args.memory_mb)
        load = os.getloadavg()[0]
        lines.append(
            f"| {rows:,} | {wall:.1f} | {report['first_query_s']:.1f} | "
            f"{max(report['seconds'].values()):.1f} | {peak:,.0f} | {report['kept_rows']:,} | "
            f"{report['copy_bytes'] / 2**20:,.0f} | {report['table_bytes'] / 2**20:,.0f} | "
            f"{load:.1f} |")
        print(f"{rows}: {json.dumps(report)}", file=sys.stderr, flush=True)
    print(f"Command: `python -m benchmarks.memory_large --rows {' '.join(map(str, args.rows))} "
          f"--memory-mb {args.memory_mb}`\n")
    print("| rows | process s | first query s (bounding) | slowest template s | peak RSS MB | "
          "kept rows | bounded copy in memory MB | table on disk MB | load average |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
