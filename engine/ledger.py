"""The persistent budget ledger: sqlite3 in WAL mode, one row per released answer.

The check against the budget and the charge happen in one `BEGIN IMMEDIATE` transaction, so
processes sharing a ledger are serialised and can never overspend together.
"""

from __future__ import annotations

import json
import math
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .errors import BudgetExhausted, LedgerError

SCHEMA_VERSION = "1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    analyst TEXT NOT NULL,
    sql TEXT NOT NULL,
    epsilon REAL NOT NULL,
    epsilon_dp REAL NOT NULL,
    mode TEXT NOT NULL,
    k INTEGER NOT NULL,
    eta REAL NOT NULL,
    aggregates TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class Charge:
    """What one released answer spends, as recorded in the ledger."""

    analyst: str
    sql: str
    epsilon: float
    epsilon_dp: float
    mode: str
    k: int
    eta: float
    aggregates: tuple[dict, ...]


@dataclass(frozen=True)
class LedgerBinding:
    """The policy facts a ledger is bound to; spending is only meaningful under them."""

    budget: float
    k: int
    eta: float


class Ledger:
    """A budget ledger file bound to one policy's budget and dependence model."""

    def __init__(self, path: str | Path, binding: LedgerBinding) -> None:
        self.path = Path(path)
        self.binding = binding
        if self.path.is_dir():
            raise LedgerError(f"ledger path {self.path} is a directory; expected a file path")
        try:
            self._conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 60000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._initialise()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot use ledger {self.path}: {exc}") from None
        self.hash_key = self._meta("hash_key")

    def _initialise(self) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    conn.execute(statement)
            existing = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            wanted = {
                "schema_version": SCHEMA_VERSION,
                "budget": repr(self.binding.budget),
                "k": str(self.binding.k),
                "eta": repr(self.binding.eta),
            }
            if not existing:
                wanted["hash_key"] = secrets.token_hex(16)
                wanted["created"] = _now()
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", wanted.items())
            else:
                self._check_binding(existing, wanted)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _check_binding(self, existing: dict, wanted: dict) -> None:
        if existing.get("schema_version") != SCHEMA_VERSION or "hash_key" not in existing:
            raise LedgerError(f"ledger {self.path} is not a dpsql ledger of schema version "
                              f"{SCHEMA_VERSION}")
        for key in ("budget", "k", "eta"):
            if existing.get(key) != wanted[key]:
                raise LedgerError(
                    f"ledger {self.path} was created for a policy with {key} = {existing.get(key)}"
                    f", but this policy has {key} = {wanted[key]}; its spending cannot be "
                    "re-interpreted: keep the policy, or start a new ledger"
                )

    def _meta(self, key: str) -> str:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        if row is None:
            raise LedgerError(f"ledger {self.path} is missing its {key}")
        return row[0]

    def spent_dp(self) -> float:
        """The total DP epsilon of every answer released so far."""
        try:
            rows = self._conn.execute("SELECT epsilon_dp FROM charges").fetchall()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot read ledger {self.path}: {exc}") from None
        return math.fsum(r[0] for r in rows)

    def charge(self, charge: Charge, admits: Callable[[float, float], bool],
               refusal: Callable[[float], str]) -> float:
        """Record `charge` if `admits(spent, new)`; otherwise raise BudgetExhausted.

        Returns the DP spending before this charge. The check and the insert are one
        transaction, so concurrent processes are serialised by sqlite's write lock."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute("SELECT epsilon_dp FROM charges").fetchall()
                spent = math.fsum(r[0] for r in rows)
                if not admits(spent, charge.epsilon_dp):
                    raise BudgetExhausted(refusal(spent))
                conn.execute(
                    "INSERT INTO charges (time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, "
                    "aggregates) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [_now(), charge.analyst, charge.sql, charge.epsilon, charge.epsilon_dp,
                     charge.mode, charge.k, charge.eta, json.dumps(list(charge.aggregates))],
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot write ledger {self.path}: {exc}; nothing was charged") \
                from None
        return spent

    def close(self) -> None:
        self._conn.close()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
