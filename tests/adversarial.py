"""Adversarial datasets for the differential fuzzer: one schema and policy, many hostile contents.

Every dataset is a DuckDB file with the same `people` table, so one accepted query text can be
run on all of them. Each holds values an analyst's expression might trip over at run time:
NULL, NaN, infinities, INT64 extremes, values far outside the policy bounds, text that reads as
a boolean or a number, very long and non-ASCII text, infinite dates and DuckDB's extreme years,
heavy and NULL privacy units, no rows.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import yaml

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STATES = ["CA", "NY", "TX", "WA"]
LEVELS = [1, 2, 3]

POLICY = {
    "budget": {"epsilon": 100.0},  # modest; the fuzzer starts a new ledger when it runs low
    "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
    "tables": {
        "people": {
            "privacy_unit": "person_id",
            "max_rows_per_unit": 2,
            "columns": {
                "age": {"type": "int", "lower": 0, "upper": 100},
                "level": {"type": "int", "lower": 1, "upper": 3, "domain": LEVELS},
                "income": {"type": "float", "lower": 0.0, "upper": 1000.0},
                "state": {"type": "str", "domain": STATES},
                # A list (docs/theory.md §31): UNNEST reads at most 3 items of it per row.
                "note": {"type": "str", "list": {"separator": ";", "max_items": 3,
                                                 "domain": ["row", "x"]}},
                "sick": {"type": "bool"},
                "visit": {"type": "date", "lower": "2020-01-01", "upper": "2024-12-31"},
                "seen": {"type": "timestamp"},
            },
        }
    },
}

COLUMNS = ("person_id", "age", "level", "income", "state", "note", "sick", "visit", "seen")
SCHEMA = ("CREATE TABLE people (person_id BIGINT, age BIGINT, level BIGINT, income DOUBLE, "
          "state VARCHAR, note VARCHAR, sick BOOLEAN, visit DATE, seen TIMESTAMP)")

ODD_INTS = [INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, -1, 0, 1, 37, 100, 101, -(2**31) - 1,
            2**31, 2**53 + 1, 10**15, 10**18, -(10**18), 255, 127, -128]
ODD_FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1.7976931348623157e308, -1.7976931348623157e308,
              5e-324, 2.2250738585072014e-308, 1e15, 1e16, -1e300, 2.0**53 + 2, 0.5, 999.999, 1000.0]
ODD_STRINGS = ["true", "false", "TRUE", "t", "f", "x", "1e999", "-1e999", "0x7F", "0x7FFFFFFFFFFFFFFF",
               "9223372036854775808", "", " ", " 1 ", "NaN", "inf", "-inf", "Infinity", "-1", "1", "0",
               "1.5", "37", "CA", "ca", "ZZ", "é", "\u00e9t\u00e9 \U0001f4a5", "\u200b", "%", "_", "\\",
               "'", "a" * 10_000, "\U0001f600" * 3000]
# Dates at and beyond the policy's bounds, infinite, and DuckDB's extreme years (inserted as text).
ODD_DATES = ["infinity", "-infinity", "5881580-07-10", "-5877641-06-25", "0001-01-01", "9999-12-31",
             "1970-01-01", "2019-12-31", "2020-01-01", "2024-02-29", "2024-12-31", "2025-01-01"]
ODD_MOMENTS = ["infinity", "-infinity", "294247-01-10 04:00:54", "-290308-12-22 00:00:00",
               "0001-01-01 00:00:00", "9999-12-31 23:59:59.999999", "1970-01-01 00:00:00",
               "2024-02-29 23:59:59", "2024-03-10 02:30:00"]


def _ordinary(rng: np.random.Generator, n: int) -> list[tuple]:
    """Rows within the policy: ages 0..100 (37 included), incomes in bounds, in-domain keys."""
    return [(i // 2, int(rng.integers(0, 101)), int(rng.choice(LEVELS)), round(float(rng.uniform(0, 1000)), 2),
             str(rng.choice(STATES)), "row", bool(rng.random() < 0.3),
             str(np.datetime64("2020-01-01") + int(rng.integers(0, 1827))),
             str(np.datetime64("2024-01-01T00:00:00") + int(rng.integers(0, 366 * 86400))).replace("T", " "))
            for i in range(n)] + [(n, 37, 2, 37.0, "CA", "x", True, "2024-02-29", "2024-02-29 12:00:00")]


def _column_pools() -> dict[str, list]:
    return {
        "age": ODD_INTS + [None] + list(range(0, 101, 7)),
        "level": ODD_INTS + [None] + LEVELS,
        "income": ODD_FLOATS + [None],
        "state": ODD_STRINGS + [None] + STATES,
        "note": ODD_STRINGS + [None, "row"],
        "sick": [True, False, None],
        "visit": ODD_DATES + [None],
        "seen": ODD_MOMENTS + [None],
    }


def _replace(rows: list[tuple], column: str, values: list) -> list[tuple]:
    """The rows with `column` cycling through `values` (every value appears at least once)."""
    j = COLUMNS.index(column)
    return [row[:j] + (values[i % len(values)],) + row[j + 1:] for i, row in enumerate(rows)]


def datasets(rng_seed: int = 7) -> dict[str, list[tuple]]:
    """Name -> rows of every adversarial dataset; the first is ordinary data.

    `extremes` gives every row its own unit, cycles each column through its odd values (so
    every value meets several others) and adds rows that are NULL in one column or in all;
    `mixed` draws every cell at random from the ordinary and odd values, with units of one to
    a hundred rows and rows without a unit (the only dataset with NULL units, so a rule about
    them touches one dataset); `empty` has no rows."""
    rng = np.random.default_rng(rng_seed)
    base = _ordinary(rng, 120)
    pools = _column_pools()
    extremes = _replace(_replace(_replace(_replace(_replace(_replace(_replace(
        base, "income", ODD_FLOATS + [None]), "age", ODD_INTS + [None]), "level", ODD_INTS[::-1]),
        "note", ODD_STRINGS), "state", ODD_STRINGS[::-1] + STATES), "visit", ODD_DATES + [None]),
        "seen", ODD_MOMENTS[::-1] + [None])
    nulls = [tuple(None if j == k else v for j, v in enumerate(row))
             for k in range(len(COLUMNS)) for row in base[:5]] + [(None,) * len(COLUMNS)] * 3
    extremes = [(i, *row[1:]) for i, row in enumerate(extremes + nulls)]
    mixed = [
        (int(rng.integers(0, 400)) if rng.random() > 0.05 else None,
         *(pools[c][int(rng.integers(0, len(pools[c])))] for c in COLUMNS[1:]))
        for _ in range(600)
    ]
    mixed += [(1000, *row[1:]) for row in mixed[:100]]
    return {"ordinary": base, "extremes": extremes, "mixed": mixed, "empty": []}


# The same policy over other physical types the engine accepts for int and float columns. The
# engine reads them as the declared types (BIGINT, DOUBLE), so every verdict must be the one the
# other datasets get; the values are each type's extremes that BIGINT still holds (a larger one
# stops the opening: tests/test_physical_types.py).
WIDE_SCHEMA = ("CREATE TABLE people (person_id VARCHAR, age HUGEINT, level UBIGINT, "
               "income DECIMAL(18, 2), state VARCHAR, note VARCHAR, sick BOOLEAN, visit DATE, "
               "seen TIMESTAMP)")
DECIMAL_MAX = "9999999999999999.99"


def wide_rows() -> list[tuple]:
    """Rows for WIDE_SCHEMA (numbers as text, cast on insert): ordinary values, then extremes
    (BIGINT's for the integer columns, DECIMAL(18, 2)'s for income), with odd text and NULLs."""
    rng = np.random.default_rng(11)
    ordinary = [(f"u{i // 2}", str(v[1]), str(v[2]), str(v[3]), v[4], v[5], v[6], v[7], v[8])
                for i, v in enumerate(_ordinary(rng, 40))]
    ages = [str(INT64_MAX), str(INT64_MIN), str(10**18), str(INT64_MAX - 1), "37", None]
    levels = [str(INT64_MAX), "0", str(2**62), "1", "2", None]
    incomes = [DECIMAL_MAX, "-" + DECIMAL_MAX, "0.01", "-0.01", "1000.00", None]
    extremes = [(f"x{i}", ages[i % len(ages)], levels[(i + 1) % len(levels)],
                 incomes[(i + 2) % len(incomes)], ODD_STRINGS[i % len(ODD_STRINGS)],
                 ODD_STRINGS[-1 - i % len(ODD_STRINGS)], [True, False, None][i % 3],
                 ODD_DATES[i % len(ODD_DATES)], ODD_MOMENTS[i % len(ODD_MOMENTS)]) for i in range(36)]
    return ordinary + extremes


def write_dataset(path: Path, rows: list[tuple], schema: str = SCHEMA) -> Path:
    """A DuckDB file holding `rows` in `schema` (by default the shared one)."""
    with duckdb.connect(str(path)) as conn:
        conn.execute(schema)
        if rows:
            conn.executemany(f"INSERT INTO people VALUES ({', '.join('?' * len(COLUMNS))})", rows)
    return path


def write_policy(path: Path) -> Path:
    path.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    return path


# The same datasets joined (docs/theory.md §25): a private `trips` table of the same unit, three
# trips per people row (so heavy units stay heavy, NULL units stay NULL and odd incomes become
# odd distances), and two public lookups, `states` (keyed by state) reaching `zones` (keyed by
# zone), identical in every dataset.
JOIN_POLICY = {
    **POLICY,
    "tables": {
        **POLICY["tables"],
        "trips": {"privacy_unit": "person_id", "max_rows_per_unit": 3, "columns": {
            "km": {"type": "float", "lower": 0.0, "upper": 500.0},
            "mode": {"type": "str", "domain": ["bus", "car"]}}},
        "states": {"public": True, "key": "state", "columns": {
            "state": {"type": "str", "domain": STATES},
            "zone": {"type": "int", "lower": 0, "upper": 2}}},
        "zones": {"public": True, "key": "zone", "columns": {
            "zone": {"type": "int"}, "band": {"type": "str", "domain": ["north", "south"]}}},
    },
}


def add_join_tables(path: Path) -> Path:
    """Add `trips`, `states` and `zones` to a dataset written by `write_dataset`."""
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE trips AS SELECT person_id, TRY_CAST(income AS DOUBLE) * k AS km, "
                     "CASE WHEN sick THEN 'bus' WHEN NOT sick THEN 'car' END AS mode "
                     "FROM people, range(3) t(k)")
        conn.execute("CREATE TABLE states AS SELECT * FROM (VALUES ('CA', 0), ('NY', 1), ('TX', 2), "
                     "('WA', 0)) t(state, zone)")
        conn.execute("CREATE TABLE zones AS SELECT * FROM (VALUES (0, 'north'), (1, 'south'), "
                     "(2, 'south')) t(zone, band)")
    return path


def write_join_policy(path: Path) -> Path:
    path.write_text(yaml.safe_dump(JOIN_POLICY, sort_keys=False))
    return path
