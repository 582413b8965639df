"""The parts of a warm COUNT(*)'s fixed cost that changed, each timed against what it replaced
in one process, alternating, so that a loaded machine slows both alike: the SQL DuckDB runs
(one SELECT reading the table directly, against the joined form and the SELECT over a `rows`
subquery it replaced, on a 10M-row table), OpenDP's release of one
value (its measurement of one value against the one-element vector) and the ledger read before
a run (what the connection's last charge left, for one PRAGMA, against the full read that a
connection which has not charged makes).

Run: `python -m benchmarks.fixed_cost_parts [--rows 10000000] [--repeats 2000]`. Prints a
Markdown section.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.noise import build_mechanism, release

from benchmarks.generate import patterned
from benchmarks.workload import policy_dict
from dpsql import PrivateDatabase

BEFORE_SQL = ('SELECT COALESCE("agg"."__m0", 0) AS "__m0" FROM (SELECT COUNT(*) AS "__m0" '
              'FROM (SELECT 1 FROM people) AS rows) AS agg')
"""The form every ungrouped query had before (`engine/rewrite.py`)."""
NESTED_SQL = 'SELECT COUNT(*) AS "__m0" FROM (SELECT 1 FROM people) AS rows'
"""The one SELECT over the `rows` subquery, before rows of bare columns were read directly."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as work:
        data = patterned(Path(work) / "people.duckdb", args.rows, unit=True)
        policy = Path(work) / "policy.yaml"
        policy.write_text(yaml.safe_dump(policy_dict("row_level")))
        with PrivateDatabase.connect(data, policy, Path(work) / "ledger.sqlite", create=True,
                                     reuse=False) as db:
            sql = "SELECT COUNT(*) AS n FROM people"
            db.query(sql, epsilon=1.0)
            prepared = db._preparer.prepare(sql, 1.0, None)
            conn = db._backend.conn
            mechanism = next(iter(prepared.mechanisms.values()))
            vector = mechanism.opendp_measurement
            ledger = db.ledger
            fresh = Ledger(ledger.path, ledger.binding)  # charges nothing: it reads every time
            pairs = {
                "DuckDB: the COUNT(*) query, against the joined form": (
                    lambda: conn.execute(BEFORE_SQL).fetchall(),
                    lambda: conn.execute(prepared.sql).fetchall()),
                "DuckDB: the COUNT(*) query, against one SELECT over `rows`": (
                    lambda: conn.execute(NESTED_SQL).fetchall(),
                    lambda: conn.execute(prepared.sql).fetchall()),
                "OpenDP: one noisy count": (
                    lambda: list(vector([10_000])), lambda: release(mechanism, [10_000])),
                "ledger: the state read before the run": (fresh.state, ledger.state),
            }
            timed = {name: _alternate(*pair, args.repeats) for name, pair in pairs.items()}
            fresh.close()
    floats = build_mechanism(prepared.plan.measurements[0], 1.0, 1.0, integer=False)
    timed["OpenDP: one noisy float"] = _alternate(
        lambda: list(floats.opendp_measurement([1.5])), lambda: release(floats, [1.5]),
        args.repeats)
    print(f"### The changed parts of a warm COUNT(*) ({args.rows:,} rows)\n")
    print(f"Command: `python -m benchmarks.fixed_cost_parts --rows {args.rows} --repeats "
          f"{args.repeats}` (load average {load:.1f} at its start, {os.cpu_count()} cores)\n")
    print("| part | before ms | now ms | saved ms | now / before |")
    print("|---|---:|---:|---:|---:|")
    for name, (before, now) in timed.items():
        print(f"| {name} | {before:.3f} | {now:.3f} | {before - now:.3f} | {now / before:.2f} |")
    print(f"\nMedians of {args.repeats} runs of each, alternating in random order. The DuckDB "
          f"query is the one rewritten for `{sql}` (`{prepared.sql}`) against the joined form "
          f"every ungrouped query had (`{BEFORE_SQL}`), and against the one SELECT over the "
          f"`rows` subquery that followed it (`{NESTED_SQL}`).")


def _alternate(before: Callable[[], object], now: Callable[[], object],
               repeats: int) -> tuple[float, float]:
    """Median milliseconds of each, run alternately in random order."""
    calls = [before, now]
    times: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(20):
        before(), now()
    for _ in range(repeats):
        order = [0, 1]
        random.shuffle(order)
        for which in order:
            start = time.perf_counter()
            calls[which]()
            times[which].append(time.perf_counter() - start)
    return statistics.median(times[0]) * 1000, statistics.median(times[1]) * 1000


if __name__ == "__main__":
    main()
