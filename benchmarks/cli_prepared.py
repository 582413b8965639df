"""A CLI call on a large per-unit table: dpsql with the owner's prepared bounded copy against the
plain DuckDB query run the same way (a new Python process each time), and the one-time cost.
dpsql runs twice per round: as this environment starts Python (PYTHONDONTWRITEBYTECODE=1 here:
the package's own modules are compiled on every start) and as a user's machine does (bytecode
written once and then read).

Run: `python -m benchmarks.cli_prepared --rows 20000000 [--repeats 5]`. Prints a Markdown
section for benchmarks/RESULTS.md.
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

import yaml

from benchmarks.cli_imports import CACHE, drop_bytecode
from benchmarks.generate import DATA_DIR
from benchmarks.workload import policy_dict

QUERIES = {
    "grouped_count": "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "filtered_sum": "SELECT SUM(income) AS s FROM people WHERE age > 40",
}
PLAIN = ("import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=True); "
         "c.execute(sys.argv[2]).fetchall()")


def _timed(command: list[str], bytecode: bool = False) -> tuple[float, float]:
    """Wall seconds of one process, and its peak resident memory in MB (from wait4); with
    `bytecode`, Python may write and read the package's compiled modules."""
    env = {k: v for k, v in os.environ.items() if not (bytecode and k == "PYTHONDONTWRITEBYTECODE")}
    if bytecode:  # kept apart, so the uncached runs find no __pycache__ in the checkout either
        env["PYTHONPYCACHEPREFIX"] = str(CACHE)
    elif command[0] != sys.executable:
        drop_bytecode(Path(__file__).resolve().parent.parent)
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{proc.stderr.read().decode() if proc.stderr else ''}")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
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
        unprepared, unprepared_mb = _timed([dpsql, "query", first_sql, "--epsilon", "1", "--format",
                                            "json", "--no-reuse", *paths])
        prepared_s, prepare_mb = _timed([dpsql, "prepare", *paths])
        store = ledger.with_name(ledger.name + ".bounded")
        disk = sum(f.stat().st_size for f in store.glob("*.duckdb")) / 2**20
        rows = []
        loads = [os.getloadavg()[0]]
        for name, sql in QUERIES.items():
            command = [dpsql, "query", sql, "--epsilon", "1", "--format", "json", "--no-reuse",
                       *paths]  # timed again: charged
            _timed(command, bytecode=True)  # writes the bytecode a user's first run would
            plain, engine, cached, peak = [], [], [], 0.0
            for _ in range(args.repeats):  # alternate, so all see the same machine
                plain.append(_timed([sys.executable, "-c", PLAIN, str(data_path), sql])[0])
                seconds, mb = _timed(command)
                engine.append(seconds)
                cached.append(_timed(command, bytecode=True)[0])
                peak = max(peak, mb)
            p, e, c = statistics.median(plain), statistics.median(engine), statistics.median(cached)
            rows.append(f"| {name} | {p:.2f} | {e:.2f} | {e / p:.2f} | {c:.2f} | {c / p:.2f} | "
                        f"{peak:,.0f} |")
            loads.append(os.getloadavg()[0])
    table_mb = data_path.stat().st_size / 2**20
    print(f"### A CLI call on {args.rows:,} rows under the per-unit policy\n")
    print(f"Command: `python -m benchmarks.cli_prepared --rows {args.rows} --repeats {args.repeats}`\n")
    print(f"* Without a prepared copy, one `dpsql query` (bounding in the process) took "
          f"{unprepared:.1f} s, peak {unprepared_mb:,.0f} MB.")
    print(f"* `dpsql prepare` (once, by the owner) took {prepared_s:.1f} s, peak {prepare_mb:,.0f} MB; "
          f"the copy takes {disk:,.0f} MB on disk against {table_mb:,.0f} MB for the whole data file.\n")
    print("| template | plain DuckDB process, s | dpsql, no bytecode cache, s | ratio | "
          "dpsql, bytecode cached, s | ratio | dpsql peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\nMedians of {args.repeats} runs, alternating; each is a new Python process "
          "(interpreter start and imports included on both sides); `--format json`; load average "
          f"{min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores.")


if __name__ == "__main__":
    main()
