"""What always reading the bounded copy costs on a table where no unit is over the bound.

Every per-unit table is read through its bounded copy, so that nothing observable says whether
some unit is over the bound. On a table where none is, the copy holds every row; this measures,
in one run on one connection, the one-time cost of making it and each query's time reading the
copy against the same SQL reading the table itself (what was run before the copy was always
made). Run: python -m benchmarks.bounding_cost --rows 1000000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
from dpsql.engine import PrivateDatabase
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.policy_yaml import parse_policy

from benchmarks.workload import REGIONS

QUERIES = {
    "count": "SELECT COUNT(*) FROM people",
    "sum_where": "SELECT SUM(income) FROM people WHERE age > 30",
    "grouped": "SELECT region, COUNT(*), AVG(income) FROM people GROUP BY region",
}


def _policy() -> dict:
    return {"budget": {"epsilon": 1e9}, "dependence": {"k": 1, "eta": 0.0},
            "tables": {"people": {"privacy_unit": "person_id", "max_rows_per_unit": 1, "columns": {
                "age": {"type": "int", "lower": 0, "upper": 120},
                "income": {"type": "float", "lower": 0, "upper": 200000},
                "region": {"type": "str", "domain": list(REGIONS)}}}}}


def _make(path: Path, rows: int) -> None:
    """One row per unit: no unit is over the bound."""
    regions = ", ".join(f"'{r}'" for r in REGIONS)
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            f"CREATE TABLE people AS SELECT i::BIGINT AS person_id, "
            f"([{regions}])[1 + (hash(i) % {len(REGIONS)})::INTEGER] AS region, "
            f"(hash(i * 7) % 100)::INTEGER AS age, (hash(i * 13) % 200000)::DOUBLE AS income "
            f"FROM range({rows}) t(i)")


def _median_ms(conn: duckdb.DuckDBPyConnection, sql: str, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        conn.execute(sql).fetchall()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    policy = parse_policy(_policy())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "people.duckdb"
        _make(path, args.rows)
        with PrivateDatabase.connect(path, policy, Path(tmp) / "ledger.sqlite") as db:
            rewritten = {name: db.explain(sql, 1.0).rewritten_sql for name, sql in QUERIES.items()}
            key = db.ledger.hash_key
        conn = execute.open_data(path, policy)
        start = time.perf_counter()
        execute.bound_units(conn, policy.tables["people"], key)
        copy_ms = (time.perf_counter() - start) * 1e3
        kept = conn.execute("SELECT count(*) FROM dpsql_bounded.people").fetchone()[0]
        print(f"rows {args.rows}, units over the bound 0, rows in the copy {kept}")
        print(f"one-time bounded copy: {copy_ms:.0f} ms")
        print("query | through the copy (ms) | the table itself (ms) | ratio")
        for name, sql in rewritten.items():
            direct = sql.replace('dpsql_bounded.main."people"', '"people"')
            assert direct != sql
            _median_ms(conn, sql, 2)
            _median_ms(conn, direct, 2)
            copy, table = _median_ms(conn, sql, args.reps), _median_ms(conn, direct, args.reps)
            print(f"{name} | {copy:.1f} | {table:.1f} | {copy / table:.2f}")
        conn.close()


if __name__ == "__main__":
    main()
