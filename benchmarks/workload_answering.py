"""Workload answering against asking separately: all 1- and 2-way marginals of a 50 x 10 x 2 x 5
public domain, per-cell RMSE, interval coverage and the ledger's charge over repeated runs.

    .venv/bin/python -m benchmarks.workload_answering [--records 200000] [--runs 10] [--sums]

Prints one markdown row per table: a row-level table (k = 1, eta = 0) and a household table
(privacy unit `household`, up to 3 rows each, k = 2, eta = 0.3). With --sums the marginals are
SUM(v) of a column clamped to [0, 100] instead of COUNT(*)."""

from __future__ import annotations

import argparse
import itertools
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import yaml
from dpsql.engine.database import PrivateDatabase

SIZES = {"a": 50, "b": 10, "c": 2, "d": 5}
EPSILON = 1.0
UPPER = 100  # the summed column v is an integer in [0, UPPER]


def values(column: str) -> list:
    return [False, True] if column == "c" else [f"{column}{i:02d}" for i in range(SIZES[column])]


def statements(sums: bool = False) -> list[str]:
    """Every 1- and 2-way marginal (ten GROUP BY counts, or sums of v, 997 cells)."""
    cell = "SUM(v) AS s" if sums else "COUNT(*) AS n"
    one = [f"SELECT {x}, {cell} FROM t GROUP BY {x}" for x in SIZES]
    two = [f"SELECT {x}, {y}, {cell} FROM t GROUP BY {x}, {y}"
           for x, y in itertools.combinations(SIZES, 2)]
    return one + two


def policy(household: bool) -> dict:
    columns = {c: {"type": "bool"} if c == "c" else {"type": "str", "domain": values(c)}
               for c in SIZES}
    columns["v"] = {"type": "int", "lower": 0, "upper": UPPER}
    table: dict = {"columns": columns}
    dependence = {"k": 1, "eta": 0.0, "mode": "auto"}
    if household:
        table = {"privacy_unit": "household", "max_rows_per_unit": 3, **table}
        dependence = {"k": 2, "eta": 0.3, "mode": "auto"}
    return {"budget": {"epsilon": 1e6}, "dependence": dependence, "tables": {"t": table}}


def make_table(path: Path, records: int, household: bool, seed: int = 0) -> Path:
    """`records` rows with skewed values; households of 1 to 3 rows (within the bound); v drawn
    from its own generator, so the keys are the same with or without it."""
    rng = np.random.default_rng(seed)
    data = {}
    for column, n in SIZES.items():
        p = rng.dirichlet(np.ones(n))
        picked = rng.choice(n, size=records, p=p)
        data[column] = (picked == 1).tolist() if column == "c" else \
            np.array(values(column))[picked].tolist()
    units = np.repeat(np.arange(records), rng.integers(1, 4, size=records))[:records]
    v = np.random.default_rng(seed + 1).binomial(UPPER, 0.3, size=records)
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT unnest($1) AS household, unnest($2) AS a, "
                     "unnest($3) AS b, unnest($4) AS c, unnest($5) AS d, unnest($6) AS v",
                     [units.tolist(), data["a"], data["b"], data["c"], data["d"], v.tolist()])
    return path


def truth(path: Path, sql: str) -> dict[tuple, float]:
    """The exact answer of one marginal, keyed by its group values."""
    with duckdb.connect(str(path), read_only=True) as conn:
        rows = conn.execute(sql).fetchall()
    return {tuple(r[:-1]): float(r[-1]) for r in rows}


@dataclass(frozen=True)
class Measured:
    rmse_workload: float
    rmse_separate: float
    coverage: float  # share of workload cells whose 95% interval covered the truth
    cells: int  # cells counted in the coverage
    charges_exact: bool  # every workload charged exactly its epsilon_dp, once
    epsilon_dp: float
    expected_workload: float  # the per-cell RMSE explain_many promised
    expected_separate: float


def measure(folder: Path, records: int, runs: int, household: bool,
            sums: bool = False) -> Measured:
    """Run the workload `runs` times and the ten statements separately at EPSILON / 10 each
    `runs` times, on one table; pool the squared errors of every cell."""
    data = make_table(folder / "t.duckdb", records, household)
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy(household)))
    queries = statements(sums)
    exact = [truth(data, q) for q in queries]
    db = PrivateDatabase.connect(data, folder / "policy.yaml", folder / "ledger.sqlite",
                                 create=True, reuse=False)  # every run draws fresh noise
    try:
        explained = db.explain_many(queries, epsilon=EPSILON)
        cells = sum(len(e) for e in exact)
        expected_w = math.sqrt(sum(e.rmse_workload ** 2 * len(x)
                                   for e, x in zip(explained.errors, exact, strict=True)) / cells)
        expected_s = math.sqrt(sum(e.rmse_separate ** 2 * len(x)
                                   for e, x in zip(explained.errors, exact, strict=True)) / cells)
        sq_w, sq_s, covered, counted, exact_charge = 0.0, 0.0, 0, 0, True
        for _ in range(runs):
            before, entries = db.budget().spent_dp, len(db.history())
            result = db.query_many(queries, epsilon=EPSILON)
            exact_charge &= math.isclose(db.budget().spent_dp - before, result.epsilon_dp,
                                         rel_tol=1e-12) and len(db.history()) == entries + 1
            for answer, x in zip(result.answers, exact, strict=True):
                for row, ci in zip(answer.df.itertuples(index=False),
                                   answer.ci95.itertuples(index=False), strict=True):
                    error = row[-1] - x.get(tuple(row[:-1]), 0.0)
                    sq_w += error ** 2
                    covered += abs(error) <= ci[-1]
                    counted += 1
            for q, x in zip(queries, exact, strict=True):
                single = db.query(q, epsilon=EPSILON / len(queries))
                for row in single.df.itertuples(index=False):
                    sq_s += (row[-1] - x.get(tuple(row[:-1]), 0.0)) ** 2
        return Measured(math.sqrt(sq_w / counted), math.sqrt(sq_s / counted), covered / counted,
                        counted, exact_charge, explained.epsilon_dp, expected_w, expected_s)
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--sums", action="store_true", help="SUM(v) marginals, not COUNT(*)")
    args = parser.parse_args()
    print("| table | epsilon_dp | per-cell RMSE, workload (expected) | separately at ε/10 "
          "(expected) | ratio | coverage of 95% intervals | charge exact |")
    print("|---|---|---|---|---|---|---|")
    for household in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            m = measure(Path(tmp), args.records, args.runs, household, args.sums)
        name = "household, k=2, eta=0.3, m=3" if household else "row-level, k=1, eta=0"
        name += ", SUM(v), v in [0, 100]" if args.sums else ""
        print(f"| {name} | {m.epsilon_dp:.4g} | {m.rmse_workload:.2f} ({m.expected_workload:.2f}) "
              f"| {m.rmse_separate:.2f} ({m.expected_separate:.2f}) | "
              f"{m.rmse_separate / m.rmse_workload:.2f}x | {m.coverage:.4f} of {m.cells} | "
              f"{m.charges_exact} |")


if __name__ == "__main__":
    main()
