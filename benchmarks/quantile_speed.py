"""MEDIAN and a grouped percentile against plain DuckDB's own MEDIAN and QUANTILE_CONT, on warm
connections, with the rewritten SQL (the one-pass histogram) timed on its own.

Run: `python -m benchmarks.quantile_speed --rows 10000000 [--repeats 9]`. Prints a Markdown
section for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os

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
    args = parser.parse_args()
    data = dataset(args.rows)
    lines, loads = [], [os.getloadavg()[0]]
    for policy in args.policies:
        for name, p, r, e in speed_warm.measure(data.path, policy, args.repeats, QUERIES):
            lines.append(f"| {policy} | {name} | {p:.1f} | {r:.1f} | {e:.1f} | {r / p:.2f} | "
                         f"{e / p:.2f} |")
        loads.append(os.getloadavg()[0])
    print(f"Command: `python -m benchmarks.quantile_speed --rows {args.rows} --repeats "
          f"{args.repeats} --policies {' '.join(args.policies)}` (load average "
          f"{min(loads):.1f} to {max(loads):.1f} on 2 cores)\n")
    print("| policy | query | plain DuckDB ms | rewritten SQL ms | dpsql ms | SQL / plain | "
          "dpsql / plain |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(lines))
    print(f"\nMedians of {args.repeats} runs of each, alternating, on warm connections; plain "
          "DuckDB runs the same text (its exact MEDIAN and QUANTILE_CONT, MIN and MAX), dpsql "
          "end to end with the durable charge.")


if __name__ == "__main__":
    main()
