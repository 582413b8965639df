"""Synthetic people table for the speed benchmarks: skewed rows per unit, a 50-value public key."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from benchmarks.workload import REGIONS

CHUNK_UNITS = 2_000_000
DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Dataset:
    """A generated table on disk and its shape."""

    path: Path
    rows: int
    units: int
    heavy_units: dict[int, int]  # m -> number of units with more than m rows


def rows_per_unit(rng: np.random.Generator, units: int) -> np.ndarray:
    """Most units have 1-3 rows; 3% have a Pareto-tailed count (up to 2000 rows)."""
    counts = rng.choice([1, 2, 3], size=units, p=[0.6, 0.25, 0.15])
    heavy = rng.random(units) < 0.03
    tail = np.minimum(4 + np.floor(rng.pareto(1.2, heavy.sum()) * 4), 2000).astype(np.int64)
    counts[heavy] = tail
    return counts


def generate(rows: int, path: Path, seed: int = 7) -> Dataset:
    """Write `rows` rows (trimmed to exactly that many) of table people into a DuckDB file."""
    rng = np.random.default_rng(seed)
    counts = rows_per_unit(rng, max(1, rows // 2))
    while counts.sum() < rows:
        counts = np.concatenate([counts, rows_per_unit(rng, max(1, rows // 4))])
    cut = int(np.searchsorted(np.cumsum(counts), rows))
    counts = counts[: cut + 1].copy()
    counts[-1] -= counts.sum() - rows
    units = counts.size
    unit_ids = rng.permutation(units).astype(np.int64)  # ids unrelated to row order
    person = np.repeat(unit_ids, counts)
    rng.shuffle(person)  # rows of a unit are scattered through the table
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE people (person_id BIGINT, region VARCHAR, age INTEGER, "
                     "income DOUBLE)")
        regions = list(REGIONS)
        for start in range(0, rows, CHUNK_UNITS * 2):
            part = person[start:start + CHUNK_UNITS * 2]
            n = part.size
            chunk = {
                "person_id": part,
                "region_idx": rng.zipf(1.3, n).clip(1, 50).astype(np.int8),
                "age": rng.integers(-5, 111, n, dtype=np.int32),
                "income": np.round(rng.lognormal(10.5, 1.0, n), 2),
            }
            conn.register("chunk", chunk)
            conn.execute("INSERT INTO people SELECT person_id, $1[region_idx], age, income "
                         "FROM chunk", [regions])
            conn.unregister("chunk")
        conn.execute("CHECKPOINT")
    heavy = {m: int((counts > m).sum()) for m in (1, 2, 3, 5)}
    return Dataset(path, rows, units, heavy)


def dataset(rows: int) -> Dataset:
    """The benchmark table of this size, generated once and then reused."""
    path = DATA_DIR / f"people_{rows}.duckdb"
    if path.is_file():
        with duckdb.connect(str(path), read_only=True) as conn:
            n, units = conn.execute(
                "SELECT COUNT(*), COUNT(DISTINCT person_id) FROM people").fetchone()
            counts = conn.execute("SELECT COUNT(*) FROM people GROUP BY person_id").fetchnumpy()
        per_unit = next(iter(counts.values()))
        if n == rows:
            return Dataset(path, rows, units, {m: int((per_unit > m).sum()) for m in (1, 2, 3, 5)})
    return generate(rows, path)


def patterned(path: Path, rows: int, unit: bool = False) -> Path:
    """A `people` table of `rows` rows in a fixed pattern (no draw), for timing the fixed cost of
    a query: region R00 to R49, age -5 to 105, income a multiple of 13, and with `unit` two rows
    per person_id."""
    person = "i // 2 AS person_id, " if unit else ""
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE people AS SELECT {person}'R' || lpad((i % 50)::VARCHAR, 2, '0') "
                     "AS region, (i % 111) - 5 AS age, (i % 997) * 13.0 AS income "
                     f"FROM range({rows}) t(i)")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rows", type=int, nargs="+")
    for rows in parser.parse_args().rows:
        print(dataset(rows))


if __name__ == "__main__":
    main()
