"""The engine's fixed cost per query on a warm connection: a table small enough that the
DuckDB work is negligible, so what is measured is parse, plan, calibration, admission, the
durable charge, noise and post-processing.

Run: `python -m benchmarks.fixed_cost [--repeats 400]`. Prints a Markdown section.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import yaml

from benchmarks.workload import policy_dict
from dpsql import PrivateDatabase

QUERIES = {
    "count": "SELECT COUNT(*) AS n FROM people",
    "filtered_count": "SELECT COUNT(*) AS n FROM people WHERE age >= 40",
    "grouped_count": "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "avg": "SELECT AVG(income) AS mean FROM people",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = Path(work) / "people.duckdb"
        with duckdb.connect(str(data)) as conn:
            conn.execute("CREATE TABLE people AS SELECT i // 2 AS person_id, "
                         "'R' || lpad((i % 50)::VARCHAR, 2, '0') AS region, (i % 111) - 5 AS age, "
                         "(i % 997) * 13.0 AS income FROM range(10000) t(i)")
        copy = Path(work) / "plain.duckdb"
        shutil.copyfile(data, copy)
        rows = []
        for policy_name in ("row_level", "per_unit"):
            policy = Path(work) / f"{policy_name}.yaml"
            policy.write_text(yaml.safe_dump(policy_dict(policy_name)))
            private = PrivateDatabase.connect(data, policy, Path(work) / f"{policy_name}.sqlite", create=True)
            plain = duckdb.connect(str(copy), read_only=True)  # a file of its own: one config each
            for name, sql in QUERIES.items():
                for _ in range(5):
                    private.query(sql, epsilon=1.0)
                    plain.execute(sql).fetchall()
                engine, raw = [], []
                for _ in range(args.repeats):  # alternate, so both see the same machine
                    start = time.perf_counter()
                    private.query(sql, epsilon=1.0)
                    engine.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    plain.execute(sql).fetchall()
                    raw.append(time.perf_counter() - start)
                e, p = statistics.median(engine) * 1000, statistics.median(raw) * 1000
                rows.append(f"| {policy_name} | {name} | {p:.2f} | {e:.2f} | {e - p:.2f} |")
            private.close()
            plain.close()
    print("### Fixed cost per query on a warm connection (10,000 rows)\n")
    print(f"Command: `python -m benchmarks.fixed_cost --repeats {args.repeats}`\n")
    print("| policy | template | plain DuckDB ms | dpsql ms | dpsql - plain ms |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\nMedians of {args.repeats} alternating runs; dpsql's time includes the durable sqlite charge.")


if __name__ == "__main__":
    main()
