"""Time and peak memory of grouped queries by number of noisy values, to set limits.max_noisy_values.

    python -m benchmarks.limits [--rows 1000000] [--groups 10000 100000 1000000]
    python -m benchmarks.limits --bounded-copy 50000000 --memory-mb 4096

Each query runs once, end to end (`PrivateDatabase.query`: plan, run on the data, charge,
OpenDP noise, post-processing), on a fresh connection, under a policy whose limits are raised
so that nothing is refused. Prints one markdown table row per query: wall and CPU seconds
(all threads of this process) and the peak resident memory above the start.
`--bounded-copy ROWS` instead times the first per-unit query on the speed benchmark's data
(which makes the bounded copy) under a memory limit.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import duckdb
import yaml
from dpsql.engine import PrivateDatabase, ResourceLimitExceeded
from dpsql.engine.policy_yaml import parse_policy

from benchmarks.generate import dataset
from benchmarks.memory import measure
from benchmarks.workload import TEMPLATES, policy_dict

# Group-by columns for each number of groups (their domains multiply).
GROUPINGS = {10_000: ("a", "e"), 100_000: ("a", "c"), 1_000_000: ("a", "b")}
DOMAINS = {"a": 1000, "b": 1000, "c": 100, "e": 10}
AGGREGATES = {
    "COUNT": "COUNT(*) AS n",
    "SUM(float)": "SUM(x) AS s",
    "COUNT, SUM, AVG": "COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m",
}


def make_data(root: Path, rows: int) -> tuple[Path, Path]:
    """A table of `rows` rows with public-domain keys a, b, c, e and a float x in [0, 10]."""
    data = root / "grid.duckdb"
    keys = ", ".join(f"(random() * {size})::INT % {size} AS {name}" for name, size in DOMAINS.items())
    with duckdb.connect(str(data)) as conn:
        conn.execute(f"CREATE TABLE t AS SELECT {keys}, random() * 10 AS x FROM range({rows})")
    columns = {name: {"type": "int", "domain": list(range(size))} for name, size in DOMAINS.items()}
    columns["x"] = {"type": "float", "lower": 0, "upper": 10}
    policy = {"budget": {"epsilon": 1e9}, "dependence": {"k": 1, "eta": 0.0},
              "tables": {"t": {"columns": columns}},
              "limits": {"max_noisy_values": 10**8, "time_seconds": 3600}}
    (root / "policy.yaml").write_text(yaml.safe_dump(policy))
    return data, root / "policy.yaml"


def bounded_copy(rows: int, memory_mb: int) -> None:
    """The first per-unit COUNT(*) on a new connection, which makes the bounded copy."""
    raw = policy_dict("per_unit")
    raw["limits"] = {"memory_mb": memory_mb}
    with tempfile.TemporaryDirectory() as tmp, \
            PrivateDatabase.connect(dataset(rows).path, parse_policy(raw),
                                    Path(tmp) / "ledger.sqlite") as db:
        cpu = time.process_time()
        try:
            measured = measure(lambda: db.query(TEMPLATES["count"], epsilon=1.0))
        except ResourceLimitExceeded as exc:
            print(f"{rows:,} rows, memory_mb {memory_mb}: {exc}")
            return
        print(f"{rows:,} rows, memory_mb {memory_mb}: first per-unit query {measured.seconds:.1f} s "
              f"wall, {time.process_time() - cpu:.1f} s CPU, peak "
              f"{measured.peak_extra_bytes / 2**20:,.0f} MB above the start")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, nargs="+", default=sorted(GROUPINGS),
                        choices=sorted(GROUPINGS))
    parser.add_argument("--bounded-copy", type=int, metavar="ROWS")
    parser.add_argument("--memory-mb", type=int, default=4096)
    args = parser.parse_args(argv)
    if args.bounded_copy:
        bounded_copy(args.bounded_copy, args.memory_mb)
        return
    print(f"{args.rows:,} rows; load average at start {os.getloadavg()[0]:.1f}")
    print("| groups | aggregates | noisy values | wall s | CPU s | peak MB |")
    print("|---:|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        data, policy = make_data(Path(tmp), args.rows)
        for groups in args.groups:
            keys = ", ".join(GROUPINGS[groups])
            for label, aggregates in AGGREGATES.items():
                sql = f"SELECT {keys}, {aggregates} FROM t GROUP BY {keys}"
                with PrivateDatabase.connect(data, policy, Path(tmp) / f"{groups}{label}.sqlite",
                                             reuse=False) as db:  # timed again: charged
                    cpu = time.process_time()
                    measured = measure(lambda sql=sql, db=db: db.query(sql, epsilon=1.0))
                    cpu = time.process_time() - cpu
                values = groups * len(measured.value.aggregates)
                print(f"| {groups:,} | {label} | {values:,} | {measured.seconds:.2f} | {cpu:.2f} | "
                      f"{measured.peak_extra_bytes / 2**20:.0f} |", flush=True)


if __name__ == "__main__":
    main()
