"""What one step of a query costs alone in a tight loop against after other work, as it runs
inside a query: DuckDB's `SELECT 1` and `COUNT(*)` on a table, an sqlite read and a json.dumps
of a stored answer's size, each timed right after 0, 1 and 4 ms of busy Python. The parts of a
warm query measured one by one in tight loops add up to less than the query takes end to end;
this says by how much each step slows when it does not follow itself.

Run: `python -m benchmarks.interleaved_cost [--rows 10000000] [--repeats 400]`. Prints a
Markdown section.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

GAPS_MS = (0.0, 1.0, 4.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as work:
        data = Path(work) / "people.duckdb"
        with duckdb.connect(str(data)) as conn:
            conn.execute(f"CREATE TABLE people AS SELECT i % 111 AS age FROM range({args.rows}) t(i)")
        duck = duckdb.connect(str(data), read_only=True)
        lite = sqlite3.connect(Path(work) / "ledger.sqlite")
        lite.execute("CREATE TABLE totals (scope TEXT PRIMARY KEY, spent REAL)")
        lite.executemany("INSERT INTO totals VALUES (?, ?)", [(f"s{i}", i / 3) for i in range(1000)])
        answer = {"rows": [[f"R{i:02d}", i * 17, i * 0.25] for i in range(40)],
                  "columns": ["region", "n", "mean"], "epsilon": 1.0}
        steps: dict[str, Callable[[], object]] = {
            "DuckDB: SELECT 1": lambda: duck.execute("SELECT 1").fetchall(),
            f"DuckDB: COUNT(*) of {args.rows:,} rows":
                lambda: duck.execute("SELECT COUNT(*) FROM people").fetchall(),
            "sqlite: one row by key": lambda: lite.execute(
                "SELECT spent FROM totals WHERE scope = ?", ["s500"]).fetchone(),
            f"json.dumps of {len(json.dumps(answer)):,} characters": lambda: json.dumps(answer),
        }
        timed = {name: [_after(step, gap / 1000, args.repeats) for gap in GAPS_MS]
                 for name, step in steps.items()}
        duck.close()
        lite.close()
    print(f"### One step of a query alone and after other work ({args.rows:,} rows)\n")
    print(f"Command: `python -m benchmarks.interleaved_cost --rows {args.rows} --repeats "
          f"{args.repeats}` (load average {load:.1f} at its start, {os.cpu_count()} cores)\n")
    print("| step | " + " | ".join(f"after {gap:g} ms, ms" for gap in GAPS_MS)
          + f" | after {GAPS_MS[-1]:g} / after 0 |")
    print("|---|" + "---:|" * (len(GAPS_MS) + 1))
    for name, medians in timed.items():
        print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in medians)
              + f" | {medians[-1] / medians[0]:.2f} |")
    print(f"\nMedians of {args.repeats} runs; each run times the step alone, right after "
          "spinning in Python for the stated time (0: the step follows itself).")


def _after(step: Callable[[], object], gap: float, repeats: int) -> float:
    """Median milliseconds of `step` run right after `gap` seconds of busy Python."""
    times = []
    for _ in range(repeats + 20):
        until = time.perf_counter() + gap
        while time.perf_counter() < until:
            pass
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[20:]) * 1000


if __name__ == "__main__":
    main()
