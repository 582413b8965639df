"""Library checkouts with a public catalogue (docs/theory.md §32): patrons (the unit) borrow
books on the days of one week; the catalogue, keyed by book_id, names each book's title and
author with no domain, so a GROUP BY on them is released as the catalogue's distinct rows. Its
rows repeat a (title, author) pair and hold NULLs, and some checkouts name no catalogued book."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import duckdb
import yaml
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sql.public_keys import distinct_rows

GENRES = ["Fiction", "History", "Science"]
FIRST_DAY = dt.date(2024, 3, 4)
LIBRARY_POLICY = {
    "budget": {"epsilon": 1000.0},
    "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
    "tables": {
        "checkouts": {"privacy_unit": "patron", "max_rows_per_unit": 3, "columns": {
            "book_id": {"type": "int", "lower": 0, "upper": 20},
            "day": {"type": "date", "lower": "2024-03-04", "upper": "2024-03-10"},
            "seen": {"type": "timestamp", "lower": "2024-03-04 00:00:00", "upper": "2024-03-10 23:59:59"},
            "genre": {"type": "str", "domain": GENRES},
            "spent": {"type": "float", "lower": 0.0, "upper": 50.0}}},
        "catalogue": {"public": True, "key": "book_id", "columns": {
            "book_id": {"type": "int"}, "title": {"type": "str"}, "author": {"type": "str"},
            "genre": {"type": "str", "domain": GENRES}, "price": {"type": "float"}}},
    },
}
POLICY = parse_policy(copy.deepcopy(LIBRARY_POLICY))
# Book 2 repeats book 1's (title, author); books 5 and 6 have a NULL title or author; book 8's
# genre is outside the domain.
CATALOGUE = [(1, "Dune", "Herbert", "Fiction", 9.5), (2, "Dune", "Herbert", "Fiction", 12.0),
             (3, "Emma", "Austen", "Fiction", 7.0), (4, "Emma", "Tennant", "History", 8.0),
             (5, None, "Anon", "History", 1.0), (6, "Ulysses", None, "Fiction", 3.0),
             (7, "Cosmos", "Sagan", "Science", 11.0), (8, "Maus", "Spiegelman", "Comics", 6.0)]
# Its distinct (title, author) rows with no NULL, sorted: the released keys.
TITLE_AUTHOR = (("Cosmos", "Sagan"), ("Dune", "Herbert"), ("Emma", "Austen"), ("Emma", "Tennant"),
                ("Maus", "Spiegelman"))
CHECKOUT_COLUMNS = "patron BIGINT, book_id BIGINT, day DATE, seen TIMESTAMP, genre VARCHAR, spent DOUBLE"


def checkout(patron: int | None, book: int | None, day: int, hour: int = 12, genre: str | None = "Fiction",
             spent: float | None = 5.0) -> tuple:
    """One checkout row: `day` days after Monday 2024-03-04, at `hour` o'clock."""
    when = dt.datetime.combine(FIRST_DAY, dt.time()) + dt.timedelta(days=day, hours=hour)
    return (patron, book, when.date(), when, genre, spent)


def write_library(conn: duckdb.DuckDBPyConnection, checkouts: Sequence[tuple]) -> None:
    """(Re)create both tables on `conn` with these checkouts."""
    conn.execute(f"CREATE OR REPLACE TABLE checkouts ({CHECKOUT_COLUMNS})")
    if checkouts:
        conn.executemany("INSERT INTO checkouts VALUES (?, ?, ?, ?, ?, ?)", list(checkouts))
    conn.execute("CREATE OR REPLACE TABLE catalogue (book_id BIGINT, title VARCHAR, author VARCHAR, "
                 "genre VARCHAR, price DOUBLE)")
    conn.executemany("INSERT INTO catalogue VALUES (?, ?, ?, ?, ?)", CATALOGUE)


def library_files(root: Path, checkouts: Sequence[tuple]) -> tuple[Path, Path]:
    """A DuckDB file of the library and its policy file, in `root`."""
    db = root / "library.duckdb"
    with duckdb.connect(str(db)) as conn:
        write_library(conn, checkouts)
    policy = root / "library.yaml"
    policy.write_text(yaml.safe_dump(LIBRARY_POLICY, sort_keys=False))
    return db, policy


def reader(conn: duckdb.DuckDBPyConnection):
    """A `PublicRows` reading the public table on `conn` as the DuckDB backend does."""
    def read(table: str, columns: tuple[str, ...], limit: int) -> tuple[tuple, ...]:
        return tuple(conn.execute(distinct_rows(table, columns, limit).sql("duckdb")).fetchall())
    return read


def with_library(db: Path, policy: Path) -> tuple[Path, Path]:
    """The library's tables (no checkouts) added to a DuckDB file and its policy file."""
    with duckdb.connect(str(db)) as conn:
        write_library(conn, [])
    section = yaml.safe_load(policy.read_text())
    section["tables"].update(copy.deepcopy(LIBRARY_POLICY["tables"]))
    policy.write_text(yaml.safe_dump(section, sort_keys=False))
    return db, policy
