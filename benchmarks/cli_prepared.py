"""A CLI call on a large per-unit table: dpsql with the owner's prepared bounded copy against the
plain DuckDB query run the same way (a new Python process each time), and the one-time cost.
dpsql runs twice per round: as this environment starts Python (PYTHONDONTWRITEBYTECODE=1 here:
the package's own modules are compiled on every start) and as a user's machine does (bytecode
written once and then read). The same rounds time `dpsql --version` and an interpreter that
does nothing, and `python -X importtime` gives what a query process's imports cost by package.
`--compare DIR` also times the query process of another checkout (e.g. an older commit from
`git archive`) on the same prepared copy, alternating, and gives its imports beside. Each
process's CPU time (user + system, from wait4) is given beside its wall time: on a busy machine
a process waits for a core, and its CPU time says what it costs more steadily.

Run: `python -m benchmarks.cli_prepared --rows 20000000 [--repeats 10] [--compare DIR]`. Prints
a Markdown section for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import yaml

from benchmarks.cli_imports import environment, import_offenders, layout
from benchmarks.generate import DATA_DIR
from benchmarks.workload import policy_dict

QUERIES = {
    "grouped_count": "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "filtered_sum": "SELECT SUM(income) AS s FROM people WHERE age > 40",
}
PLAIN = ("import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=True); "
         "c.execute(sys.argv[2]).fetchall()")
CLI = "from dpsql.engine.cli import main; main()"  # a checkout's command line, from its layout
TOP = 10  # packages listed by import time


class Timing(NamedTuple):
    """One process: wall seconds, CPU seconds (user + system) and peak resident memory in MB."""

    seconds: float
    cpu: float
    mb: float


def _timed(command: list[str], bytecode: bool = False, tree: Path | None = None) -> Timing:
    """Wall and CPU seconds of one process, and its peak resident memory (from wait4); with
    `bytecode`, Python may write and read the package's compiled modules; `tree` is a checkout's
    `layout` to import (the installed checkout if None)."""
    env = environment(tree, bytecode)
    start = time.perf_counter()
    # From "/": run from the checkout, `-c` would put its dpsql/ folder before PYTHONPATH
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd="/")
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{proc.stderr.read().decode() if proc.stderr else ''}")
    return Timing(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--compare", type=Path, default=None,
                        help="another checkout whose query process is timed alongside")
    parser.add_argument("--templates", nargs="+", choices=list(QUERIES), default=list(QUERIES))
    args = parser.parse_args()
    before = layout(args.compare) if args.compare else None
    now = layout(Path(__file__).resolve().parent.parent)  # this checkout, launched as `before` is
    # The table is read (generated and counted) in a process of its own: Linux carries this
    # process's memory high-water mark into every child it spawns, which would then report it
    # as their own peak.
    subprocess.run([sys.executable, "-m", "benchmarks.generate", str(args.rows)], check=True,
                   capture_output=True)
    data_path = DATA_DIR / f"people_{args.rows}.duckdb"
    dpsql = str(Path(sys.executable).with_name("dpsql"))
    with tempfile.TemporaryDirectory() as work:
        policy, ledger = Path(work) / "policy.yaml", Path(work) / "ledger.sqlite"
        policy.write_text(yaml.safe_dump(policy_dict("per_unit")))
        subprocess.run([dpsql, "ledger", "init", "--ledger", str(ledger), "--policy", str(policy)],
                       check=True, capture_output=True)
        paths = ["--db", str(data_path), "--policy", str(policy), "--ledger", str(ledger)]
        first_sql = QUERIES["grouped_count"]
        unprepared, _, unprepared_mb = _timed([dpsql, "query", first_sql, "--epsilon", "1",
                                               "--format", "json", "--no-reuse", *paths])
        prepared_s, _, prepare_mb = _timed([dpsql, "prepare", *paths])
        store = ledger.with_name(ledger.name + ".bounded")
        disk = sum(f.stat().st_size for f in store.glob("*.duckdb")) / 2**20
        rows, compared = [], []
        starts: dict[str, list[float]] = {"python -c pass": [], "dpsql --version": []}
        version = [dpsql, "--version"]
        loads = [os.getloadavg()[0]]
        for name in args.templates:
            sql = QUERIES[name]
            asked = ["query", sql, "--epsilon", "1", "--format", "json", "--no-reuse",
                     *paths]  # timed again: charged
            command = [dpsql, *asked]
            launched = [sys.executable, "-c", CLI, *asked]
            for warm, tree in [(command, None), (version, None)] + ([(launched, before),
                                                                     (launched, now)] if before else []):
                _timed(warm, bytecode=True, tree=tree)  # writes the bytecode a user's first run would
            plain: list[Timing] = []
            engine: list[Timing] = []
            cached: list[Timing] = []
            previous: list[Timing] = []
            current: list[Timing] = []
            for _ in range(args.repeats):  # alternate, so all see the same machine
                plain.append(_timed([sys.executable, "-c", PLAIN, str(data_path), sql]))
                engine.append(_timed(command))
                cached.append(_timed(command, bytecode=True))
                if before:
                    previous.append(_timed(launched, bytecode=True, tree=before))
                    current.append(_timed(launched, bytecode=True, tree=now))
                starts["python -c pass"].append(_timed([sys.executable, "-c", "pass"]).seconds)
                starts["dpsql --version"].append(_timed(version, bytecode=True).seconds)
            p, e, c = (statistics.median(t.seconds for t in runs) for runs in (plain, engine, cached))
            pc, cc = (statistics.median(t.cpu for t in runs) for runs in (plain, cached))
            rows.append(f"| {name} | {p:.2f} | {e:.2f} | {e / p:.2f} | {c:.2f} | {c / p:.2f} | "
                        f"{pc:.2f} | {cc:.2f} | {cc / pc:.2f} | {max(t.mb for t in engine):,.0f} |")
            if before:
                b, n = (statistics.median(t.seconds for t in runs) for runs in (previous, current))
                bc, nc = (statistics.median(t.cpu for t in runs) for runs in (previous, current))
                compared.append(f"| {name} | {p:.2f} | {b:.2f} | {b / p:.2f} | {n:.2f} | {n / p:.2f} | "
                                f"{pc:.2f} | {bc:.2f} | {bc / pc:.2f} | {nc:.2f} | {nc / pc:.2f} |")
            loads.append(os.getloadavg()[0])
        offenders = _offenders(["-c", CLI, *asked], now, before, args.repeats)
    table_mb = data_path.stat().st_size / 2**20
    print(f"### A CLI call on {args.rows:,} rows under the per-unit policy\n")
    compare = (f" --compare {args.compare}" if args.compare else "") + (
        f" --templates {' '.join(args.templates)}" if args.templates != list(QUERIES) else "")
    print(f"Command: `python -m benchmarks.cli_prepared --rows {args.rows} --repeats {args.repeats}"
          f"{compare}`\n")
    print(f"* Without a prepared copy, one `dpsql query` (bounding in the process) took "
          f"{unprepared:.1f} s, peak {unprepared_mb:,.0f} MB.")
    print(f"* `dpsql prepare` (once, by the owner) took {prepared_s:.1f} s, peak {prepare_mb:,.0f} MB; "
          f"the copy takes {disk:,.0f} MB on disk against {table_mb:,.0f} MB for the whole data file.\n")
    print("| template | plain DuckDB process, s | dpsql, no bytecode cache, s | ratio | "
          "dpsql, bytecode cached, s | ratio | plain CPU s | dpsql cached CPU s | CPU ratio | "
          "dpsql peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\nMedians of {args.repeats} runs, alternating; each is a new Python process "
          "(interpreter start and imports included on both sides); CPU is user + system time; "
          "`--format json`; load average "
          f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores.\n")
    print("| process (bytecode cached) | median s |")
    print("|---|---:|")
    for name, spent in starts.items():
        print(f"| {name} | {statistics.median(spent):.3f} |")
    if compared:
        print(f"\nThe same rounds, the query process of `{args.compare}` (before) and of this "
              "checkout (now), both started as `python -c` on the package's layout:\n")
        print("| template | plain DuckDB process, s | before, s | ratio | now, s | ratio | "
              "plain CPU s | before CPU s | ratio | now CPU s | ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(compared))
    print("\nImport time of one `dpsql query` process by package (`python -X importtime`, each "
          f"module's own time summed per top-level package, median of {args.repeats} runs, "
          "bytecode cached), largest first:\n")
    columns = [("now", offenders["now"])] + ([("before", offenders["before"])] if before else [])
    print("| package | " + " | ".join(f"{label} ms" for label, _ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for package in sorted(offenders["now"] | offenders.get("before", {}),
                          key=lambda p: -max(spent.get(p, 0.0) for _, spent in columns))[:TOP]:
        print(f"| {package} | " + " | ".join(f"{spent.get(package, 0.0):.0f}" for _, spent in columns)
              + " |")
    print("| all imports | " + " | ".join(f"{sum(spent.values()):.0f}" for _, spent in columns) + " |")


def _offenders(command: list[str], now: Path, before: Path | None,
               repeats: int) -> dict[str, dict[str, float]]:
    """Per checkout layout ("now", and "before" when compared), the median milliseconds of import
    time per top-level package over `repeats` alternating runs of `command` (bytecode cached)."""
    trees = {"now": now} | ({"before": before} if before else {})
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
    for _ in range(repeats):
        for label, tree in trees.items():
            runs[label].append(import_offenders(command, environment(tree, bytecode=True)))
    return {label: {package: statistics.median(run.get(package, 0.0) for run in spent)
                    for package in set().union(*spent)} for label, spent in runs.items()}


if __name__ == "__main__":
    main()
