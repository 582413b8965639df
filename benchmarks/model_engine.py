"""The engine's model mode: time of an explain (calibration and accounting) cold and cached.

    python -m benchmarks.model_engine

Prints a markdown table: for a household model (households of 10 and 50, rho in [0.2, 0.4])
and a binary chain (P(1|0) = 0.2, P(1|1) = 0.3, cap 1000, over 60 and 365 days), the
wall-clock seconds of the first `explain` of a covered query in a fresh process state (the
model's calibration by bisection, the transcript level, the largest epsilon) and of the same
explain again (calibrations and levels cached), then of a `query` that charges it. Each time
is measured once on a small table (the data is not what is timed: explain reads none).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import duckdb
import yaml
from dpsql.calibration.model_maps import chain_level, household_column_level
from dpsql.engine import PrivateDatabase
from dpsql.engine.prepare import model_calibration


def household_policy(size: int) -> dict:
    model = {"kind": "household", "table": "t", "column": "x", "sizes": {size: 1.0},
             "marginal": [0.95, 0.05], "rho": [0.2, 0.4]}
    return {"budget": {"epsilon": 10.0},
            "dependence": {"k": size, "eta": 1.0, "mode": "model", "models": [model]},
            "tables": {"t": {"columns": {"x": {"type": "bool"},
                                         "day": {"type": "int", "lower": 0, "upper": 1}}}}}


def chain_policy(days: int) -> dict:
    model = {"kind": "markov", "table": "t", "column": "x", "time": "day",
             "initial": [7 / 9, 2 / 9], "transition": [[0.8, 0.2], [0.7, 0.3]], "cap": 1000}
    return {"budget": {"epsilon": 10.0},
            "dependence": {"k": days, "eta": 1.0, "mode": "model", "models": [model]},
            "tables": {"t": {"columns": {"x": {"type": "bool"},
                                         "day": {"type": "int", "lower": 0, "upper": days - 1}}}}}


def measure(name: str, policy: dict, sql: str, folder: Path) -> str:
    """One table row: cold explain, cached explain, charged query (seconds)."""
    for cache in (household_column_level, chain_level, model_calibration):
        cache.cache_clear()
    (folder / "p.yaml").write_text(yaml.safe_dump(policy))
    ledger = folder / f"{name.replace(' ', '_')}.sqlite"
    with PrivateDatabase.connect(folder / "d.duckdb", folder / "p.yaml", ledger, create=True,
                                 reuse=False) as db:  # timed again: charged
        times = []
        for _ in range(2):
            start = time.perf_counter()
            shown = db.explain(sql, epsilon=1.0)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        db.query(sql, epsilon=1.0)
        times.append(time.perf_counter() - start)
    return (f"| {name} | {shown.epsilon_dp:.4g} | {shown.tight_epsilon_dp:.4g} | "
            + " | ".join(f"{t:.3f}" for t in times) + " |")


def main() -> None:
    rows = ["| model | model eps_dp | tight eps_dp | first explain (s) | cached explain (s) | "
            "query (s) |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with duckdb.connect(str(folder / "d.duckdb")) as conn:
            conn.execute("CREATE TABLE t AS SELECT i % 2 = 0 AS x, i % 60 AS day FROM range(1000) r(i)")
        for size in (10, 50):
            rows.append(measure(f"households of {size}", household_policy(size),
                                "SELECT COUNT(*) FROM t WHERE x", folder))
        for days in (60, 365):
            rows.append(measure(f"chain over {days} days", chain_policy(days),
                                "SELECT day, COUNT(*) FROM t WHERE x GROUP BY day", folder))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
