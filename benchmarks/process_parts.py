"""Where a `dpsql query` process's time goes beyond a plain DuckDB process's, part by part, each
in a new Python process: the third-party imports, dpsql's own modules (and, of those, building
its frozen dataclasses), opening the data as DuckDB itself does, a second in-memory DuckDB
instance (what the schema gate holds), OpenDP's first measurement and release, and one query
on a prepared per-unit file through `PrivateDatabase`, opening and closing included.

Run: `python -m benchmarks.process_parts [--rows 1000000] [--repeats 7]`. Prints a Markdown
section; bytecode is cached (PYTHONPYCACHEPREFIX), as on a user's machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.cli_imports import environment
from benchmarks.generate import DATA_DIR
from benchmarks.workload import policy_dict

PROBE = """import json, sys, time
from pathlib import Path
data, policy, ledger = sys.argv[1:4]
t = {}
start = time.perf_counter()
import duckdb, numpy, sqlglot, sqlglot.generators.duckdb, yaml, click, opendp._data
t["third-party imports"] = time.perf_counter() - start
import dataclasses
made = dataclasses._process_class
spent = [0.0]
def timed(*args, **kwargs):
    begun = time.perf_counter()
    try:
        return made(*args, **kwargs)
    finally:
        spent[0] += time.perf_counter() - begun
dataclasses._process_class = timed
start = time.perf_counter()
import dpsql.engine.commands
t["dpsql's own modules"] = time.perf_counter() - start
t["  of which building frozen dataclasses"] = spent[0]
dataclasses._process_class = made
start = time.perf_counter()
duckdb.connect(data, read_only=True).close()
t["DuckDB: open the data file (a plain process does this too)"] = time.perf_counter() - start
start = time.perf_counter()
duckdb.connect(":memory:").close()
t["DuckDB: a second, in-memory instance"] = time.perf_counter() - start
from opendp.domains import atom_domain
from opendp.measurements import make_laplace
from opendp.metrics import absolute_distance
from opendp.mod import enable_features
enable_features("contrib")
start = time.perf_counter()
make_laplace(atom_domain(T=int), absolute_distance(T=int), 1.0)(5)
t["OpenDP: first measurement and release"] = time.perf_counter() - start
from dpsql import PrivateDatabase
start = time.perf_counter()
db = PrivateDatabase.connect(Path(data), Path(policy), Path(ledger), reuse=False)
t["PrivateDatabase.connect"] = time.perf_counter() - start
start = time.perf_counter()
db.query("SELECT region, COUNT(*) AS n FROM people GROUP BY region", epsilon=1.0)
t["the first query"] = time.perf_counter() - start
start = time.perf_counter()
db.close()
t["close"] = time.perf_counter() - start
print(json.dumps(t))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "benchmarks.generate", str(args.rows)], check=True,
                   capture_output=True)
    data = DATA_DIR / f"people_{args.rows}.duckdb"
    dpsql = str(Path(sys.executable).with_name("dpsql"))
    load = os.getloadavg()[0]
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as work:
        policy, ledger = Path(work) / "policy.yaml", Path(work) / "ledger.sqlite"
        policy.write_text(yaml.safe_dump(policy_dict("per_unit")))
        paths = ["--db", str(data), "--policy", str(policy), "--ledger", str(ledger)]
        subprocess.run([dpsql, "ledger", "init", "--ledger", str(ledger), "--policy", str(policy)],
                       check=True, capture_output=True)
        subprocess.run([dpsql, "prepare", *paths], check=True, capture_output=True)
        env = environment(None, bytecode=True)
        for _ in range(args.repeats + 1):  # the first run writes the bytecode
            out = subprocess.run([sys.executable, "-c", PROBE, str(data), str(policy), str(ledger)],
                                 capture_output=True, text=True, check=True, env=env,
                                 cwd=work).stdout
            runs.append(json.loads(out))
    runs = runs[1:]
    print(f"### Where a query process's time goes ({args.rows:,} rows, per-unit, prepared)\n")
    print(f"Command: `python -m benchmarks.process_parts --rows {args.rows} --repeats "
          f"{args.repeats}` (load average {load:.1f} at its start, {os.cpu_count()} cores)\n")
    print("| part | median ms | range ms |")
    print("|---|---:|---|")
    for part in runs[0]:
        values = [run[part] * 1000 for run in runs]
        print(f"| {part} | {statistics.median(values):.1f} | {min(values):.1f} to "
              f"{max(values):.1f} |")
    print(f"\nMedians of {args.repeats} new processes, each timing the parts in this order (so "
          "each part's own first-use costs are in it, as in a `dpsql query` process).")


if __name__ == "__main__":
    main()
