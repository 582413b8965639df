"""The ledger's index of released answers by what they answer (a key of the normalised query,
its policy and mode) and the noise level they carry, so that the same question asked again is
found in one indexed lookup however many answers the ledger holds (docs/theory.md §22).

Kept in each charge's own transaction; a ledger written before the index gains it empty on
open, so its older answers are never reused (they are only ever charged for again)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..errors import LedgerError

STORAGE = (
    "CREATE TABLE IF NOT EXISTS reusable (analyst TEXT NOT NULL, key TEXT NOT NULL, "
    "epsilon_dp REAL NOT NULL, id INTEGER NOT NULL, PRIMARY KEY (analyst, key, epsilon_dp, id)) "
    "WITHOUT ROWID",
)
"""The index table: one row per released answer that may be reused."""

LOOKUP = ("SELECT r.id, a.answer FROM reusable r JOIN charges c ON c.id = r.id AND "
          "c.analyst = r.analyst JOIN answers a ON a.id = r.id WHERE r.analyst = ? AND "
          "r.key = ? AND r.epsilon_dp >= ? ORDER BY r.epsilon_dp DESC, r.id DESC LIMIT 1")
"""The most accurate of the analyst's answers to `key` at least as accurate as asked (a row
whose charge or stored answer another program removed is never used)."""


@dataclass(frozen=True)
class StoredAnswer:
    """A released answer found in the index: its ledger id and its stored JSON form."""

    id: int
    answer: dict


def ensure(conn: sqlite3.Connection) -> None:
    """Create the index if the ledger has none (inside the caller's write transaction)."""
    for statement in STORAGE:
        conn.execute(statement)


def record(conn: sqlite3.Connection, analyst: str, key: str, epsilon_dp: float,
           ident: int) -> None:
    """Index a charge's stored answer (inside the charge's transaction)."""
    conn.execute("INSERT INTO reusable (analyst, key, epsilon_dp, id) VALUES (?, ?, ?, ?)",
                 [analyst, key, epsilon_dp, ident])


def lookup(conn: sqlite3.Connection, path: Path, analyst: str, key: str,
           epsilon_dp: float) -> StoredAnswer | None:
    """The analyst's released answer to `key` with eps_dp >= `epsilon_dp`, or None."""
    row = conn.execute(LOOKUP, [analyst, key, epsilon_dp]).fetchone()
    if row is None:
        return None
    try:
        answer = json.loads(row[1])
    except ValueError:
        raise LedgerError(f"ledger {path}, answer {row[0]}: the stored answer is not valid "
                          "JSON; restore the ledger from a backup") from None
    return StoredAnswer(int(row[0]), answer)
