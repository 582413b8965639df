"""The engine's fixed cost per query on a warm connection: a table small enough that the
DuckDB work is negligible, so what is measured is parse, plan, calibration, admission, the
durable charge, noise and post-processing.

Run: `python -m benchmarks.fixed_cost [--repeats 400]`. Prints a Markdown section, with the
post-processing of AVG answers timed both ways (the query in the second DuckDB, and numpy).
`--compare DIR` runs it in turn on this checkout's engine and on the engine of another checkout
(e.g. an older commit from `git archive`), each in a process of its own, `--rounds` times, so that
both are measured on one machine in one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import yaml
from dpsql.engine import postprocess
from dpsql.engine.noise import release
from dpsql.engine.prepare import _all_keys

from benchmarks.generate import patterned
from benchmarks.workload import policy_dict
from dpsql import PrivateDatabase

POST = {
    "avg": "SELECT AVG(income) AS mean FROM people",
    "grouped_avg": "SELECT region, AVG(income) AS mean, COUNT(*) AS n FROM people GROUP BY region",
}

QUERIES = {
    "count": "SELECT COUNT(*) AS n FROM people",
    "filtered_count": "SELECT COUNT(*) AS n FROM people WHERE age >= 40",
    "grouped_count": "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "avg": "SELECT AVG(income) AS mean FROM people",
}


# Runs `main` with the engine and calibration packages of the checkout in argv[1].
IN_TREE = """import importlib.util, sys
tree = sys.argv[1]
for name in ("calibration", "engine"):
    spec = importlib.util.spec_from_file_location(f"dpsql.{name}", f"{tree}/{name}/__init__.py",
                                                  submodule_search_locations=[f"{tree}/{name}"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"dpsql.{name}"] = module
    spec.loader.exec_module(module)
from benchmarks import fixed_cost
fixed_cost.main(sys.argv[2:])
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=400)
    parser.add_argument("--compare", type=Path, default=None,
                        help="another checkout whose engine is measured in turn with this one's")
    parser.add_argument("--rounds", type=int, default=2, help="with --compare: runs of each")
    args = parser.parse_args(argv)
    if args.compare is not None:
        _compare(args.compare.resolve(), args.repeats, args.rounds)
        return
    with tempfile.TemporaryDirectory() as work:
        data = patterned(Path(work) / "people.duckdb", 10_000, unit=True)
        copy = Path(work) / "plain.duckdb"
        shutil.copyfile(data, copy)
        rows, post = [], []
        for policy_name in ("row_level", "per_unit"):
            policy = Path(work) / f"{policy_name}.yaml"
            policy.write_text(yaml.safe_dump(policy_dict(policy_name)))
            private = PrivateDatabase.connect(data, policy, Path(work) / f"{policy_name}.sqlite",
                                             create=True, reuse=False)  # timed again: charged
            plain = duckdb.connect(str(copy), read_only=True)  # a file of its own: one config each
            for name, sql in QUERIES.items():
                for _ in range(5):
                    private.query(sql, epsilon=1.0)
                    plain.execute(sql).fetchall()
                engine, raw, cpu = [], [], []
                for _ in range(args.repeats):  # alternate, so both see the same machine
                    start, used = time.perf_counter(), time.process_time()
                    private.query(sql, epsilon=1.0)
                    engine.append(time.perf_counter() - start)
                    cpu.append(time.process_time() - used)
                    start = time.perf_counter()
                    plain.execute(sql).fetchall()
                    raw.append(time.perf_counter() - start)
                e, p = statistics.median(engine) * 1000, statistics.median(raw) * 1000
                c = statistics.mean(cpu) * 1000
                rows.append(f"| {policy_name} | {name} | {p:.2f} | {e:.2f} | {e - p:.2f} | "
                            f"{c:.2f} |")
            if policy_name == "row_level":
                post = [_post_row(private, name, sql, args.repeats) for name, sql in POST.items()]
            private.close()
            plain.close()
    print("### Fixed cost per query on a warm connection (10,000 rows)\n")
    print(f"Command: `python -m benchmarks.fixed_cost --repeats {args.repeats}`\n")
    print("| policy | template | plain DuckDB ms | dpsql ms | dpsql - plain ms | dpsql CPU ms |")
    print("|---|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\nMedians of {args.repeats} alternating runs; dpsql's time includes the durable sqlite "
          "charge; its CPU time (the mean of this process's, all threads) leaves out waits for the "
          "disk and for other processes.")
    print("\nPost-processing one answer's noisy values (row_level), the two ways alternating:\n")
    print("| template | post-processing query (second DuckDB) ms | numpy (`direct`) ms |")
    print("|---|---:|---:|")
    print("\n".join(post))


def _compare(other: Path, repeats: int, rounds: int) -> None:
    """This checkout's and `other`'s fixed cost, alternating, each run a process of its own."""
    here = Path(__file__).resolve().parent.parent
    print(f"Command: `python -m benchmarks.fixed_cost --repeats {repeats} --compare {other} "
          f"--rounds {rounds}`\n")
    for round_ in range(1, rounds + 1):
        for name, command in (("this checkout", ["-m", "benchmarks.fixed_cost"]),
                              (f"--compare {other}", ["-c", IN_TREE, str(other)])):
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, *command, "--repeats", str(repeats)],
                                 capture_output=True, text=True, check=True, cwd=here).stdout
            table = [line for line in out.splitlines()
                     if line.startswith(("| policy", "|---|---|---:|---:|---:", "| row_level",
                                         "| per_unit"))]
            print(f"Round {round_}, {name} (load average {load:.1f} at its start):\n")
            print("\n".join(table) + "\n")


def _post_row(private: PrivateDatabase, name: str, sql: str, repeats: int) -> str:
    """Median ms of `postprocess.finish` (the frame and the query) and of `postprocess.direct`
    on the same noisy values, alternating."""
    prepared = private._preparer.prepare(sql, 1.0, None)
    plan, mechanisms = prepared.plan, prepared.mechanisms
    keys = _all_keys(plan)
    rows = len(keys) if plan.group_by else 1
    noisy = {name: release(mech, [1000] * rows) for name, mech in mechanisms.items()}

    def query() -> object:
        frame = postprocess.noisy_frame(plan, keys, noisy, mechanisms)
        return postprocess.finish(private._post, plan, prepared.post_sql, frame)

    timed: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for spent, call in zip(timed, (query, lambda: postprocess.direct(plan, keys, noisy, mechanisms)),
                               strict=True):
            start = time.perf_counter()
            call()
            spent.append((time.perf_counter() - start) * 1000)
    return (f"| {name} | {statistics.median(timed[0]):.2f} | "
            f"{statistics.median(timed[1]):.2f} |")


if __name__ == "__main__":
    main()
