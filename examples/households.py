"""The bundled example: a synthetic people/households table, its policy, and three private queries.

Run `python examples/households.py`. It writes examples/out/people.duckdb, policy.yaml and a
fresh ledger, then answers a count, a grouped count and a clamped SUM with an AVG.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb
import numpy as np
import yaml

from engine import PrivateDatabase

STATES = ["CA", "NY", "TX", "WA"]


def generate(path: Path, households: int = 20_000, seed: int = 7) -> None:
    """Households of 1 to 4 people; illness spreads within a household, so records depend."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 5, size=households)
    household = np.repeat(np.arange(households), sizes)
    n = household.size
    state = np.array(STATES)[rng.integers(0, len(STATES), size=households)][household]
    outbreak = rng.random(households) < 0.2
    sick = np.where(outbreak[household], rng.random(n) < 0.7, rng.random(n) < 0.05)
    age = rng.integers(0, 95, size=n)
    income = np.round(rng.lognormal(10.5, 0.8, size=n) * (age >= 18), 2)
    path.unlink(missing_ok=True)
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE people AS SELECT * FROM (SELECT unnest($1) AS person_id, unnest($2) AS "
            "household_id, unnest($3) AS state, unnest($4) AS age, unnest($5) AS income, "
            "unnest($6) AS sick)",
            [list(range(n)), household.tolist(), state.tolist(), age.tolist(), income.tolist(),
             sick.tolist()],
        )


POLICY = {
    "budget": {"epsilon": 4.0},
    # Households of at most 4 people; one member's record shifts the others' distribution by
    # at most eta in total variation (see docs/choosing_k_eta.md for how to pick both).
    "dependence": {"k": 4, "eta": 0.05, "mode": "auto"},
    "tables": {
        "people": {
            "privacy_unit": "person_id",
            "max_rows_per_unit": 1,
            "columns": {
                "age": {"type": "int", "lower": 0, "upper": 120},
                "income": {"type": "float", "lower": 0, "upper": 500000},
                "state": {"type": "str", "domain": STATES},
                "sick": {"type": "bool"},
            },
        }
    },
}

QUERIES = [
    ("How many people are sick?", "SELECT COUNT(*) AS sick_people FROM people WHERE sick", 0.5),
    ("How many people live in each state?",
     "SELECT state, COUNT(*) AS people FROM people GROUP BY state ORDER BY state", 0.5),
    ("Total and average adult income (clamped to [0, 500000])",
     "SELECT SUM(income) AS total_income, AVG(income) AS mean_income FROM people WHERE age >= 18",
     0.5),
]


def _cell(value, halfwidth: float) -> str:
    """A noisy value with its 95% half-width; group keys as they are."""
    if halfwidth != halfwidth:  # NaN: not a noisy cell
        return str(value)
    digits = 0 if isinstance(value, int) or float(value).is_integer() else 2
    return f"{value:,.{digits}f} ± {halfwidth:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    db, policy, ledger = args.out / "people.duckdb", args.out / "policy.yaml", args.out / "ledger.sqlite"
    generate(db)
    policy.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    for stale in args.out.glob("ledger.sqlite*"):
        stale.unlink()

    with PrivateDatabase.connect(db, policy, ledger, analyst="example", create=True) as private:
        for question, sql, epsilon in QUERIES:
            result = private.query(sql, epsilon=epsilon)
            print(f"\n{question}\n  {sql}")
            print(f"  epsilon {result.epsilon} (information privacy, k={result.k}, eta={result.eta})"
                  f" -> epsilon_dp {result.epsilon_dp:.4f} via the {result.mode} bound")
            for row, ci in zip(result.df.itertuples(index=False), result.ci95.itertuples(index=False),
                               strict=True):
                cells = [_cell(v, c) for v, c in zip(row, ci, strict=True)]
                print("   ", " | ".join(f"{name}={cell}" for name, cell in zip(result.df.columns, cells,
                                                                               strict=True)))
        status = private.budget()
        print(f"\nBudget: {status.spent_ip:.3f} of {status.total} spent as the whole transcript's "
              f"information-privacy level (sum of epsilon_dp {status.spent_dp:.3f}); "
              f"{status.remaining:.3f} left.")


if __name__ == "__main__":
    main()
