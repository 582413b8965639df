"""MEDIAN and a grouped percentile against plain DuckDB's own MEDIAN and QUANTILE_CONT, on warm
connections, with the rewritten SQL (the one-pass histogram) timed on its own.

Run: `python -m benchmarks.quantile_speed --rows 10000000 [--repeats 9] [--clock cpu]`. Prints
a Markdown section for benchmarks/RESULTS.md. `--clock cpu` times the process's CPU (DuckDB's
threads included) instead of the wall clock: on a machine others load, its ratios move less,
but it leaves out waiting (the durable charge's fsync).
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks import speed_warm
from benchmarks.generate import dataset

QUERIES = {
    "median": "SELECT MEDIAN(income) AS m FROM people",
    "grouped_percentile": "SELECT region, QUANTILE_CONT(income, 0.9) AS p90 FROM people "
                          "GROUP BY region",
    "min_max_age": "SELECT MIN(age) AS lo, MAX(age) AS hi FROM people",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--policies", nargs="+", default=["row_level", "per_unit"])
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    data = dataset(args.rows)
    lines, loads = [], [os.getloadavg()[0]]
    for policy in args.policies:
        for name, p, r, e in speed_warm.measure(data.path, policy, args.repeats, QUERIES,
                                                   clock):
            lines.append(f"| {policy} | {name} | {p:.1f} | {r:.1f} | {e:.1f} | {r / p:.2f} | "
                         f"{e / p:.2f} |")
        loads.append(os.getloadavg()[0])
    cpu = args.clock == "cpu"
    print(f"Command: `python -m benchmarks.quantile_speed --rows {args.rows} --repeats "
          f"{args.repeats} --policies {' '.join(args.policies)}{' --clock cpu' if cpu else ''}` "
          f"(load average {min(loads):.1f} to {max(loads):.1f} on 2 cores)\n")
    unit = "CPU ms" if cpu else "ms"
    print(f"| policy | query | plain DuckDB {unit} | rewritten SQL {unit} | dpsql {unit} | "
          "SQL / plain | dpsql / plain |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(lines))
    print(f"\nMedians of {args.repeats} runs of each, alternating, on warm connections"
          f"{', in CPU time of the process' if cpu else ''}; plain DuckDB runs the same text (its "
          "exact MEDIAN and QUANTILE_CONT, MIN and MAX), dpsql end to end with the durable "
          "charge.")


if __name__ == "__main__":
    main()
