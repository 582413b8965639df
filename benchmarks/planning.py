"""Time to plan (`explain`) a query of N medians or N sums, to set the planning limits.

    python -m benchmarks.planning [--medians 4 8 16] [--sums 100 400] [--refused 300]

Each `explain` runs once on a fresh connection to a 300-unit people table: first under a policy
whose planning limits are raised (so the time is planning's own), then, for --refused, under the
default limits (the time to refuse). Prints one markdown table row per query, with the machine's
load average, since planning is CPU-bound and the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from dpsql.engine import PrivateDatabase, ResourceLimitExceeded

from tests.support import create_ledger, make_people, write_policy

RAISED = {"max_sql_chars": 1_000_000, "max_noisy_columns": 1_000_000, "plan_seconds": 86_400}


def sql(function: str, terms: int) -> str:
    return "SELECT " + ", ".join(f"{function}(age + {i}) AS m{i}" for i in range(terms)) + \
        " FROM people"


def explain_seconds(root: Path, text: str, limits: dict | None) -> tuple[float, str]:
    """Seconds one explain took, and `planned` or the limit that refused it."""
    policy = write_policy(root / f"policy{time.monotonic_ns()}.yaml",
                          None if limits is None else {"limits": limits})
    ledger = create_ledger(root / f"ledger{time.monotonic_ns()}.sqlite", policy)
    with PrivateDatabase.connect(root / "people.duckdb", policy, ledger) as private:
        started = time.perf_counter()
        try:
            private.explain(text, epsilon=1)
            outcome = "planned"
        except ResourceLimitExceeded as exc:
            outcome = f"refused ({exc.limit})"
        return time.perf_counter() - started, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--medians", type=int, nargs="*", default=[4, 8, 16])
    parser.add_argument("--sums", type=int, nargs="*", default=[100, 400])
    parser.add_argument("--refused", type=int, nargs="*", default=[17, 300])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        make_people(root / "people.duckdb")
        print("| query | SQL chars | limits | explain s | outcome | load average |")
        print("|---|---:|---|---:|---|---:|")
        runs = [("MEDIAN", n, RAISED) for n in args.medians] + \
            [("SUM", n, RAISED) for n in args.sums] + [("MEDIAN", n, None) for n in args.refused]
        for function, terms, limits in runs:
            text = sql(function, terms)
            seconds, outcome = explain_seconds(root, text, limits)
            print(f"| {terms} x {function}(age + i) | {len(text)} | "
                  f"{'raised' if limits else 'default'} | {seconds:.2f} | {outcome} | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
