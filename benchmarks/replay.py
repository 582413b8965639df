"""A replayed multi-analyst session: how many of its queries a fixed budget answers with and
without reuse (the same query again, and marginals, totals and kept groups of released tables
answered from their cells at no charge, docs/theory.md §22).

    .venv/bin/python -m benchmarks.replay [--queries 300] [--analysts 3] [--budget 12] [--seed 0]

Each analyst asks, in a random order drawn once from `--seed`, queries from one pool of
overlapping statistics: fine tables (state × sick, state × age band), their marginals and totals,
groups kept by `WHERE state IN (...)`, each at an epsilon of its kind, many of them asked again.
The same session is replayed on two fresh ledgers of one policy (global budget `--budget`); a
query refused for the budget is counted unanswered and the session goes on (a later one may
still be derived for free). Prints one markdown row per setting."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import yaml
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.errors import BudgetExhausted

STATES = ["CA", "NY", "TX", "WA"]
BANDS = ["young", "middle", "old"]
FINE = "SELECT state, sick, COUNT(*) AS n, SUM(income) AS income FROM people GROUP BY state, sick"
BANDED = "SELECT state, band, COUNT(*) AS n FROM people GROUP BY state, band"

# (query, epsilon, weight): how often the pool's analysts ask it.
POOL = [
    (FINE, 1.0, 3),
    (BANDED, 1.0, 2),
    ("SELECT state, COUNT(*) AS n FROM people GROUP BY state", 0.2, 4),
    ("SELECT sick, COUNT(*) AS n FROM people GROUP BY sick", 0.2, 3),
    ("SELECT band, COUNT(*) AS n FROM people GROUP BY band", 0.2, 3),
    ("SELECT COUNT(*) AS n FROM people", 0.1, 4),
    ("SELECT SUM(income) AS income FROM people", 0.1, 2),
    ("SELECT sick, COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY') GROUP BY sick", 0.2, 2),
    ("SELECT state, COUNT(*) AS n FROM people WHERE band = 'old' GROUP BY state", 0.3, 2),
    ("SELECT state, AVG(income) AS mean FROM people GROUP BY state", 0.5, 2),
    ("SELECT state, COUNT(*) AS n FROM people WHERE income > 500 GROUP BY state", 0.3, 1),
]


def policy(budget: float) -> dict:
    return {"budget": {"epsilon": budget}, "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
            "tables": {"people": {"privacy_unit": "person_id", "max_rows_per_unit": 1, "columns": {
                "state": {"type": "str", "domain": STATES},
                "band": {"type": "str", "domain": BANDS},
                "sick": {"type": "bool"},
                "income": {"type": "float", "lower": 0.0, "upper": 1000.0}}}}}


def make_table(path: Path, rows: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE people AS SELECT * FROM (SELECT unnest($1) AS person_id, "
            "unnest($2) AS state, unnest($3) AS band, unnest($4) AS sick, unnest($5) AS income)",
            [list(range(rows)), np.array(STATES)[rng.integers(0, 4, rows)].tolist(),
             np.array(BANDS)[rng.integers(0, 3, rows)].tolist(),
             (rng.random(rows) < 0.3).tolist(), np.round(rng.uniform(0, 1000, rows), 2).tolist()])
    return path


def session(queries: int, analysts: int, seed: int) -> list[tuple[str, str, float]]:
    """(analyst, sql, epsilon) in the order they are asked: analysts take turns at random."""
    rng = np.random.default_rng(seed)
    weights = np.array([w for _, _, w in POOL], dtype=float)
    picks = rng.choice(len(POOL), size=queries, p=weights / weights.sum())
    who = rng.integers(0, analysts, size=queries)
    return [(f"analyst{a}", POOL[i][0], POOL[i][1]) for a, i in zip(who, picks, strict=True)]


def replay(data: Path, folder: Path, budget: float, asked: list[tuple[str, str, float]],
           reuse: bool) -> dict:
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy(budget)))
    answered = derived = summed = refused = 0
    start = time.perf_counter()
    with PrivateDatabase.connect(data, folder / "policy.yaml", folder / "ledger.sqlite",
                                 create=True, reuse=reuse) as db:
        for analyst, sql, epsilon in asked:
            try:
                result = db.query(sql, epsilon=epsilon, analyst=analyst)
            except BudgetExhausted:
                refused += 1
                continue
            answered += 1
            derived += bool(result.derived_from)
            summed += any("summed over" in a.function for a in result.aggregates)
        spent = db.budget().spent_dp
    return {"answered": answered, "derived": derived, "summed": summed, "refused": refused,
            "spent_dp": spent,
            "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--analysts", type=int, default=3)
    parser.add_argument("--budget", type=float, default=12.0)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    asked = session(args.queries, args.analysts, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_table(root / "people.duckdb", args.rows, args.seed)
        print("| reuse | queries asked | answered | of which derived at cost 0 | of those, summed "
              "from released cells | refused (budget) | eps_dp spent | seconds |")
        print("|---|---|---|---|---|---|---|---|")
        for reuse in (False, True):
            folder = root / ("reuse" if reuse else "fresh")
            folder.mkdir()
            r = replay(data, folder, args.budget, asked, reuse)
            print(f"| {'on' if reuse else 'off'} | {len(asked)} | {r['answered']} | "
                  f"{r['derived']} | {r['summed']} | {r['refused']} | {r['spent_dp']:.4g} | "
                  f"{r['seconds']:.1f} |")


if __name__ == "__main__":
    main()
