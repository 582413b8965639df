"""The ledger's hash chain: each charge's link is HMAC-SHA256(chain key, previous link ||
the charge's canonical bytes), so an edit, deletion or reordering of charges or of their stored
answers by anyone without the ledger's `chain_key` is found, naming the first bad record.

Appending reads only the previous link (O(1)); `verify` walks the whole chain (O(n)).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import sqlite3
from dataclasses import dataclass

from ..errors import LedgerError

_GENESIS = bytes(32)  # the "previous link" of the first charge
_COLUMNS = ("c.id, c.time, c.analyst, c.sql, c.epsilon, c.epsilon_dp, c.mode, c.k, c.eta, "
            "c.aggregates, c.columns, c.times, a.answer")
_ROWS = f"SELECT {_COLUMNS} FROM charges c LEFT JOIN answers a ON a.id = c.id"


@dataclass(frozen=True)
class ChainReport:
    """What `verify` found: the number of records and the head link when good, else the first
    bad record's id and what is wrong with it."""

    records: int
    head: str
    bad_id: int | None = None
    problem: str | None = None


def canonical(row: tuple) -> bytes:
    """A charge row (in `_COLUMNS` order) as unambiguous bytes: a JSON array, floats as repr."""
    return json.dumps([repr(v) if isinstance(v, float) else v for v in row],
                      ensure_ascii=True, separators=(",", ":")).encode()


def link(key: bytes, previous: bytes, row: tuple) -> bytes:
    """The link of a record: HMAC-SHA256 under the chain key of the previous link and the record."""
    return hmac.new(key, previous + canonical(row), hashlib.sha256).digest()


def chain_key(conn: sqlite3.Connection) -> bytes:
    """The ledger's own chain key (meta `chain_key`, 32 random bytes, made once)."""
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('chain_key', ?)",
                 [secrets.token_hex(32)])
    (value,) = conn.execute("SELECT value FROM meta WHERE key = 'chain_key'").fetchone()
    return bytes.fromhex(value)


def prepare(conn: sqlite3.Connection, path: object) -> None:
    """Check the head link of the ledger (O(1)), or create the links table of a ledger that has
    none and chain its existing charges, once, in one transaction (concurrent openers are
    serialised; the second finds it done)."""
    if _has_links(conn):
        _check_head(conn, path)
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _has_links(conn):
            relink(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def relink(conn: sqlite3.Connection) -> None:
    """(Re)build the links of every charge, inside the caller's transaction: when a ledger is
    first chained, or migrated from an older layout (whose rows the links did not cover)."""
    conn.execute("DROP TABLE IF EXISTS links")
    conn.execute("CREATE TABLE links (id INTEGER PRIMARY KEY, link BLOB NOT NULL)")
    key, previous = chain_key(conn), _GENESIS
    for row in conn.execute(_ROWS + " ORDER BY c.id").fetchall():
        previous = link(key, previous, row)
        conn.execute("INSERT INTO links (id, link) VALUES (?, ?)", [row[0], previous])


def extend(conn: sqlite3.Connection, path: object) -> None:
    """Link the charges an older dpsql appended, without links, after the last linked one (inside
    the caller's transaction), once the linked records verify; a bad linked record is refused.
    A ledger with no links at all is chained afresh."""
    if not _has_links(conn):
        relink(conn)
        return
    report = verify(conn)
    last = conn.execute("SELECT MAX(id) FROM links").fetchone()[0]
    if report.problem is None:
        return
    if report.bad_id is None or last is None or report.bad_id <= last or not report.problem.startswith(
            "has no link"):
        raise LedgerError(f"ledger {path}, record {report.bad_id}: {report.problem}; restore it "
                          "from a backup (dpsql ledger verify names the first bad record)")
    for (ident,) in conn.execute("SELECT id FROM charges WHERE id > ? ORDER BY id",
                                 [last]).fetchall():
        append(conn, ident)


_APPEND = (f"SELECT {_COLUMNS}, (SELECT link FROM links WHERE id < c.id ORDER BY id DESC LIMIT 1) "
           "FROM charges c LEFT JOIN answers a ON a.id = c.id WHERE c.id = ?")
"""A charge's row as stored (as `verify` reads it) with the link before it, in one read."""


def append(conn: sqlite3.Connection, ident: int, key: bytes | None = None) -> None:
    """Link the charge `ident` just inserted (inside its own transaction) to the last link;
    `key` is the chain key when the caller has read it in this transaction."""
    *row, last = conn.execute(_APPEND, [ident]).fetchone()
    conn.execute("INSERT INTO links (id, link) VALUES (?, ?)",
                 [ident, link(chain_key(conn) if key is None else key,
                              _GENESIS if last is None else last, tuple(row))])


def verify(conn: sqlite3.Connection, kept: tuple[int, str] | None = None) -> ChainReport:
    """Walk the whole chain and each record's costs; the first bad record ends the walk (reads
    only, so a read-only connection will do). `kept` is a (records, head link) pair an earlier
    verify printed and the owner kept elsewhere: the chain must still pass through it."""
    value = conn.execute("SELECT value FROM meta WHERE key = 'chain_key'").fetchone()
    if not _has_links(conn) or value is None:
        return ChainReport(0, _GENESIS.hex(), None, "the ledger has no chain yet (open it once "
                           "with this version of dpsql to chain its records)")
    key, previous, count = bytes.fromhex(value[0]), _GENESIS, 0
    links = dict(conn.execute("SELECT id, link FROM links").fetchall())
    linked = iter(sorted(links))
    expect = next(linked, None)  # the next linked id: one below a charge's id lost its charge
    for row in conn.execute(_ROWS + " ORDER BY c.id"):
        ident = int(row[0])
        if expect is not None and expect < ident:
            return ChainReport(count, previous.hex(), expect, "its charge row was deleted")
        if expect == ident:
            expect = next(linked, None)
        stored = links.pop(ident, None)
        if stored is None:
            return ChainReport(count, previous.hex(), ident, "has no link (inserted outside dpsql)")
        expected = link(key, previous, row)
        if not hmac.compare_digest(stored, expected):
            return ChainReport(count, previous.hex(), ident, "its link does not match: this record "
                               "or its answer was edited, or a record before it was deleted or "
                               "reordered")
        problem = _cost_problem(row)
        if problem is not None:
            return ChainReport(count, previous.hex(), ident, problem)
        previous, count = expected, count + 1
        if kept is not None and count == kept[0] and previous.hex() != kept[1].lower():
            return ChainReport(count, previous.hex(), ident, "its link is not the head link kept "
                               f"for {kept[0]} records: the chain up to it was rewritten")
    if kept is not None and count < kept[0]:
        return ChainReport(count, previous.hex(), None, f"the ledger holds {count} records, "
                           f"{kept[0]} were kept: its last records were deleted")
    if links:
        first = min(links)
        return ChainReport(count, previous.hex(), first, "its charge row was deleted")
    return ChainReport(count, previous.hex())


def _cost_problem(row: tuple) -> str | None:
    """Re-derive a record's cost: its epsilon_dp is the sum of its aggregates' and its stored
    answer (when kept) reports the charge's cost."""
    epsilon, epsilon_dp, mode, k, eta = row[4:9]
    try:
        aggregates = json.loads(row[9])
        total = math.fsum(float(a["epsilon_dp"]) for a in aggregates)
    except (ValueError, TypeError, KeyError):
        return "its aggregates are not readable"
    if aggregates and not math.isclose(total, epsilon_dp, rel_tol=1e-9, abs_tol=1e-12):
        return f"epsilon_dp {epsilon_dp!r} is not the sum of its aggregates' ({total!r})"
    if row[12] is None:
        return None
    try:
        answer = json.loads(row[12])
    except ValueError:
        return "its stored answer is not valid JSON"
    charged = {"epsilon": epsilon, "epsilon_dp": epsilon_dp, "mode": mode, "k": k, "eta": eta}
    for name, value in charged.items():
        if name in answer and answer[name] != value:
            return f"its stored answer's {name} {answer[name]!r} is not the charge's {value!r}"
    return None


def _check_head(conn: sqlite3.Connection, path: object) -> None:
    """Refuse a ledger whose last charge does not match its link (`dpsql ledger verify` checks
    the whole chain)."""
    last = conn.execute(_ROWS + " ORDER BY c.id DESC LIMIT 1").fetchone()
    head = conn.execute("SELECT id, link FROM links ORDER BY id DESC LIMIT 1").fetchone()
    if last is None and head is None:
        return
    if last is None or head is None or head[0] != last[0]:
        raise LedgerError(f"ledger {path}: its last charge and its last link differ (a record was "
                          "deleted or added outside dpsql); run dpsql ledger verify")
    before = conn.execute("SELECT link FROM links WHERE id < ? ORDER BY id DESC LIMIT 1",
                          [last[0]]).fetchone()
    key = conn.execute("SELECT value FROM meta WHERE key = 'chain_key'").fetchone()
    if key is None or not hmac.compare_digest(
            head[1], link(bytes.fromhex(key[0]), _GENESIS if before is None else before[0], last)):
        raise LedgerError(f"ledger {path}, record {last[0]}: its link does not match (edited "
                          "outside dpsql); run dpsql ledger verify")


def _has_links(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                        "name = 'links'").fetchone() is not None
