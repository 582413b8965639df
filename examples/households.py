"""The bundled example: a synthetic people/households table, its policy, and three private queries.

Run `python examples/households.py`. It writes examples/out/people.duckdb, policy.yaml,
model.yaml (the generator as a household model file) and a fresh ledger, then answers two
counts of sick people, a grouped count by state and a clamped SUM with an AVG.

The policy's dependence model is not guessed: each household's records are generated from a
small exact joint distribution (HOUSEHOLD below), and k, the record-level eta and the eta of
each column set the queries read are computed from it. Beside each answer the script prints
eps_dp under record-level eta (1: group privacy), under the column-scoped eta the policy
declares, and the level the answer reaches on this generator in an exact audit.
"""

from __future__ import annotations

import argparse
import math
import shutil
from dataclasses import dataclass
from functools import cache
from itertools import product
from pathlib import Path

import duckdb
import numpy as np
import yaml
from dpsql.calibration.dependence import eta_of_pmf_columns

from dpsql import DependenceModel, PrivateDatabase, calibrate, exact_audit_vector

STATES = ["CA", "NY", "TX", "WA"]


@dataclass(frozen=True)
class Household:
    """How one household's records arise; every draw below is independent unless stated."""

    sizes: tuple[float, ...] = (0.25, 0.25, 0.25, 0.25)  # Pr[1, 2, 3, 4 members]
    state: tuple[float, ...] = (0.25, 0.25, 0.25, 0.25)  # ONE state, shared by all members
    outbreak: float = 0.2  # Pr[the household has an outbreak]
    sick_in_outbreak: float = 0.7  # each member's chance of being sick, given an outbreak
    sick_otherwise: float = 0.05  # ... given no outbreak
    adult: float = 0.8  # each member is an adult (age 18-94) or a child (0-17)


HOUSEHOLD = Household()
RECORD_AXES = (len(STATES), 2, 2)
"""A member's record as the pmf sees it: (state, sick, adult). Age within its band and income
are drawn per person from that person's band alone, so they add no dependence between people."""


def member_pmf(state: int, outbreak: bool) -> np.ndarray:
    """Pr[one member's (state, sick, adult)] given the household's state and outbreak."""
    sick = HOUSEHOLD.sick_in_outbreak if outbreak else HOUSEHOLD.sick_otherwise
    table = np.zeros(RECORD_AXES)
    table[state] = np.outer([1.0 - sick, sick], [1.0 - HOUSEHOLD.adult, HOUSEHOLD.adult])
    return table.reshape(-1)


@cache
def household_pmf(size: int) -> np.ndarray:
    """Exact joint pmf of a household of `size` members, one axis (of 16 records) per member."""
    joint = np.zeros((int(np.prod(RECORD_AXES)),) * size)
    for state, outbreak in product(range(len(STATES)), (False, True)):
        weight = HOUSEHOLD.state[state] * (HOUSEHOLD.outbreak if outbreak else 1 - HOUSEHOLD.outbreak)
        factor = member_pmf(state, outbreak)
        block = factor
        for _ in range(size - 1):
            block = np.multiply.outer(block, factor)
        joint += weight * block
    return joint


@cache
def implied_model() -> DependenceModel:
    """The (k, eta) this generator implies, computed exactly.

    Households are independent, so everyone outside a person's household is independent of
    that person and of the household together: k and eta are the largest over the sizes.
    """
    models = [DependenceModel.from_joint_pmf(household_pmf(size))
              for size, share in enumerate(HOUSEHOLD.sizes, start=1) if share > 0]
    return DependenceModel(max(m.k for m in models), max(m.eta for m in models))


COLUMN_FIELDS = {"state": 0, "sick": 1, "age": 2, "income": 2}
"""The record field each policy column is drawn from. Age and income are drawn per person from
the adult flag alone, so a set reading them is at most as dependent as one reading the flag
(a per-person random function of a field can only shrink total variation)."""

DECLARED_SETS = (("sick",), ("sick", "age"), ("age", "income"))
"""The column sets the policy declares an eta for (state, shared, keeps the default eta = 1)."""


@cache
def true_eta(columns: tuple[str, ...]) -> float:
    """eta of a column set, computed exactly from the pmf: the largest over household sizes of
    the housemates' records' TV, projected onto the fields the columns are drawn from."""
    fields = tuple(sorted({COLUMN_FIELDS[c] for c in columns}))
    return max(eta_of_pmf_columns(household_pmf(size), RECORD_AXES, fields)
               for size, share in enumerate(HOUSEHOLD.sizes, start=1) if share > 0 and size > 1)


def model_file() -> dict:
    """The generator as a `dpsql dependence eta --model` file: its eta_S are the exact ones."""
    age = {"per_person": True}  # drawn per person from the adult flag, which is independent
    return {
        "sizes": {size: share for size, share in enumerate(HOUSEHOLD.sizes, start=1)},
        "factors": {"outbreak": [1 - HOUSEHOLD.outbreak, HOUSEHOLD.outbreak]},
        "columns": {
            "state": {"values": STATES, "marginal": list(HOUSEHOLD.state), "rho": 1},
            "sick": {"values": [False, True], "factor": "outbreak",
                     "given": [[1 - HOUSEHOLD.sick_otherwise, HOUSEHOLD.sick_otherwise],
                               [1 - HOUSEHOLD.sick_in_outbreak, HOUSEHOLD.sick_in_outbreak]]},
            "age": age,
            "income": age,
        },
    }


def member_field(size: int, field: int) -> np.ndarray:
    """For every household outcome, each member's value of one record field (0 state, 1 sick,
    2 adult), stacked on a trailing member axis."""
    index = np.indices((int(np.prod(RECORD_AXES)),) * size)
    return np.stack([np.unravel_index(index[j], RECORD_AXES)[field] for j in range(size)], axis=-1)


def count_values(size: int, query: str) -> np.ndarray:
    """The integer vector one household adds to a counting query's noisy outputs."""
    if query == "sick":
        return member_field(size, 1).sum(axis=-1)[..., None]
    if query == "adults":
        return member_field(size, 2).sum(axis=-1)[..., None]
    if query == "sick adults":
        return (member_field(size, 1) * member_field(size, 2)).sum(axis=-1)[..., None]
    states = member_field(size, 0)
    return np.stack([(states == s).sum(axis=-1) for s in range(len(STATES))], axis=-1)


def audited_level(query: str, eps_per_unit: float) -> float:
    """Exact IP level of a counting query answered with geometric noise exp(-eps |r - f|).

    One household is audited at a time: the rest of the table is independent of it and only
    adds an independent term to each count, which cannot raise the level (post-processing).
    """
    return max(exact_audit_vector(household_pmf(size), eps_per_unit, count_values(size, query)).level
               for size, share in enumerate(HOUSEHOLD.sizes, start=1) if share > 0)


def generate(path: Path, households: int = 20_000, seed: int = 7) -> None:
    """Draw the table from HOUSEHOLD: sizes, a shared state, outbreaks, ages and incomes."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice(np.arange(1, len(HOUSEHOLD.sizes) + 1), size=households, p=HOUSEHOLD.sizes)
    household = np.repeat(np.arange(households), sizes)
    n = household.size
    state = np.array(STATES)[rng.choice(len(STATES), size=households, p=HOUSEHOLD.state)][household]
    outbreak = rng.random(households) < HOUSEHOLD.outbreak
    chance = np.where(outbreak, HOUSEHOLD.sick_in_outbreak, HOUSEHOLD.sick_otherwise)[household]
    sick = rng.random(n) < chance
    adult = rng.random(n) < HOUSEHOLD.adult
    age = np.where(adult, rng.integers(18, 95, size=n), rng.integers(0, 18, size=n))
    income = np.round(rng.lognormal(10.5, 0.8, size=n) * adult, 2)
    path.unlink(missing_ok=True)
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE people AS SELECT * FROM (SELECT unnest($1) AS person_id, unnest($2) AS "
            "household_id, unnest($3) AS state, unnest($4) AS age, unnest($5) AS income, "
            "unnest($6) AS sick)",
            [list(range(n)), household.tolist(), state.tolist(), age.tolist(), income.tolist(),
             sick.tolist()],
        )


FLOAT_ZERO = 1e-12
"""Below this a computed eta is the float rounding of an exact 0 (a set drawn per person: the
sums behind it differ by ~1e-16; test_age_and_income_add_no_dependence checks it exactly)."""


def declared_eta(eta: float) -> float:
    """eta rounded UP to 4 decimals (covers the float rounding of its computation), at most 1."""
    if eta < FLOAT_ZERO:
        return 0.0
    return min(1.0, math.ceil(eta * 1e4 + 1e-9) / 1e4)


def policy() -> dict:
    """The policy, declaring the k and etas computed from the generator (etas rounded up)."""
    model = implied_model()
    return {
        # Reading state makes the transcript's eta 1 (docs/theory.md §11): the four answers
        # below cost 3.86 of it, and the README's tour spends more.
        "budget": {"epsilon": 8.0},
        # Computed by implied_model() and true_eta(): households of at most 4. The shared state
        # makes the record-level eta 1 (one member's state gives the others'): group privacy,
        # eps_dp = eps / k, for any query reading state. Queries that read only the listed
        # columns get the eta of what they read.
        "dependence": {"k": model.k, "eta": declared_eta(model.eta), "mode": "auto",
                       "eta_by_columns": [{"columns": list(columns), "eta": declared_eta(true_eta(columns))}
                                          for columns in DECLARED_SETS]},
        "tables": {
            "people": {
                # One row per person and no privacy_unit: each row is one individual, so a
                # query reads only the columns it names (with a privacy unit, its bounded copy
                # would read them all, docs/theory.md §11). person_id is not queryable.
                "dependence_group": "household_id",
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
    ("How many people are sick?", "SELECT COUNT(*) AS sick_people FROM people WHERE sick", 0.5,
     "sick"),
    ("How many adults are sick?",
     "SELECT COUNT(*) AS sick_adults FROM people WHERE sick AND age >= 18", 0.5, "sick adults"),
    ("How many people live in each state?",
     "SELECT state, COUNT(*) AS people FROM people GROUP BY state ORDER BY state", 0.5, "states"),
    ("Total and average adult income (clamped to [0, 500000])",
     "SELECT SUM(income) AS total_income, AVG(income) AS mean_income FROM people WHERE age >= 18",
     0.5, None),
]
"""(question, SQL, epsilon, which count the exact audit checks; None: not a pure count)."""


def _cell(value, halfwidth: float) -> str:
    """A noisy value with its 95% half-width; group keys as they are."""
    if halfwidth != halfwidth:  # NaN: not a noisy cell
        return str(value)
    digits = 0 if isinstance(value, int) or float(value).is_integer() else 2
    return f"{value:,.{digits}f} ± {halfwidth:,.{digits}f}"


def audit_line(result, count: str | None) -> str:
    """What the generator implies for this answer: its exact audited level, or why none."""
    if count is None:
        return ("reads only age and income, drawn per person independently of everyone\n"
                f"  else: Proposition 4 gives level <= epsilon_dp = {result.epsilon_dp:.4f}")
    (aggregate,) = result.aggregates
    level = audited_level(count, 1.0 / aggregate.scale)
    return f"exact audit on the generator: level {level:.4f} <= epsilon {result.epsilon}"


def record_level_dp(epsilon: float) -> float:
    """eps_dp without column scoping: the record-level eta (1, group privacy) for every query."""
    return calibrate(epsilon, implied_model()).epsilon_dp


def main() -> None:
    """Generate the data, policy and model file, answer the queries, show both etas side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    db, policy_path = args.out / "people.duckdb", args.out / "policy.yaml"
    ledger = args.out / "ledger.sqlite"
    generate(db)
    declared = policy()
    policy_path.write_text(yaml.safe_dump(declared, sort_keys=False))
    (args.out / "model.yaml").write_text(yaml.safe_dump(model_file(), sort_keys=False))
    for stale in args.out.glob("ledger.sqlite*"):  # the ledger, its journal, prepared copies
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink()
    implied = implied_model()
    print(f"The generator implies k = {implied.k}, record-level eta = {implied.eta:.4g}, and per "
          "column set (computed exactly):")
    for columns in (("state",), *DECLARED_SETS):
        print(f"  eta{{{', '.join(columns)}}} = {true_eta(columns):.4f}")
    print(f"The policy declares k = {declared['dependence']['k']}, eta = "
          f"{declared['dependence']['eta']:g} and eta_by_columns "
          + ", ".join(f"{{{', '.join(d['columns'])}}}: {d['eta']:g}"
                      for d in declared["dependence"]["eta_by_columns"]) + ".")

    with PrivateDatabase.connect(db, policy=policy_path, ledger=ledger, analyst="example",
                                 create=True) as private:
        for question, sql, epsilon, count in QUERIES:
            result = private.query(sql, epsilon=epsilon)
            group = record_level_dp(epsilon)
            print(f"\n{question}\n  {sql}")
            print(f"  reads {', '.join(c.split('.')[-1] for c in result.columns_read)}: eta "
                  f"{result.eta:g} from {result.eta_from}")
            print(f"  epsilon {result.epsilon} -> epsilon_dp {result.epsilon_dp:.4f} via {result.mode}; "
                  f"with record-level eta 1 (group privacy) {group:.4f},\n"
                  f"  so group privacy's noise scale is {result.epsilon_dp / group:.2f}x this answer's")
            print(f"  {audit_line(result, count)}")
            for row, ci in zip(result.df.itertuples(index=False), result.ci95.itertuples(index=False),
                               strict=True):
                cells = [_cell(v, c) for v, c in zip(row, ci, strict=True)]
                print("   ", " | ".join(f"{name}={cell}" for name, cell in zip(result.df.columns, cells,
                                                                               strict=True)))
        status = private.budget()
        print(f"\nBudget: {status.spent_ip:.3f} of {status.total} spent as the whole transcript's\n"
              f"information-privacy level (sum of epsilon_dp {status.spent_dp:.3f}, composed with\n"
              f"the eta of every column read so far); the largest epsilon a next query reading no\n"
              f"new column can still ask is {status.largest_epsilon:.3f}.")


if __name__ == "__main__":
    main()
