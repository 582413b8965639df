"""The analysts of `dpsql serve`, in the ledger's own `analysts` table (made on the first
`dpsql analyst add`; a ledger without it has no analysts): a name, the HMAC of the token under
the ledger's own `token_key`, a role, an optional cap, and when the token was revoked. `account`
reads an analyst with the books of their own answers on the ledger's connection, so that a
charge checks the cap in its own transaction."""

from __future__ import annotations

import secrets
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import InputError, LedgerError
from . import totals as ledger_totals
from .books import Books

ROLES = ("analyst", "accountant")

# The service's analysts, made on the first `dpsql analyst add` (a ledger without it has none).
_ANALYSTS = """
CREATE TABLE IF NOT EXISTS analysts (
    name TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('analyst', 'accountant')),
    cap REAL CHECK (cap IS NULL OR (cap > 0 AND cap < 1e300)),
    revoked TEXT,
    created TEXT NOT NULL
)"""


@dataclass(frozen=True)
class Analyst:
    """An analyst of the service as the ledger records them (never their token, only its hash)."""

    name: str
    role: str  # "analyst" (queries) or "accountant" (reads every history and the report)
    cap: float | None  # the most their own answers' information-privacy level may reach
    revoked: str | None  # when the owner revoked their token (ISO 8601, UTC), or None
    created: str


@dataclass(frozen=True)
class AnalystAccount:
    """A registered analyst with the books of their own answers: the DP epsilon they have
    spent so far, the columns they read (None: every column) and their spending per time
    point."""

    analyst: Analyst
    books: Books

    @property
    def spent_dp(self) -> float:
        return self.books.spent



def check_analyst(analyst: object) -> str:
    """An analyst's name as given (stripped), or InputError unless it is printable text of 1
    to 100 characters."""
    if not isinstance(analyst, str) or not analyst.strip() or len(analyst) > 100 \
            or not analyst.isprintable():
        raise InputError(f"analyst must be a printable name of 1 to 100 characters, got {analyst!r}")
    return analyst.strip()


class AnalystsTable:
    """The analysts table of a ledger, on the ledger's connection (`Ledger` is one)."""

    path: Path
    _conn: sqlite3.Connection

    def token_key(self) -> bytes:
        """The ledger's own secret key for hashing analysts' tokens (made on first use), so a
        token hash copied from one ledger matches nothing in another."""
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'token_key'").fetchone()
            if row is None:
                self._conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('token_key', ?)",
                                   [secrets.token_hex(32)])
            (key,) = self._conn.execute("SELECT value FROM meta WHERE key = 'token_key'").fetchone()
            return bytes.fromhex(key)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot write ledger {self.path}: {exc}") from None

    def add_analyst(self, name: str, token_hash: str, role: str, cap: float | None) -> Analyst:
        """Record a new analyst with the hash of their token; a name is never reused."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(_ANALYSTS)
                if self._analyst_row(name) is not None:
                    raise LedgerError(f"analyst {name!r} already exists in ledger {self.path} "
                                      "(names are never reused; choose another name)")
                self._conn.execute("INSERT INTO analysts (name, token_hash, role, cap, revoked, "
                                   "created) VALUES (?, ?, ?, ?, NULL, ?)",
                                   [name, token_hash, role, cap, now()])
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot write ledger {self.path}: {exc}") from None
        return self._analyst(name)

    def analysts(self) -> tuple[Analyst, ...]:
        """Every analyst ever added, revoked ones included, in the order they were added."""
        if not self._has_analysts():
            return ()
        rows = self._conn.execute("SELECT name, role, cap, revoked, created FROM analysts "
                                  "ORDER BY created, name").fetchall()
        return tuple(Analyst(*row) for row in rows)

    def credentials(self) -> tuple[tuple[str, str], ...]:
        """(name, token hash) of every analyst whose token is not revoked."""
        if not self._has_analysts():
            return ()
        return tuple(self._conn.execute(
            "SELECT name, token_hash FROM analysts WHERE revoked IS NULL ORDER BY name").fetchall())

    def update_analyst(self, name: str, *, cap: float | None = None, revoke: bool = False) -> Analyst:
        """Revoke an analyst's token, or set their cap (a cap may be lowered or raised; the global
        budget stays the guarantee)."""
        self._analyst(name)  # names what exists when the name is unknown
        try:
            if revoke:
                self._conn.execute("UPDATE analysts SET revoked = ? WHERE name = ? AND revoked IS "
                                   "NULL", [now(), name])
            else:
                self._conn.execute("UPDATE analysts SET cap = ? WHERE name = ?", [cap, name])
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot write ledger {self.path}: {exc}") from None
        return self._analyst(name)

    def account(self, name: str) -> AnalystAccount | None:
        """The registered analyst `name` with their own DP spending, or None if the name is no
        registered analyst. Read on this connection, so inside `charge` it is read in the
        charge's own transaction."""
        row = self._analyst_row(name) if self._has_analysts() else None
        if row is None:
            return None
        totals = ledger_totals.read(self._conn, self.path, name)
        return AnalystAccount(Analyst(*row), totals.books(self.path))

    def _analyst(self, name: str) -> Analyst:
        row = self._analyst_row(name) if self._has_analysts() else None
        if row is None:
            known = ", ".join(a.name for a in self.analysts()) or "none yet"
            raise LedgerError(f"no analyst {name!r} in ledger {self.path} (analysts: {known}); add "
                              f"one with dpsql analyst add NAME --ledger {self.path}")
        return Analyst(*row)

    def _analyst_row(self, name: str) -> tuple | None:
        return self._conn.execute("SELECT name, role, cap, revoked, created FROM analysts WHERE "
                                  "name = ?", [name]).fetchone()

    def _has_analysts(self) -> bool:
        return self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                                  "'analysts'").fetchone() is not None


def now() -> str:
    """The time of a ledger's record (ISO 8601, UTC, to the microsecond)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")
