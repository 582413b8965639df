"""The ledger's index of released answers: by what they answer (a key of the normalised query,
its policy and mode) and the noise level they carry, so that the same question asked again is
found in one indexed lookup however many answers the ledger holds; and by what their cells
could be summed into (a key of the table, WHERE, mode and policy, beside the answer's groups
and columns), so that a marginal of a released finer table is found too (docs/theory.md §22).

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
    "CREATE TABLE IF NOT EXISTS summable (analyst TEXT NOT NULL, base TEXT NOT NULL, "
    "epsilon_dp REAL NOT NULL, id INTEGER NOT NULL, shape TEXT NOT NULL, "
    "PRIMARY KEY (analyst, base, epsilon_dp, id)) WITHOUT ROWID",
)
"""The index tables: one row per released answer that may be reused (`reusable`), and one per
released answer whose cells a marginal may be summed from (`summable`, with its shape)."""

LOOKUP = ("SELECT r.id, a.answer FROM reusable r JOIN charges c ON c.id = r.id AND "
          "c.analyst = r.analyst JOIN answers a ON a.id = r.id WHERE r.analyst = ? AND "
          "r.key = ? AND r.epsilon_dp >= ? ORDER BY r.epsilon_dp DESC, r.id DESC LIMIT 1")
"""The most accurate of the analyst's answers to `key` at least as accurate as asked (a row
whose charge or stored answer another program removed is never used)."""

SUMMABLE = ("SELECT s.id, s.shape, a.answer FROM summable s JOIN charges c ON c.id = s.id AND "
            "c.analyst = s.analyst JOIN answers a ON a.id = s.id WHERE s.analyst = ? AND "
            "s.base = ? ORDER BY s.epsilon_dp DESC, s.id DESC LIMIT ?")
"""The analyst's released answers over the same table, WHERE, mode and policy as `base`, most
accurate first: the candidates a marginal may be summed from."""

CANDIDATES = 32  # how many summable answers of one base a lookup reads at most


@dataclass(frozen=True)
class Entry:
    """What a charge's answer is indexed under: its key, and when its cells may be summed
    into marginals, its base and shape (as JSON)."""

    key: str
    base: str | None = None
    shape: str | None = None


@dataclass(frozen=True)
class Ask:
    """What a query looks for: the key of the same query, and the bases its marginals would
    share with a finer released answer."""

    key: str
    bases: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredAnswer:
    """A released answer found in the index: its ledger id and its stored JSON form."""

    id: int
    answer: dict


@dataclass(frozen=True)
class Summable:
    """A released answer a marginal may be summed from: its id, base, shape and answer."""

    id: int
    base: str
    shape: dict
    answer: dict


@dataclass(frozen=True)
class Found:
    """What the index holds for an `Ask`: the same query's most accurate answer at least as
    accurate as asked (or None), and the summable candidates of each base."""

    same: StoredAnswer | None
    summable: tuple[Summable, ...]


def ensure(conn: sqlite3.Connection) -> None:
    """Create the index if the ledger has none (inside the caller's write transaction)."""
    for statement in STORAGE:
        conn.execute(statement)


def record(conn: sqlite3.Connection, analyst: str, entry: Entry, epsilon_dp: float,
           ident: int) -> None:
    """Index a charge's stored answer (inside the charge's transaction)."""
    conn.execute("INSERT INTO reusable (analyst, key, epsilon_dp, id) VALUES (?, ?, ?, ?)",
                 [analyst, entry.key, epsilon_dp, ident])
    if entry.base is not None and entry.shape is not None:
        conn.execute("INSERT INTO summable (analyst, base, epsilon_dp, id, shape) "
                     "VALUES (?, ?, ?, ?, ?)", [analyst, entry.base, epsilon_dp, ident, entry.shape])


def lookup(conn: sqlite3.Connection, path: Path, analyst: str, ask: Ask,
           epsilon_dp: float) -> Found:
    """The analyst's released answer to `ask.key` with eps_dp >= `epsilon_dp`, or None, and
    their summable answers of each of `ask.bases`."""
    row = conn.execute(LOOKUP, [analyst, ask.key, epsilon_dp]).fetchone()
    same = None if row is None else StoredAnswer(int(row[0]), _parsed(path, row[0], row[1]))
    summable = tuple(
        Summable(int(ident), base, _parsed(path, ident, shape), _parsed(path, ident, answer))
        for base in ask.bases
        for ident, shape, answer in conn.execute(SUMMABLE, [analyst, base, CANDIDATES]))
    return Found(same, summable)


def _parsed(path: Path, ident: int, text: str) -> dict:
    """A stored JSON value, or a LedgerError naming the answer whose value is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        raise LedgerError(f"ledger {path}, answer {ident}: the stored answer is not valid "
                          "JSON; restore the ledger from a backup") from None
