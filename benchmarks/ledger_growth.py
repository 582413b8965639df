"""Time per query against the number of answers a ledger holds: a warm `COUNT(*)` end to end
(admission, the durable charge, noise, the stored answer) at 0, 1,000, 10,000 and 100,000
stored answers, on a table of `--rows` rows (10 million by default, as the target states it;
the query's own DuckDB work is then what a COUNT(*) costs at that size).

The ledger is filled through its own `charge` (what every query calls) with copies of real
answers (a COUNT(*) and a grouped answer of about 2 KB, alternately, from two analysts), with
the filling connection's fsync turned off so that filling takes seconds, and copied at each
size; the timed queries run on fresh connections with the ledger's own durable settings,
alternating between the ledgers so that every size sees the same machine.

Run: `python -m benchmarks.ledger_growth [--rows 10000000] [--repeats 200]
[--plot benchmarks/ledger_growth.png]`.
Prints a Markdown section.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from dpsql.engine.accounting.ledger import Charge, Ledger

from benchmarks.generate import patterned
from benchmarks.workload import policy_dict
from dpsql import PrivateDatabase

SIZES = (0, 1_000, 10_000, 100_000)
COUNT = "SELECT COUNT(*) AS n FROM people"
PLAIN = "SELECT COUNT(*) FROM people"
GROUPED = "SELECT region, COUNT(*) AS n, AVG(income) AS mean FROM people GROUP BY region"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = patterned(Path(work) / "people.duckdb", args.rows)
        policy = Path(work) / "policy.yaml"
        policy.write_text(yaml.safe_dump(policy_dict("row_level")))
        ledger = Path(work) / "ledger.sqlite"
        with PrivateDatabase.connect(data, policy, ledger, create=True) as private:
            templates = [_template(private.query(sql, epsilon=1e-6), sql, analyst)
                         for sql, analyst in ((COUNT, "ann"), (GROUPED, "bob"))]
        sizes = [len(str(t.answer)) for t in templates]
        copies, stored = [], 2
        for size in SIZES:
            stored = _fill(ledger, templates, size, stored)
            copy = Path(work) / f"ledger-{size}.sqlite"
            shutil.copyfile(ledger, copy)
            copies.append((stored, copy))
        loads = [os.getloadavg()[0]]
        times, plain = _time(data, policy, [copy for _, copy in copies], args.repeats)
        loads.append(os.getloadavg()[0])
        floor = _commit(Path(work) / "floor.sqlite", args.repeats)
        rows = [(stored, ms, copy.stat().st_size / 1e6, cpu)
                for (stored, copy), (ms, cpu) in zip(copies, times, strict=True)]
    base, base_cpu = rows[0][1], rows[0][3]
    print(f"### Warm COUNT(*) against answers stored in the ledger ({args.rows:,} rows)\n")
    print(f"Command: `python -m benchmarks.ledger_growth --rows {args.rows} --repeats "
          f"{args.repeats}`; stored "
          f"answers of {min(sizes)} and {max(sizes)} characters, alternately (load average "
          f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores).\n")
    print("| answers stored | ledger MB | median ms per query | vs empty | median CPU ms | vs empty |")
    print("|---:|---:|---:|---:|---:|---:|")
    for stored, ms, mb, cpu in rows:
        print(f"| {stored:,} | {mb:.1f} | {ms:.2f} | {ms / base:.2f}x | {cpu:.2f} | "
              f"{cpu / base_cpu:.2f}x |")
    print("\nCPU: the querying process's own time per query (DuckDB's threads included), which "
          "leaves out waits for the disk and for other processes on a shared machine.")
    print(f"\nIn the same rounds, DuckDB's own `{PLAIN}` on the same data took {plain:.2f} ms "
          "(median): the part of a query no engine on DuckDB can avoid, and a gauge of how "
          "fast the machine was.")
    print(f"\nThe floor, one durable sqlite commit of one row (WAL, synchronous FULL) in the same "
          f"directory: {floor:.2f} ms (median of {args.repeats}).")
    if args.plot is not None:
        _plot(rows, args.plot)
        print(f"\nPlot: `{args.plot}`")


def _template(result, sql: str, analyst: str) -> Charge:
    return Charge(analyst, sql, result.answer_cost, result.aggregates,
                  result.to_dict(), frozenset(result.columns_read), None)


def _fill(path: Path, templates: list[Charge], target: int, stored: int) -> int:
    """Charge copies of the templates until the ledger holds `target` answers."""
    ledger = Ledger.reopen(path)
    ledger._conn.execute("PRAGMA synchronous = OFF")  # filling only; timed queries use FULL
    try:
        while stored < target:
            charge = templates[stored % 2]
            ledger.charge(lambda _, charge=charge: (charge, None))
            stored += 1
    finally:
        ledger.close()
    return stored


def _time(data: Path, policy: Path, ledgers: list[Path],
          repeats: int) -> tuple[list[tuple[float, float]], float]:
    """Median milliseconds of a warm COUNT(*) on each ledger, wall and this process's CPU, the
    ledgers taken in turn; and of DuckDB's own COUNT(*) on the same data in the same rounds,
    which says how fast the machine was while they ran."""
    connections = [PrivateDatabase.connect(data, policy, ledger, reuse=False)  # timed again
                   for ledger in ledgers]
    duck = connections[0]._backend.conn
    times: list[list[tuple[float, float]]] = [[] for _ in ledgers]
    plain: list[float] = []
    try:
        for round_ in range(repeats + 10):
            for private, spent in zip(connections, times, strict=True):
                start, used = time.perf_counter(), time.process_time()
                private.query(COUNT, epsilon=1e-6)
                if round_ >= 10:  # the first rounds warm up
                    spent.append((time.perf_counter() - start, time.process_time() - used))
            start = time.perf_counter()
            duck.execute(PLAIN).fetchall()
            if round_ >= 10:
                plain.append(time.perf_counter() - start)
    finally:
        for private in connections:
            private.close()
    return [(statistics.median(w for w, _ in spent) * 1000,
             statistics.median(c for _, c in spent) * 1000) for spent in times], \
        statistics.median(plain) * 1000


def _commit(path: Path, repeats: int) -> float:
    """Median milliseconds of committing one row durably, as a charge's fsync costs."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE t (x)")
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", [i])
        conn.execute("COMMIT")
        times.append(time.perf_counter() - start)
    conn.close()
    return statistics.median(times) * 1000


def _plot(rows: list[tuple], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r[0] for r in rows], [r[1] for r in rows], marker="o")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("answers stored in the ledger")
    ax.set_ylabel("warm COUNT(*) ms per query")
    ax.set_title("Time per query against ledger history")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
