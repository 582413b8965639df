"""Speed: dpsql end to end (Python API) against the same SQL in plain DuckDB, same process."""

from __future__ import annotations

import cProfile
import pstats
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
from dpsql.engine import PrivateDatabase
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.backends.duckdb_execute import bounded_copy_sql
from dpsql.engine.policy_yaml import parse_policy

from benchmarks.generate import Dataset
from benchmarks.memory import measure
from benchmarks.workload import EPSILON, POLICIES, TEMPLATES, applies, policy_dict

PLAN_TEMPLATE = "grouped_count_sum_avg"


@dataclass(frozen=True)
class SpeedRow:
    """One (size, policy, template): medians over reps, ratio = engine / plain."""

    rows: int
    policy: str
    template: str
    reps: int
    engine_ms: float
    plain_ms: float
    ratio: float
    engine_peak_mb: float
    plain_peak_mb: float
    relative_error: float


def cells(rows: list[tuple], grouped: bool) -> dict[tuple, float]:
    """(group key, column index) -> value, for comparing answers cell by cell."""
    out = {}
    for row in rows:
        key, values = (row[0], row[1:]) if grouped else (None, row)
        for j, value in enumerate(values):
            out[(key, j)] = 0.0 if value is None else float(value)
    return out


def relative_error(noisy: dict[tuple, float], exact: dict[tuple, float]) -> float:
    """Mean over cells of |noisy - exact| / max(|exact|, 1); exact is the plain answer."""
    errors = [abs(noisy.get(cell, 0.0) - value) / max(abs(value), 1.0)
              for cell, value in exact.items()]
    return statistics.fmean(errors) if errors else 0.0


def first_query_ms(data: Dataset, policy: str) -> float:
    """The first query on a new connection: for per_unit it includes making the bounded copy."""
    parsed = parse_policy(policy_dict(policy))
    with tempfile.TemporaryDirectory() as tmp, \
            PrivateDatabase.connect(data.path, parsed, Path(tmp) / "ledger.sqlite",
                                    create=True, reuse=False) as db:  # timed again: charged
        return measure(lambda: db.query(TEMPLATES["count"], EPSILON)).seconds * 1e3


def bench_policy(data: Dataset, policy: str, reps: int) -> list[SpeedRow]:
    """Time every template under one policy: warm-up, then engine and plain alternately."""
    parsed = parse_policy(policy_dict(policy))
    results = []
    with tempfile.TemporaryDirectory() as tmp, \
            PrivateDatabase.connect(data.path, parsed, Path(tmp) / "ledger.sqlite",
                                    create=True, reuse=False) as db:  # timed again: charged
        plain = execute.open_data(data.path, parsed)
        try:
            for name, sql in TEMPLATES.items():
                if applies(name, policy):
                    results.append(_bench_template(db, plain, data.rows, policy, name, sql, reps))
        finally:
            plain.close()
    return results


def _bench_template(db: PrivateDatabase, plain: duckdb.DuckDBPyConnection, rows: int,
                    policy: str, name: str, sql: str, reps: int) -> SpeedRow:
    grouped = "GROUP BY" in sql
    db.query(sql, EPSILON)
    exact_rows = plain.execute(sql).fetchall()
    exact = cells(exact_rows, grouped)
    engine, base, errors = [], [], []
    for _ in range(reps):
        private = measure(lambda: db.query(sql, EPSILON))
        engine.append(private)
        frame = private.value.df
        errors.append(relative_error(cells(list(frame.itertuples(index=False)), grouped), exact))
        base.append(measure(lambda: plain.execute(sql).fetchall()))
    engine_s = statistics.median(m.seconds for m in engine)
    plain_s = statistics.median(m.seconds for m in base)
    return SpeedRow(
        rows=rows, policy=policy, template=name, reps=reps,
        engine_ms=engine_s * 1e3, plain_ms=plain_s * 1e3, ratio=engine_s / plain_s,
        engine_peak_mb=max(m.peak_extra_bytes for m in engine) / 2**20,
        plain_peak_mb=max(m.peak_extra_bytes for m in base) / 2**20,
        relative_error=statistics.fmean(errors),
    )


@dataclass(frozen=True)
class BoundingPlan:
    """The per-unit bounding work: the one-time set-up and the per-query plan."""

    setup_sql: str  # creates the bounded copy of the table, once per table and connection
    setup_ms: float
    setup_peak_mb: float  # resident memory above the start while making the copy
    kept_rows: int
    sql: str  # the rewritten query for the grouped template
    profile: str  # DuckDB's EXPLAIN ANALYZE of it


def bounding_plan(data: Dataset) -> BoundingPlan:
    """Time the one-time bounding on a fresh connection opened like the engine's, then profile
    the rewritten grouped query with DuckDB's EXPLAIN ANALYZE."""
    parsed = parse_policy(policy_dict("per_unit"))
    table = parsed.tables["people"]
    with tempfile.TemporaryDirectory() as tmp, \
            PrivateDatabase.connect(data.path, parsed, Path(tmp) / "ledger.sqlite",
                                    create=True) as db:
        explained = db.explain(TEMPLATES[PLAN_TEMPLATE], EPSILON)
        sql, key = explained.rewritten_sql, db.ledger.hash_key
        read = {c.split(".", 1)[1] for c in explained.columns_read if c.startswith("people.")}
    conn = execute.open_data(data.path, parsed)
    try:
        timed = measure(lambda: execute.bound_units(conn, table, key))
        count = conn.execute("SELECT count(*) FROM dpsql_bounded.people").fetchone()[0]
        execute.bound_units(conn, table, key, read)  # the copy of the columns the query reads
        profile = conn.execute("EXPLAIN ANALYZE " + sql).fetchall()[0][1]
    finally:
        conn.close()
    return BoundingPlan(bounded_copy_sql(table, key, False), timed.seconds * 1e3,
                        timed.peak_extra_bytes / 2**20, count, sql, profile)


def run(data: Dataset, reps: int) -> list[dict]:
    """Every policy and template at one size, as plain dicts for the JSON results."""
    return [asdict(row) for policy in POLICIES for row in bench_policy(data, policy, reps)]


STEPS = {
    "rewritten query in DuckDB": ("duckdb_execute.py", "run"),
    "post-processing (in-memory DuckDB)": ("postprocess.py", "finish"),
    "ledger charge (sqlite, synchronous)": ("ledger.py", "charge"),
    "noise (OpenDP)": ("noise.py", "release"),
}


def breakdown(data: Dataset, queries: int = 10) -> dict[str, dict[str, float]]:
    """Where end-to-end time goes, per policy: mean ms per query in each step (cProfile)."""
    sql = TEMPLATES["grouped_count_sum_avg"]
    out = {}
    for policy in POLICIES:
        parsed = parse_policy(policy_dict(policy))
        with tempfile.TemporaryDirectory() as tmp, \
                PrivateDatabase.connect(data.path, parsed, Path(tmp) / "ledger.sqlite",
                                        create=True, reuse=False) as db:
            db.query(sql, EPSILON)
            profile = cProfile.Profile()
            profile.runcall(lambda: [db.query(sql, EPSILON) for _ in range(queries)])
        stats = pstats.Stats(profile).stats
        total = sum(v[3] for (file, _, fn), v in stats.items()
                    if file.endswith("database.py") and fn == "query")
        row = {"end to end": total / queries * 1e3}
        for label, (file, fn) in STEPS.items():
            row[label] = sum(v[3] for (f, _, name), v in stats.items()
                             if f.endswith(file) and name == fn) / queries * 1e3
        out[policy] = row
    return out
