"""Shared test data: a small synthetic people table in DuckDB and its policy."""

from __future__ import annotations

import copy
import shutil
import sqlite3
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml
from dpsql.engine.accounting.ledger import Charge, Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding, binding_of
from dpsql.engine.policy_yaml import load_policy

STATES = ["CA", "NY", "TX", "WA"]

BASE_POLICY = {
    "budget": {"epsilon": 1000.0},
    "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
    "tables": {
        "people": {
            "privacy_unit": "person_id",
            "max_rows_per_unit": 2,
            "columns": {
                "age": {"type": "int", "lower": 0, "upper": 100},
                "income": {"type": "float", "lower": 0.0, "upper": 1000.0},
                "state": {"type": "str", "domain": STATES},
                "sick": {"type": "bool"},
                "note": {"type": "str"},
            },
        }
    },
}


def make_people(path: Path, units: int = 300, seed: int = 1) -> Path:
    """A people table where units have 1 to 4 rows (some above the per-unit bound of 2)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 5, size=units)
    person = np.repeat(np.arange(units), rows)
    n = person.size
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE people AS SELECT * FROM (SELECT unnest($1) AS person_id, unnest($2) AS state,"
            " unnest($3) AS age, unnest($4) AS income, unnest($5) AS sick, unnest($6) AS note)",
            [person.tolist(), np.array(STATES + ["ZZ"])[rng.integers(0, 5, n)].tolist(),
             rng.integers(-5, 110, n).tolist(), np.round(rng.uniform(-50, 1200, n), 2).tolist(),
             (rng.random(n) < 0.3).tolist(), ["row"] * n],
        )
    return path


# A public lookup table keyed by state (docs/theory.md §16): `add_regions` writes its rows.
REGIONS = [("CA", "West", 39), ("NY", "East", 19), ("TX", "South", 30), ("WA", "West", 8)]
REGIONS_TABLE = {
    "public": True,
    "key": "state",
    "columns": {
        "state": {"type": "str", "domain": STATES},
        "region": {"type": "str", "domain": ["East", "South", "West"]},
        "population": {"type": "int", "lower": 0, "upper": 50},
    },
}


def people_in_memory(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with BASE_POLICY's `people` table holding `rows` of (person_id,
    state, age, income, sick), each with the note 'row'."""
    conn = duckdb.connect(":memory:")
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age INTEGER, "
                 "income DOUBLE, sick BOOLEAN, note VARCHAR)")
    if rows:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, 'row')", rows)
    return conn


def add_regions(path: Path, rows: list[tuple] = REGIONS) -> Path:
    """Add the public `regions` table to a DuckDB database (a copy: the file is written)."""
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE OR REPLACE TABLE regions (state VARCHAR, region VARCHAR, population BIGINT)")
        if rows:
            conn.executemany("INSERT INTO regions VALUES (?, ?, ?)", rows)
    return path


def with_regions(tables: dict | None = None) -> dict:
    """A `tables` section (BASE_POLICY's by default) with the public `regions` table added."""
    section = copy.deepcopy(tables or BASE_POLICY["tables"])
    section["regions"] = copy.deepcopy(REGIONS_TABLE)
    return {"tables": section}


# A private parent table of households (docs/theory.md §16) that people reference by
# household_id: `add_households` writes it, one key repeated and one person row matching none.
HOUSEHOLDS = [(0, "East", 3), (1, "West", 5), (1, "East", 9), (2, "West", None), (None, "East", 2)]
HOUSEHOLDS_TABLE = {
    "parent_of": {"table": "people", "foreign_key": "household_id"},
    "key": "household_id",
    "columns": {
        "household_id": {"type": "int"},
        "area": {"type": "str", "domain": ["East", "West"]},
        "rooms": {"type": "int", "lower": 0, "upper": 10},
    },
}


def add_households(path: Path, rows: list[tuple] = HOUSEHOLDS) -> Path:
    """Give people a household_id (person_id // 3, NULL for every seventh person) and add the
    private `households` table to a DuckDB database (a copy: the file is written)."""
    with duckdb.connect(str(path)) as conn:
        conn.execute("ALTER TABLE people ADD COLUMN household_id BIGINT")
        conn.execute("UPDATE people SET household_id = CASE WHEN person_id % 7 = 6 THEN NULL "
                     "ELSE person_id // 3 END")
        conn.execute("CREATE OR REPLACE TABLE households (household_id BIGINT, area VARCHAR, "
                     "rooms BIGINT)")
        conn.executemany("INSERT INTO households VALUES (?, ?, ?)", rows)
    return path


def with_households(tables: dict | None = None) -> dict:
    """A `tables` section (BASE_POLICY's by default) with people.household_id and the parent
    `households` table added."""
    section = copy.deepcopy(tables or BASE_POLICY["tables"])
    section["people"]["columns"]["household_id"] = {"type": "int"}
    section["households"] = copy.deepcopy(HOUSEHOLDS_TABLE)
    return {"tables": section}


# A second private table with people's privacy unit (docs/theory.md §16): each person's visits,
# at most 3 kept per person; `add_visits` writes them.
VISITS_TABLE = {
    "privacy_unit": "person_id",
    "max_rows_per_unit": 3,
    "columns": {
        "days": {"type": "int", "lower": 0, "upper": 30},
        "urgent": {"type": "bool"},
        "clinic": {"type": "str", "domain": ["north", "south"]},
    },
}


def add_visits(path: Path) -> Path:
    """Add the private `visits` table to a DuckDB database (a copy: the file is written): 0 to
    5 visits per person of people's first 200 ids, a few with a NULL person_id."""
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE OR REPLACE TABLE visits AS SELECT CASE WHEN i % 97 = 0 THEN NULL "
                     "ELSE (i * 7) % 200 END AS person_id, (i * 11) % 40 AS days, i % 3 = 0 AS "
                     "urgent, ['north', 'south', 'east'][1 + i % 3] AS clinic FROM range(500) t(i)")
    return path


def with_visits(tables: dict | None = None) -> dict:
    """A `tables` section (BASE_POLICY's by default) with the private `visits` table added."""
    section = copy.deepcopy(tables or BASE_POLICY["tables"])
    section["visits"] = copy.deepcopy(VISITS_TABLE)
    return {"tables": section}


def write_policy(path: Path, changes: dict | None = None) -> Path:
    """BASE_POLICY with top-level sections replaced by `changes`, written as YAML."""
    policy = copy.deepcopy(BASE_POLICY)
    policy.update(copy.deepcopy(changes or {}))
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def create_ledger(path: Path, policy: Path | LedgerBinding) -> Path:
    """Create a new ledger bound to a policy file (or a binding), as `dpsql ledger init` does:
    the one place tests create ledgers."""
    binding = policy if isinstance(policy, LedgerBinding) else binding_of(load_policy(policy))
    Ledger(path, binding, create=True).close()
    return path


def record_charge(ledger: Ledger, charge: Charge) -> None:
    """Write a charge as it is, without admission: for tests that build ledgers by hand."""
    ledger.charge(lambda state: (charge, None))


def charge_count(ledger: Path) -> int:
    """How many answers a ledger has charged, read directly from its file."""
    with sqlite3.connect(ledger) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the `dpsql` command in-process: (exit code, standard output, standard error)."""
    from dpsql.engine.cli import main

    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def cli_paths(setup) -> list[str]:
    """The --db, --policy and --ledger options of a test's setup."""
    return ["--db", str(setup.db), "--policy", str(setup.policy), "--ledger", str(setup.ledger)]


def with_every_join(root: Path, people_db: Path, budget: float | None = None) -> tuple[Path, Path]:
    """A copy of the people data in `root` with the public `regions`, the parent `households`
    and the private `visits` tables beside it, and its policy (with `budget` if given)."""
    db = add_visits(add_households(add_regions(Path(shutil.copy(people_db, root / "people.duckdb")))))
    tables = with_visits(with_households(with_regions()["tables"])["tables"])
    extra = {} if budget is None else {"budget": {"epsilon": budget}}
    return db, write_policy(root / "policy.yaml", {**extra, **tables})


def bound_plans(conn, plans, hash_key: str = "fixed-key") -> None:
    """Make every bounded copy the rewrites of `plans` read on a DuckDB connection, each
    distinct copy once: the plan's table for the columns it reads (docs/theory.md §28), each
    other table of its join tree whole and a parent table's one row per key."""
    from dpsql.engine.backends.duckdb_execute import bound_units
    from dpsql.engine.rewrite import copies_to_bound, copy_scope

    made = set()
    for plan in plans:
        for table, columns in copies_to_bound(plan):
            if table.privacy_unit is None:
                continue
            scope = copy_scope(table, columns)
            if (table.name, scope) not in made:
                made.add((table.name, scope))
                bound_units(conn, table, hash_key, scope)
