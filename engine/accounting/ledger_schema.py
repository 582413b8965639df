"""The ledger's schema: the tables a new ledger is made with, and the migration of an older
ledger in place.

Version 6 is version 5 with every charge linked in the hash chain (`chain.py`). The version is
bumped so that a dpsql of version 5 refuses the ledger (it opens only its own version) instead
of charging it without a link. Versions 2 to 4 gain their columns, then (like a version 5
ledger without them) their running totals and answers table, and are chained afresh; a version
5 ledger already chained keeps its links, its linked records are checked and the charges an
older dpsql appended after them are linked.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from . import chain
from . import totals as ledger_totals
from .ledger_binding import LEGACY_MODE

SCHEMA_VERSION = "6"
SCHEMA = """
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
    aggregates TEXT NOT NULL,
    columns TEXT,
    times TEXT
);
CREATE TABLE bindings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    budget REAL NOT NULL,
    k INTEGER NOT NULL,
    eta REAL NOT NULL,
    mode TEXT NOT NULL DEFAULT 'auto',
    eta_by_columns TEXT NOT NULL DEFAULT ''
);
"""
_MIGRATE_2_TO_3 = (
    "ALTER TABLE charges ADD COLUMN answer TEXT",
    "ALTER TABLE bindings ADD COLUMN mode TEXT NOT NULL DEFAULT 'auto'",
    f"INSERT OR IGNORE INTO meta (key, value) VALUES ('mode', '{LEGACY_MODE}')",
    "UPDATE meta SET value = '3' WHERE key = 'schema_version'",
)
_MIGRATE_3_TO_4 = (
    "ALTER TABLE charges ADD COLUMN columns TEXT",
    "ALTER TABLE bindings ADD COLUMN eta_by_columns TEXT NOT NULL DEFAULT ''",
    "UPDATE meta SET value = '4' WHERE key = 'schema_version'",
)
_MIGRATE_4_TO_5 = (
    "ALTER TABLE charges ADD COLUMN times TEXT",
    "UPDATE meta SET value = '5' WHERE key = 'schema_version'",
)
MIGRATIONS = {"2": _MIGRATE_2_TO_3 + _MIGRATE_3_TO_4 + _MIGRATE_4_TO_5,
              "3": _MIGRATE_3_TO_4 + _MIGRATE_4_TO_5, "4": _MIGRATE_4_TO_5, "5": ()}
"""The SQL that brings each older version to version 5; `migrate` then makes it version 6."""
TABLES = {"meta", "charges", "bindings"}


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring a ledger of a version in MIGRATIONS to SCHEMA_VERSION inside the caller's
    transaction: version 3 added the stored answers (none for past charges) and the binding's
    mode (auto, what version 2 used); version 4 the columns each answer read (every column, for
    past charges) and the binding's eta per column set; version 5 each chain answer's time
    points (none for past charges); version 6 the chain. A version already migrated by another
    opener is left alone."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = None if row is None else row[0]
    if version not in MIGRATIONS:
        return
    for statement in MIGRATIONS[version]:
        conn.execute(statement)
    totals = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                          "'totals'").fetchone()
    if version != "5" or totals is None:
        ledger_totals.migrate(conn, path)
        chain.relink(conn)  # links made before the migration cover other rows
    else:
        chain.extend(conn, path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [SCHEMA_VERSION])
