"""Memory on large tables under the per-unit policy, each step in a new process that reports its
own peak resident memory (VmHWM): either the query process bounds the table in memory
(`--prepared` off), or the owner's `dpsql prepare` step writes the bounded copy beside the
ledger first and the query process attaches it. Every template is answered once; the bounded
copy's footprint (in memory, or its file) is compared with the table's own compressed size.

Run: `python -m benchmarks.memory_large --rows 50000000 100000000 [--memory-mb 4096]
[--prepared]`. Prints a Markdown section for benchmarks/RESULTS.md.
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


def _policy(memory_mb: int) -> dict:
    return {**policy_dict("per_unit"), "limits": {"memory_mb": memory_mb, "time_seconds": 600}}


def child_query(path: str, ledger: str, memory_mb: int, create: bool) -> None:
    """In this process: answer each template once (bounding first unless a prepared copy is
    attached), print what was measured as JSON."""
    import duckdb
    from dpsql.engine import PrivateDatabase
    from dpsql.engine.policy_yaml import parse_policy

    policy = parse_policy(_policy(memory_mb))
    with PrivateDatabase.connect(path, policy, ledger, create=create, reuse=False) as db:
        start = time.perf_counter()
        db.query(TEMPLATES["count"], EPSILON)
        first = time.perf_counter() - start
        seconds = {}
        for name, sql in TEMPLATES.items():
            start = time.perf_counter()
            db.query(sql, EPSILON)
            seconds[name] = time.perf_counter() - start
        conn = db._backend.conn
        copy_bytes = conn.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                                  "WHERE tag = 'IN_MEMORY_TABLE'").fetchall()[0][0]
        kept = conn.execute("SELECT count(*) FROM dpsql_bounded.main.people").fetchall()[0][0]
    with duckdb.connect(path, read_only=True) as conn:
        blocks, block_size = conn.execute(
            "SELECT used_blocks, block_size FROM pragma_database_size() "
            "WHERE database_name = current_database()").fetchall()[0]
    print(json.dumps({"first_query_s": first, "seconds": seconds, "copy_bytes": copy_bytes,
                      "kept_rows": kept, "table_bytes": blocks * block_size, "peak_mb": peak_mb()}))


def child_prepare(path: str, ledger: str, memory_mb: int) -> None:
    """In this process: create the ledger and run the owner's prepare step, as `dpsql prepare`."""
    from dpsql.engine.accounting.ledger import Ledger
    from dpsql.engine.accounting.ledger_binding import binding_of
    from dpsql.engine.backends.duckdb import DuckDBBackend
    from dpsql.engine.policy_yaml import parse_policy

    policy = parse_policy(_policy(memory_mb))
    book = Ledger(ledger, binding_of(policy), create=True)
    try:
        copies = DuckDBBackend.prepare_copies(path, policy, ledger, book.hash_key)
    finally:
        book.close()
    print(json.dumps({"file_bytes": sum(c.bytes for c in copies),
                      "seconds": sum(c.seconds for c in copies), "peak_mb": peak_mb()}))


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM). Not wait4's ru_maxrss: Linux carries the
    parent's high-water mark into a child it spawns, and the parent read the table."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _run(*args: str) -> tuple[dict, float]:
    """A child's report (with its own peak memory) and its wall seconds."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "benchmarks.memory_large", *args],
                              stdout=out, stderr=err, check=False)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)}: failed\n{err.read().decode()}")
        return json.loads(out.read().decode().strip().splitlines()[-1]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[50_000_000, 100_000_000])
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="the policy's limits.memory_mb (DuckDB's memory limit)")
    parser.add_argument("--prepared", action="store_true",
                        help="run the owner's prepare step first, in its own process")
    parser.add_argument("--child", nargs=3, metavar=("STEP", "DATA", "LEDGER"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, path, ledger = args.child
        if step == "prepare":
            child_prepare(path, ledger, args.memory_mb)
        else:
            child_query(path, ledger, args.memory_mb, create=step == "bound")
        return
    lines = []
    for rows in args.rows:
        data = dataset(rows)
        with tempfile.TemporaryDirectory() as work:
            ledger = str(Path(work) / "ledger.sqlite")
            limit = ["--memory-mb", str(args.memory_mb)]
            prepared = ""
            if args.prepared:
                made, _ = _run("--child", "prepare", str(data.path), ledger, *limit)
                prepared = (f"{made['seconds']:.1f} | {made['peak_mb']:,.0f} | "
                            f"{made['file_bytes'] / 2**20:,.0f} | ")
                print(f"{rows} prepare: {json.dumps(made)}", file=sys.stderr, flush=True)
            report, wall = _run("--child", "attach" if args.prepared else "bound",
                                str(data.path), ledger, *limit)
        print(f"{rows}: {json.dumps(report)}", file=sys.stderr, flush=True)
        lines.append(
            f"| {rows:,} | {prepared}{wall:.1f} | {report['first_query_s']:.1f} | "
            f"{max(report['seconds'].values()):.1f} | {report['peak_mb']:,.0f} | {report['kept_rows']:,} | "
            f"{report['copy_bytes'] / 2**20:,.0f} | {report['table_bytes'] / 2**20:,.0f} | "
            f"{os.getloadavg()[0]:.1f} |")
    print(f"Command: `python -m benchmarks.memory_large --rows {' '.join(map(str, args.rows))} "
          f"--memory-mb {args.memory_mb}{' --prepared' if args.prepared else ''}`\n")
    head = "| rows | "
    if args.prepared:
        head += "prepare s | prepare peak RSS MB | prepared copy on disk MB | "
    head += ("query process s | first query s | slowest template s | query process peak RSS MB | "
             "kept rows | bounded copy in memory MB | table on disk MB | load average |")
    print(head)
    print("|" + "---:|" * (head.count("|") - 1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
