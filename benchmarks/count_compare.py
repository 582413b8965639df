"""A warm COUNT(*) end to end on this checkout's engine and on another checkout's (e.g. the engine
as it was when a target was set, from `git worktree add` or `git archive`), each in a process of
its own, alternating, with DuckDB's own COUNT(*) timed in the same rounds: milliseconds measured
on a shared machine follow its speed at the minute, and the other engine's figure in the same
rounds says how fast the machine was against the day that engine was measured.

Each process opens a fresh ledger, answers `--warm` queries, then times `--queries` more (the
ledger stays small, so an engine whose cost grows with the ledger is measured near empty).

Run: `python -m benchmarks.count_compare --compare DIR [--rows 10000000] [--rounds 6]
[--queries 100]`. Prints a Markdown section.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.cli_imports import layout
from benchmarks.generate import patterned
from benchmarks.workload import policy_dict

WORKER = """import inspect, statistics, sys, time
from pathlib import Path
from dpsql import PrivateDatabase
data, policy, ledger, warm, queries = sys.argv[1:6]
asked = {"reuse": False} if "reuse" in inspect.signature(PrivateDatabase.connect).parameters else {}
db = PrivateDatabase.connect(Path(data), Path(policy), Path(ledger), create=True, **asked)
sql = "SELECT COUNT(*) AS n FROM people"
for _ in range(int(warm)):
    db.query(sql, epsilon=1e-6)
duck = db._backend.conn
wall, cpu, plain = [], [], []
for _ in range(int(queries)):
    start, used = time.perf_counter(), time.process_time()
    db.query(sql, epsilon=1e-6)
    wall.append(time.perf_counter() - start)
    cpu.append(time.process_time() - used)
    start = time.perf_counter()
    duck.execute("SELECT COUNT(*) FROM people").fetchall()
    plain.append(time.perf_counter() - start)
db.close()
print(*(statistics.median(v) * 1000 for v in (wall, cpu, plain)))
"""
"""Run under a checkout's layout: medians of one process's warm COUNT(*), wall and CPU, and of
DuckDB's own COUNT(*) in the same rounds, in ms."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compare", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    trees = {"this checkout": layout(here), f"{args.compare}": layout(args.compare.resolve())}
    loads = [os.getloadavg()[0]]
    results: dict[str, list[list[float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as work:
        data, policy = patterned(Path(work) / "people.duckdb", args.rows), Path(work) / "policy.yaml"
        policy.write_text(yaml.safe_dump(policy_dict("row_level")))
        for round_ in range(args.rounds):
            order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
            for name, tree in order:
                ledger = Path(work) / f"ledger-{round_}-{list(trees).index(name)}.sqlite"
                env = {**os.environ, "PYTHONPATH": str(tree)}
                out = subprocess.run(
                    [sys.executable, "-c", WORKER, str(data), str(policy), str(ledger),
                     str(args.warm), str(args.queries)],
                    capture_output=True, text=True, check=True, env=env, cwd=work).stdout
                results[name].append([float(v) for v in out.split()])
    loads.append(os.getloadavg()[0])
    print(f"### Warm COUNT(*) against another engine, alternating ({args.rows:,} rows)\n")
    print(f"Command: `python -m benchmarks.count_compare --compare {args.compare} --rows "
          f"{args.rows} --rounds {args.rounds} --queries {args.queries}` (load average "
          f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores)\n")
    print("| engine | median ms per query | per process | CPU ms | DuckDB's own COUNT(*) ms |")
    print("|---|---:|---|---:|---:|")
    for name, runs in results.items():
        walls = [r[0] for r in runs]
        print(f"| {name} | {statistics.median(walls):.2f} | "
              f"{', '.join(f'{w:.2f}' for w in walls)} | "
              f"{statistics.median(r[1] for r in runs):.2f} | "
              f"{statistics.median(r[2] for r in runs):.2f} |")
    mine, other = (statistics.median(r[0] for r in runs) for runs in results.values())
    print(f"\nEach process: a fresh ledger, {args.warm} queries to warm up, then the median of "
          f"{args.queries} (so at most {args.warm + args.queries} answers stored). The other "
          f"engine took {other / mine:.2f}x this one's time in the same rounds.")


if __name__ == "__main__":
    main()
