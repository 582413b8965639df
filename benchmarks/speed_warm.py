"""Warm-connection speed against plain DuckDB, with the rewritten SQL timed on its own, so that
what the engine adds splits into DuckDB's extra work (clamping, the domain join) and the rest
(plan cache, noise, durable charge, post-processing).

Run: `python -m benchmarks.speed_warm --rows 10000000 [--repeats 15] [--prepared]`. Prints a
Markdown section for benchmarks/RESULTS.md. With `--prepared` both policies read the copy `dpsql
prepare` writes (made before timing): the per-unit policy its bounded rows instead of a copy
bounded in process, which stores the clamped values SUM and AVG read either way (docs/theory.md
§34); the row-level policy every row with its stored clamped values, instead of a view that
clamps each row as it is read.
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
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.backends.duckdb import DuckDBBackend
from dpsql.engine.policy import Policy
from dpsql.engine.policy_yaml import parse_policy

from benchmarks.generate import dataset
from benchmarks.workload import EPSILON, POLICIES, TEMPLATES, applies, policy_dict


def _ms(call: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    call()
    return (clock() - start) * 1e3


def measure(path: Path, policy: str, repeats: int, templates: dict[str, str] = TEMPLATES,
            prepared: bool = False, clock: Callable[[], float] = time.perf_counter
            ) -> list[tuple[str, float, float, float]]:
    """(template, plain ms, rewritten SQL ms, dpsql ms) for each template under `policy`, the
    bounded copies read from the owner's prepared files when `prepared`, timed by `clock`
    (wall time; `time.process_time` gives the process's CPU time, DuckDB's threads included,
    which other processes on a loaded machine disturb less)."""
    parsed = parse_policy(policy_dict(policy))
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "ledger.sqlite"
        if prepared:
            with PrivateDatabase.connect(path, parsed, ledger, create=True) as owner:
                DuckDBBackend.prepare_copies(path, parsed, ledger, owner.ledger.hash_key)
        with PrivateDatabase.connect(path, parsed, ledger, create=not prepared,
                                     reuse=False) as db:  # timed again: charged
            return _measure(db, path, parsed, repeats, templates, policy, clock)


def _measure(db: PrivateDatabase, path: Path, parsed: Policy, repeats: int,
             templates: dict[str, str], policy: str,
             clock: Callable[[], float]) -> list[tuple[str, float, float, float]]:
    """`measure` on an open private database, against a plain connection to the same data."""
    plain = execute.open_data(path, parsed)
    try:
        return [(name, *_template(db, plain, sql, repeats, clock))
                for name, sql in templates.items() if applies(name, policy)]
    finally:
        plain.close()


def _template(db: PrivateDatabase, plain: duckdb.DuckDBPyConnection, sql: str,
              repeats: int, clock: Callable[[], float]) -> tuple[float, float, float]:
    """Medians of `repeats` runs of the plain SQL, the rewritten SQL on the engine's own
    locked-down connection and the private query, alternating, after one warm-up each (which
    makes the bounded copy under a per-unit policy)."""
    rewritten = db.explain(sql, EPSILON).rewritten_sql
    engine_conn = db._backend.conn
    calls = (lambda: plain.execute(sql).fetchall(),
             lambda: engine_conn.execute(rewritten).fetchall(),
             lambda: db.query(sql, EPSILON))
    for call in reversed(calls):  # the private query first: it makes the bounded copy
        call()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats):
        for spent, call in zip(times, calls, strict=True):
            spent.append(_ms(call, clock))
    plain_ms, sql_ms, engine_ms = (statistics.median(spent) for spent in times)
    return plain_ms, sql_ms, engine_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--prepared", action="store_true",
                        help="queries read the copies `dpsql prepare` writes")
    args = parser.parse_args()
    data = dataset(args.rows)
    lines = []
    loads = [os.getloadavg()[0]]
    for policy in POLICIES:
        for name, p, r, e in measure(data.path, policy, args.repeats, prepared=args.prepared):
            lines.append(f"| {policy} | {name} | {p:.1f} | {r:.1f} | {e:.1f} | {r / p:.2f} | "
                         f"{e / p:.2f} | {e - r:.1f} |")
        loads.append(os.getloadavg()[0])
    flag = " --prepared" if args.prepared else ""
    print(f"Command: `python -m benchmarks.speed_warm --rows {args.rows} --repeats {args.repeats}{flag}`"
          f" (load average {min(loads):.1f} to {max(loads):.1f} on 2 cores)\n")
    print("| policy | template | plain ms | rewritten SQL ms | dpsql ms | SQL / plain | "
          "dpsql / plain | dpsql - SQL ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines))
    print(f"\nMedians of {args.repeats} runs of each, alternating, on warm connections (the "
          "per-unit bounded copy made before timing); dpsql's time is end to end, durable "
          "charge included.")


if __name__ == "__main__":
    main()
