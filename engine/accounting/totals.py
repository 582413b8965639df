"""A ledger's running totals, kept in each charge's own transaction, so that what was spent is
read in the same time however many answers the ledger holds.

For the whole ledger and for each analyst, the totals hold what the accountant reads: the
eps_dp spent, as an exact sum (an integer count of 2**-1074, the quantum of every double, so
the float read back is the correctly rounded sum, exactly `math.fsum` of the charges), the
union of the columns read (None: every column) and the eps_dp per time point of the answers
charged per time point, summed in charge order as a scan of the charges would (None once an
answer that read a column was not charged per time point). Released answers live in their own
table, so the charges stay small.

Any write to the charges that the engine did not total (another program, an older dpsql, a
hand edit) marks the totals stale through sqlite triggers; stale totals are recomputed from the
charges, read-only by readers and durably by the next writer.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...calibration.declared import SeriesPoints, SeriesSpend
from ..errors import LedgerError
from .books import Books

WHOLE = "*"
"""The scope of the whole ledger; an analyst's scope is ANALYST + their name."""
ANALYST = "analyst:"
_QUANTUM = 1 << 1074  # 2**1074 * x is an integer for every finite double x

STORAGE = (
    "CREATE TABLE IF NOT EXISTS answers (id INTEGER PRIMARY KEY, answer TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS totals (scope TEXT PRIMARY KEY, spent TEXT NOT NULL, read TEXT, "
    "times TEXT)",
    "CREATE INDEX IF NOT EXISTS charges_by_analyst ON charges (analyst, id)",
    *(f"CREATE TRIGGER IF NOT EXISTS charges_{verb} AFTER {event} ON charges "
      "BEGIN UPDATE meta SET value = 'stale' WHERE key = 'totals'; END"
      for verb, event in (("inserted", "INSERT"), ("updated", "UPDATE"), ("deleted", "DELETE"))),
    "INSERT OR IGNORE INTO meta (key, value) VALUES ('totals', 'stale')",
)
"""The answers table, the totals, the index history reads by and the staleness triggers."""
STORAGE_TABLES = frozenset({"answers", "totals"})


@dataclass(frozen=True)
class Totals:
    """What a set of charges spent: exact eps_dp, columns read, eps_dp per time point, and
    whether an answer read several time points together (a series, docs/theory.md §20)."""

    units: int = 0  # the exact sum of eps_dp in units of 2**-1074
    read: frozenset[str] | None = frozenset()  # None: some answer read every column
    times: tuple[tuple[int, float], ...] | None = ()  # (t, eps_dp) in order of first charge
    series: bool = False

    def spent(self, path: Path) -> float:
        """The sum of eps_dp, correctly rounded (int / int is correctly rounded in Python)."""
        try:
            total = self.units / _QUANTUM
        except OverflowError:
            total = float("inf")
        if total == float("inf") or total < 0:
            raise LedgerError(f"ledger {path} holds an invalid total spending; restore it "
                              "from a backup")
        return total

    def time_spend(self) -> dict[int, float] | None:
        if self.times is None:
            return None
        return SeriesSpend(self.times) if self.series else dict(self.times)

    def books(self, path: Path) -> Books:
        """The books these totals keep: the spending, the columns read and the spending per
        time point (with no accountants yet)."""
        return Books(self.spent(path), self.read, self.time_spend())

    def add(self, eps_dp: float, columns: frozenset[str] | None,
            points: Iterable[int] | None) -> Totals:
        """The totals once a charge of eps_dp reading `columns` at time points `points` (None:
        not charged per time point) is added."""
        read = None if self.read is None or columns is None else self.read | columns
        times = self.times
        if times is not None:
            if points is None:
                times = None if columns is None or columns else times
            else:
                spend = dict(times)
                for t in points:
                    spend[t] = spend.get(t, 0.0) + eps_dp
                times = tuple(spend.items())
        series = self.series or isinstance(points, SeriesPoints)
        return Totals(self.units + _units(eps_dp), read, times, series)


def _units(eps_dp: float) -> int:
    numerator, denominator = float(eps_dp).as_integer_ratio()
    return numerator * (_QUANTUM // denominator)


def is_stale(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT value FROM meta WHERE key = 'totals'").fetchone()
    return row is None or row[0] != "current"


def read(conn: sqlite3.Connection, path: Path, analyst: str | None = None) -> Totals:
    """The totals of the whole ledger (or of one analyst's charges), recomputed from the
    charges when they are stale."""
    if is_stale(conn):
        return recompute(conn, path, analyst)
    return parse(conn.execute("SELECT spent, read, times FROM totals WHERE scope = ?",
                              [scope(analyst)]).fetchone(), path)


def parse(row: tuple | None, path: Path) -> Totals:
    """A stored totals row (spent, read, times) read back (None: no charge in its scope)."""
    if row is None:
        return Totals()
    try:
        spent, columns, times = row
        return Totals(int(spent, 16), *_decoded(columns, times))
    except (TypeError, ValueError):
        raise LedgerError(f"ledger {path} holds unreadable running totals; restore it from a "
                          "backup") from None


@functools.lru_cache(maxsize=256)
def _decoded(columns: str | None, times: str | None) -> tuple[
        frozenset[str] | None, tuple[tuple[int, float], ...] | None, bool]:
    """A totals row's columns read and time spending decoded (remembered: they change far less
    often than the spending, and every query reads them)."""
    stored: Any = None if times is None else json.loads(times)
    series = isinstance(stored, dict)  # {"series": pairs} once a series answer was charged
    pairs = stored["series"] if isinstance(stored, dict) else stored
    return (None if columns is None else frozenset(json.loads(columns)),
            None if pairs is None else tuple((int(t), float(v)) for t, v in pairs), series)


def write(conn: sqlite3.Connection, analyst: str, before: Totals, mine: Totals, eps_dp: float,
          columns: frozenset[str] | None, points: tuple[int, ...] | None) -> dict[str, tuple]:
    """Add one charge to the current totals of the ledger and of its analyst (inside the
    charge's transaction, after its insert) and mark them current again; returns the rows
    written, (spent, read, times) by scope, as a read gives them back."""
    rows = [_row(name, totals.add(eps_dp, columns, points))
            for name, totals in ((WHOLE, before), (ANALYST + analyst, mine))]
    conn.execute(_UPSERT_TWO, [value for row in rows for value in row])
    conn.execute("UPDATE meta SET value = 'current' WHERE key = 'totals'")
    return {row[0]: row[1:] for row in rows}


def rebuild(conn: sqlite3.Connection, path: Path) -> None:
    """Recompute every scope's totals from the charges and store them as current (inside a
    write transaction)."""
    scopes: dict[str, _Fold] = {WHOLE: _Fold(path)}
    rows = conn.execute("SELECT analyst, epsilon_dp, columns, times FROM charges ORDER BY id")
    for analyst, eps_dp, columns, times in rows:
        scopes[WHOLE].add(eps_dp, columns, times)
        scopes.setdefault(ANALYST + analyst, _Fold(path)).add(eps_dp, columns, times)
    conn.execute("DELETE FROM totals")
    for scope, fold in scopes.items():
        _store(conn, scope, fold.result())
    conn.execute("UPDATE meta SET value = 'current' WHERE key = 'totals'")


def recompute(conn: sqlite3.Connection, path: Path, analyst: str | None = None) -> Totals:
    """The totals of the whole ledger (or one analyst's charges) read from every charge."""
    where, args = ("", []) if analyst is None else (" WHERE analyst = ?", [analyst])
    fold = _Fold(path)
    for eps_dp, columns, times in conn.execute(
            f"SELECT epsilon_dp, columns, times FROM charges{where} ORDER BY id", args):
        fold.add(eps_dp, columns, times)
    return fold.result()


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Move a ledger's stored answers into their own table and (re)compute its running totals
    (inside the migration's transaction; what is already in place is kept)."""
    for statement in STORAGE:
        conn.execute(statement)
    if any(row[1] == "answer" for row in conn.execute("PRAGMA table_info(charges)")):
        conn.execute("INSERT INTO answers (id, answer) SELECT id, answer FROM charges "
                     "WHERE answer IS NOT NULL")
        conn.execute("ALTER TABLE charges DROP COLUMN answer")
    rebuild(conn, path)


class _Fold:
    """Totals accumulated from stored charges in charge order, their JSON checked as read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.totals = Totals()
        self.malformed_times = False  # only an error if the time spending is still wanted

    def add(self, eps_dp: float, columns: str | None, times: str | None) -> None:
        read = None if columns is None else self._columns(columns)
        points = None if times is None or self.totals.times is None else self._times(times)
        if times is not None and points is None and self.totals.times is not None:
            points = ()  # malformed: reported by `result` unless the spending becomes None
        self.totals = self.totals.add(eps_dp, read, points)

    def result(self) -> Totals:
        if self.malformed_times and self.totals.times is not None:
            raise LedgerError(f"ledger {self.path} holds a charge whose time points are not a "
                              "JSON list of integers (or {\"series\": list}); restore it from "
                              "a backup")
        return self.totals

    def _columns(self, text: str) -> frozenset[str]:
        try:
            names = json.loads(text)
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                return frozenset(names)
        except ValueError:
            pass
        raise LedgerError(f"ledger {self.path} holds a charge whose columns read are not a "
                          "JSON list of names; restore it from a backup")

    def _times(self, text: str) -> tuple[int, ...] | None:
        try:
            return read_points(text)
        except ValueError:
            self.malformed_times = True
            return None


_UPSERT = ("INSERT INTO totals (scope, spent, read, times) VALUES {} ON CONFLICT (scope) "
           "DO UPDATE SET spent = excluded.spent, read = excluded.read, times = excluded.times")
_UPSERT_ONE = _UPSERT.format("(?, ?, ?, ?)")
_UPSERT_TWO = _UPSERT.format("(?, ?, ?, ?), (?, ?, ?, ?)")  # the ledger's and an analyst's


def _store(conn: sqlite3.Connection, scope: str, totals: Totals) -> None:
    conn.execute(_UPSERT_ONE, _row(scope, totals))


def _row(scope: str, totals: Totals) -> tuple[str, str, str | None, str | None]:
    """A scope's totals as the totals table stores them."""
    read_text = None if totals.read is None else json.dumps(sorted(totals.read))
    pairs = None if totals.times is None else [list(p) for p in totals.times]
    times_text = None if pairs is None else json.dumps({"series": pairs} if totals.series else pairs)
    return scope, format(totals.units, "x"), read_text, times_text


def scope(analyst: str | None) -> str:
    """The totals row of the whole ledger (None) or of an analyst."""
    return WHOLE if analyst is None else ANALYST + analyst


def write_points(points: tuple[int, ...]) -> str:
    """A charge's time points as the ledger keeps them: a JSON list, or {"series": list} when
    its released values read them together (docs/theory.md §20)."""
    listed = [int(t) for t in points]
    return json.dumps({"series": listed} if isinstance(points, SeriesPoints) else listed)


def read_points(text: str) -> tuple[int, ...]:
    """`write_points` read back (ValueError if it is not one)."""
    value = json.loads(text)
    series = isinstance(value, dict) and set(value) == {"series"}
    points = value["series"] if series else value
    if not isinstance(points, list) or not all(type(t) is int for t in points):
        raise ValueError(f"not a list of time points: {text!r}")
    return SeriesPoints(points) if series else tuple(points)
