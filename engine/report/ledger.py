"""A read-only, consistent snapshot of a budget ledger, for reports.

The ledger is opened through a `mode=ro` URI, so a report can never create, migrate or
lock it for writing, and every read happens in one transaction, so a process charging
the ledger meanwhile cannot make the binding and the answers disagree.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

from ...calibration import MODE_CHOICES
from ..accounting.ledger import open_read_only
from ..accounting.ledger_binding import LEGACY_MODE, LedgerBinding
from ..accounting.ledger_schema import SCHEMA_VERSION
from ..accounting.totals import read_points
from ..errors import LedgerError
from ..policy import declarations_from_json, shared_from_json
from ..result import AggregateRecord, AnswerCost

READABLE_VERSIONS = ("2", "3", "4", "5", SCHEMA_VERSION)
"""Reports read older ledgers as they are (a report never migrates): version 2 accounted with
auto, and answers before version 4 are read as having read every column."""

@dataclass(frozen=True)
class LedgerAnswer:
    """One released answer as the ledger recorded it."""

    id: int
    time: datetime
    analyst: str
    sql: str
    cost: AnswerCost
    aggregates: tuple[AggregateRecord, ...]
    columns: frozenset[str] | None = None  # the columns the answer read (None: every column)
    times: tuple[int, ...] | None = None  # a chain answer's time points (None: not per time)


@dataclass(frozen=True)
class LedgerSnapshot:
    """A ledger's binding and all its answers, read in one transaction."""

    path: Path
    binding: LedgerBinding
    answers: tuple[LedgerAnswer, ...]


def read_ledger(path: str | Path) -> LedgerSnapshot:
    """Read a ledger without writing to it; a missing, foreign or corrupt file is a LedgerError."""
    path = Path(path)
    conn = open_read_only(path, "report")
    try:
        conn.execute("BEGIN")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"meta", "charges"} <= tables:
            raise LedgerError(f"{path} is not a dpsql ledger: it has no meta and charges tables")
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        columns = "columns" if meta.get("schema_version") in ("4", "5", SCHEMA_VERSION) else "NULL"
        times = "times" if meta.get("schema_version") in ("5", SCHEMA_VERSION) else "NULL"
        rows = conn.execute(
            "SELECT id, time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, aggregates, "
            f"{columns}, {times} FROM charges ORDER BY id"
        ).fetchall()
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read ledger {path}: {exc}") from None
    finally:
        conn.close()
    return LedgerSnapshot(path, _binding(path, meta), tuple(_answer(path, row) for row in rows))


def _binding(path: Path, meta: dict) -> LedgerBinding:
    """The budget and dependence model the ledger was created under."""
    if meta.get("schema_version") not in READABLE_VERSIONS:
        raise LedgerError(f"{path} is not a dpsql ledger of schema version "
                          f"{' or '.join(READABLE_VERSIONS)} (it has {meta.get('schema_version')!r})")
    try:
        budget, k, eta = float(meta["budget"]), int(meta["k"]), float(meta["eta"])
    except (KeyError, ValueError) as exc:
        raise LedgerError(f"ledger {path} has no valid budget, k and eta binding ({exc})") from None
    mode = meta.get("mode", LEGACY_MODE)
    if not (math.isfinite(budget) and budget > 0 and k >= 1 and 0 <= eta <= 1 and mode in MODE_CHOICES):
        raise LedgerError(f"ledger {path} is bound to an impossible policy: budget={budget}, "
                          f"k={k}, eta={eta}, mode={mode!r}")
    declared = meta.get("eta_by_columns", "")
    try:
        declarations = declarations_from_json(declared)
    except (TypeError, ValueError):
        raise LedgerError(f"ledger {path} has an unreadable eta_by_columns binding") from None
    parents = meta.get("parents", "")
    try:
        shared = shared_from_json(parents)
    except (TypeError, ValueError):
        raise LedgerError(f"ledger {path} has an unreadable parents binding") from None
    if any(not 0 <= d.eta <= (1.0 if d.columns & shared else eta) for d in declarations):
        raise LedgerError(f"ledger {path} is bound to an impossible eta_by_columns: {declared}")
    return LedgerBinding(budget=budget, k=k, eta=eta, mode=mode, eta_by_columns=declared,
                         models=meta.get("models", ""), parents=parents)


def _answer(path: Path, row: tuple) -> LedgerAnswer:
    """One charges row, checked, so a damaged row is named rather than misreported."""
    ident, time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, aggregates, columns, times = row
    where = f"ledger {path}, answer {ident}"
    for name, value in (("epsilon", epsilon), ("epsilon_dp", epsilon_dp)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise LedgerError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    try:
        when = datetime.fromisoformat(time)
    except (TypeError, ValueError):
        raise LedgerError(f"{where}: time must be an ISO 8601 timestamp, got {time!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return LedgerAnswer(id=ident, time=when, analyst=str(analyst), sql=str(sql),
                        cost=AnswerCost(float(epsilon), float(epsilon_dp), str(mode), int(k), float(eta)),
                        aggregates=_aggregates(where, aggregates), columns=_columns(where, columns),
                        times=_times(where, times))


def _times(where: str, text: str | None) -> tuple[int, ...] | None:
    """The JSON list of time points a chain answer recorded (None: not per time point)."""
    if text is None:
        return None
    try:
        return read_points(text)
    except ValueError:
        raise LedgerError(f"{where}: times must be a JSON list of integers (or {{\"series\": "
                          f"list}}), got {text!r}") from None


def _columns(where: str, text: str | None) -> frozenset[str] | None:
    """The JSON list of columns a charge recorded (None before ledgers recorded them)."""
    if text is None:
        return None
    try:
        names = json.loads(text)
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise LedgerError(f"{where}: columns must be a JSON list of column names, got {text!r}")
    return frozenset(names)


def _aggregates(where: str, text: str) -> tuple[AggregateRecord, ...]:
    """Parse the JSON list of aggregates a charge recorded."""
    try:
        return tuple(AggregateRecord.from_record(item) for item in json.loads(text))
    except (TypeError, ValueError, KeyError):
        raise LedgerError(f"{where}: aggregates must be a JSON list of objects with "
                          f"{', '.join(f.name for f in fields(AggregateRecord))}") from None
