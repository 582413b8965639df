"""What a query reads of the ledger, in one sqlite statement: the meta table (the binding, a
halt, whether the running totals are current, the chain key), the running totals of the whole
ledger and of one analyst, whether the ledger has an analysts table, and sqlite's
`data_version` (which changes when another connection commits). One statement is one
consistent read, and a charge makes it right after taking the write lock, so the charge pays
for one round trip instead of one per fact.

`Kept` is the snapshot a connection's own charge leaves (what it read, with the totals it
wrote): while no other connection has committed (`data_version`) and this one has changed
nothing else (`total_changes`), it is what a read would return, for one `PRAGMA` instead.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from . import totals as ledger_totals
from .ledger_binding import LedgerBinding, binding_from_meta

_READ = ("SELECT 0, key, value, NULL, NULL FROM meta "
         "UNION ALL SELECT 1, scope, spent, read, times FROM totals WHERE scope IN (?, ?) "
         "UNION ALL SELECT 2, name, NULL, NULL, NULL FROM sqlite_master "
         "WHERE type = 'table' AND name = 'analysts' "
         "UNION ALL SELECT 3, NULL, data_version, NULL, NULL FROM pragma_data_version")

_BINDING_KEYS = ("budget", "k", "eta", "mode", "units", "eta_by_columns", "models", "parents")
"""The meta keys `binding_from_meta` reads."""
_BINDINGS: dict[tuple[str | None, ...], LedgerBinding] = {}  # by those keys' values
_KEPT = 64


@dataclass(frozen=True)
class Snapshot:
    """The ledger as one statement read it: its meta table, the stored totals rows by scope
    (current only when `current`), whether it has analysts, and whose totals were asked."""

    meta: dict[str, str]
    rows: dict[str, tuple]
    analysts: bool
    analyst: str | None
    version: int  # sqlite's data_version as read with it

    @property
    def current(self) -> bool:
        """Whether the stored totals are current (else they are recomputed from the charges)."""
        return self.meta.get("totals") == "current"

    @property
    def halted(self) -> str | None:
        """When and why the engine halted on this ledger, or None."""
        return self.meta.get("halted")

    def binding(self, path: Path) -> LedgerBinding:
        """The binding the ledger holds (the owner may have tightened it since it was opened),
        read once per distinct record of it."""
        key = tuple(self.meta.get(name) for name in _BINDING_KEYS)
        binding = _BINDINGS.get(key)
        if binding is None:
            binding = binding_from_meta(self.meta, path)
            if len(_BINDINGS) >= _KEPT:
                _BINDINGS.clear()
            _BINDINGS[key] = binding
        return binding

    def chain_key(self) -> bytes | None:
        """The ledger's chain key, if it has one yet."""
        value = self.meta.get("chain_key")
        return None if value is None else bytes.fromhex(value)

    def totals(self, path: Path, analyst: str | None = None) -> ledger_totals.Totals:
        """The stored totals of the whole ledger (or of `analyst`, the one read); only
        meaningful when `current`."""
        assert self.current and (analyst is None or analyst == self.analyst)
        return ledger_totals.parse(self.rows.get(ledger_totals.scope(analyst)), path)


def read(conn: sqlite3.Connection, analyst: str | None = None) -> Snapshot:
    """The ledger's meta table, the stored totals of the whole ledger and of `analyst` (None:
    the whole ledger's only) and whether it has analysts, in one statement."""
    meta: dict[str, str] = {}
    rows: dict[str, tuple] = {}
    analysts, version = False, 0
    whole = ledger_totals.scope(None)
    for source, key, spent, columns, times in conn.execute(
            _READ, [whole, ledger_totals.scope(analyst)]):
        if source == 0:
            meta[key] = spent
        elif source == 1:
            rows[key] = (spent, columns, times)
        elif source == 2:
            analysts = True
        else:
            version = spent
    return Snapshot(meta, rows, analysts, analyst, version)


@dataclass(frozen=True)
class Kept:
    """The snapshot a connection's last charge left, and its `total_changes` after the commit."""

    snapshot: Snapshot
    changes: int

    @classmethod
    def after_charge(cls, conn: sqlite3.Connection, read: Snapshot, analyst: str,
                     written: dict[str, tuple]) -> Kept:
        """What `read` (made under the charge's write lock) becomes once the charge of
        `analyst` wrote the totals rows `written` (by scope) and committed: the totals current,
        the rows of the whole ledger and of that analyst as written."""
        meta = {**read.meta, "totals": "current"}
        return cls(Snapshot(meta, dict(written), read.analysts, analyst, read.version),
                   conn.total_changes)

    def read(self, conn: sqlite3.Connection, analyst: str | None) -> Snapshot:
        """This snapshot when it is still the ledger's (and holds `analyst`'s totals), else a
        fresh read."""
        if analyst is None or analyst == self.snapshot.analyst:
            (version,) = conn.execute("PRAGMA data_version").fetchone()
            if version == self.snapshot.version and conn.total_changes == self.changes:
                return self.snapshot
        return read(conn, analyst)
