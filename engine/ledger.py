"""The persistent budget ledger: sqlite3 in WAL mode, one row per released answer.

The check against the budget and the charge happen in one `BEGIN IMMEDIATE` transaction, so
processes sharing a ledger are serialised and can never overspend together.

Spending is never silently reset. A new ledger is built under a temporary name and linked
into place atomically, so the ledger path either does not exist or holds a complete ledger;
an existing file is only ever opened (never created by sqlite), and one that is empty,
truncated, corrupted or not a ledger is refused. A ledger is bound to the budget and
dependence model (k, eta) of its policy: a stricter policy (budget down, k or eta up) is
accepted and recorded, a more lenient one is refused, because past spending must never be
re-interpreted more leniently than it was when it was charged.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .errors import BudgetExhausted, LedgerError

SCHEMA_VERSION = "2"
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    analyst TEXT NOT NULL,
    sql TEXT NOT NULL,
    epsilon REAL NOT NULL,
    epsilon_dp REAL NOT NULL CHECK (epsilon_dp >= 0),
    mode TEXT NOT NULL,
    k INTEGER NOT NULL,
    eta REAL NOT NULL,
    aggregates TEXT NOT NULL
);
CREATE TABLE bindings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    budget REAL NOT NULL,
    k INTEGER NOT NULL,
    eta REAL NOT NULL
);
"""
_TABLES = {"meta", "charges", "bindings"}


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

    def lenient_fields(self, other: LedgerBinding) -> list[str]:
        """The fields in which `other` is more lenient than self (more budget, smaller k or eta)."""
        return [name for name, looser in (("budget", other.budget > self.budget),
                                          ("k", other.k < self.k),
                                          ("eta", other.eta < self.eta)) if looser]


class Ledger:
    """A budget ledger file bound to one policy's budget and dependence model."""

    def __init__(self, path: str | Path, binding: LedgerBinding) -> None:
        self.path = Path(path)
        self.binding = binding
        if self.path.is_dir():
            raise LedgerError(f"ledger path {self.path} is a directory; expected a file path")
        if not self.path.exists():
            self._create()
        try:
            self._conn = sqlite3.connect(self.path.absolute().as_uri() + "?mode=rw", uri=True,
                                         timeout=60, isolation_level=None)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger {self.path}: {exc} (check that the file and "
                              "its directory are readable and writable)") from None
        try:
            self._conn.execute("PRAGMA busy_timeout = 60000")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._check_file()
            self._bind()
        except sqlite3.Error as exc:
            self._conn.close()
            raise LedgerError(_explain(self.path, exc)) from None
        except BaseException:
            self._conn.close()
            raise
        self.hash_key = self._meta("hash_key")

    def _create(self) -> None:
        """Build a complete ledger under a temporary name, then link it into place atomically.

        If another process links first, its ledger is used. A crash leaves at most a stray
        temporary file, never a partial ledger at the ledger path."""
        directory = self.path.absolute().parent
        if not directory.is_dir():
            raise LedgerError(f"cannot create ledger {self.path}: {directory} is not a directory")
        temporary = directory / f".{self.path.name}.{secrets.token_hex(6)}.creating"
        try:
            conn = sqlite3.connect(temporary, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("BEGIN IMMEDIATE")
                for statement in _SCHEMA.strip().split(";"):
                    if statement.strip():
                        conn.execute(statement)
                now = _now()
                meta = {"schema_version": SCHEMA_VERSION, "hash_key": secrets.token_hex(16),
                        "created": now, **_binding_meta(self.binding)}
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
                conn.execute("INSERT INTO bindings (time, budget, k, eta) VALUES (?, ?, ?, ?)",
                             [now, self.binding.budget, self.binding.k, self.binding.eta])
                conn.execute("COMMIT")
            finally:
                conn.close()
            _fsync(temporary)
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass  # another process created the ledger first; it is opened below
            _fsync(directory)
        except (sqlite3.Error, OSError) as exc:
            raise LedgerError(f"cannot create ledger {self.path}: {exc} (is {directory} "
                              "writable?)") from None
        finally:
            temporary.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(f"{temporary}{suffix}").unlink(missing_ok=True)

    def _check_file(self) -> None:
        """Refuse a file that is not an intact ledger of this schema."""
        conn = self._conn
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if not tables:
            raise LedgerError(
                f"ledger {self.path} is empty (truncated, or not a ledger); refusing to start a new "
                "ledger in its place: restore it from a backup, or move it away to start over"
            )
        problems = conn.execute("PRAGMA quick_check").fetchall()
        if problems != [("ok",)]:
            raise LedgerError(f"ledger {self.path} is corrupted ({problems[0][0]}); restore it "
                              "from a backup: its recorded spending cannot be trusted")
        version = dict(conn.execute("SELECT key, value FROM meta").fetchall()).get(
            "schema_version") if "meta" in tables else None
        if not _TABLES <= tables or version != SCHEMA_VERSION:
            raise LedgerError(f"{self.path} is not a dpsql ledger of schema version "
                              f"{SCHEMA_VERSION} (found tables: {', '.join(sorted(tables))}, "
                              f"schema version {version})")
        bad = conn.execute("SELECT COUNT(*) FROM charges WHERE NOT (epsilon_dp >= 0 AND "
                           "epsilon_dp < 1e300)").fetchone()[0]
        if bad:
            raise LedgerError(f"ledger {self.path} holds {bad} charge(s) with an invalid "
                              "epsilon_dp; restore it from a backup")

    def _bind(self) -> None:
        """Accept the policy if it is as strict as the ledger's binding; record a stricter one.

        The write also proves, before any query runs, that the ledger can be charged."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            try:
                stored = LedgerBinding(float(meta["budget"]), int(meta["k"]), float(meta["eta"]))
            except (KeyError, ValueError):
                raise LedgerError(f"ledger {self.path} has no valid budget, k and eta; restore it "
                                  "from a backup") from None
            lenient = stored.lenient_fields(self.binding)
            if lenient:
                detail = ", ".join(f"{name} {getattr(stored, name)!r} -> "
                                   f"{getattr(self.binding, name)!r}" for name in lenient)
                raise LedgerError(
                    f"ledger {self.path} was created for a policy with budget {stored.budget!r}, "
                    f"k {stored.k}, eta {stored.eta!r} (or tightened to it since), and this policy "
                    f"is more lenient ({detail}); past spending is never re-interpreted more "
                    "leniently: keep the policy (a smaller budget or larger k or eta is "
                    "accepted), or start a new ledger"
                )
            if stored != self.binding:
                conn.executemany("UPDATE meta SET value = ? WHERE key = ?",
                                 [(v, k) for k, v in _binding_meta(self.binding).items()])
                conn.execute("INSERT INTO bindings (time, budget, k, eta) VALUES (?, ?, ?, ?)",
                             [_now(), self.binding.budget, self.binding.k, self.binding.eta])
            else:
                conn.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

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
        return self._total(rows)

    def _total(self, rows: list[tuple]) -> float:
        total = math.fsum(r[0] for r in rows)
        if not math.isfinite(total) or total < 0:
            raise LedgerError(f"ledger {self.path} holds an invalid total spending; restore it "
                              "from a backup")
        return total

    def charge(self, charge: Charge, admits: Callable[[float, float], bool],
               refusal: Callable[[float], str]) -> float:
        """Record `charge` if `admits(spent, new)`; otherwise raise BudgetExhausted.

        Returns the DP spending before this charge. The check and the insert are one
        transaction, so concurrent processes are serialised by sqlite's write lock."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                spent = self._total(conn.execute("SELECT epsilon_dp FROM charges").fetchall())
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

    def halt(self, reason: str) -> None:
        """Record durably that the engine halted on this ledger's data (kept if already set).

        A halted ledger refuses every further query until the owner removes the record."""
        try:
            self._conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('halted', ?)",
                               [f"{_now()} {reason}"])
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot write ledger {self.path}: {exc}") from None

    def halted(self) -> str | None:
        """When and why the engine halted on this ledger, or None."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'halted'").fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self._conn.close()


def _binding_meta(binding: LedgerBinding) -> dict[str, str]:
    return {"budget": repr(binding.budget), "k": str(binding.k), "eta": repr(binding.eta)}


def _explain(path: Path, exc: sqlite3.Error) -> str:
    """One line for a sqlite failure while opening, naming the likely cause."""
    text = str(exc)
    if "readonly" in text or "unable to open" in text:
        return (f"ledger {path} cannot be written ({text}); the ledger file and its directory must "
                "be writable, since every answer is charged before it is released")
    if "not a database" in text or "malformed" in text:
        return (f"ledger {path} is corrupted or truncated ({text}); restore it from a backup: "
                "its recorded spending cannot be trusted, and a new ledger is never started in "
                "its place")
    return f"cannot use ledger {path}: {text}"


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (best effort where the platform cannot)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
