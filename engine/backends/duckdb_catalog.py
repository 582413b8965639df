"""The data's schema as one DuckDB connection reads it: read once as the data is opened, shared
by everything that asks it afterwards (the schema check, the declared types, the prepared
copies' fingerprints, the gate, the plan's column names).

Opening the data used to ask the catalog a dozen questions, each a statement DuckDB parses,
binds and runs, in every one-shot query process (issue 26). The data is opened
read-only and only the engine's own statements change what a connection sees (the casting
views of `read_as_declared`, which `with_views` adds without asking again), so one reading
holds for the connection's life. It holds the data's own catalog and the connection's
temporary one (the public tables loaded from their files and the casting views), never the
bounded copies, the owner's prepared copies or the engine's own bookkeeping, which share the
DuckDB instance but are not the data. Schema only, never a value.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import duckdb

_TABLES_SQL = (
    "SELECT current_database(), lower(table_name), table_type, table_catalog = 'temp' "
    "FROM information_schema.tables "
    "WHERE table_schema = 'main' AND table_catalog IN (current_database(), 'temp') "
    "ORDER BY table_catalog = 'temp'")
_COLUMNS_SQL = (
    "SELECT lower(table_name), lower(column_name), data_type FROM duckdb_columns "
    "WHERE schema_name = 'main' AND database_name IN (current_database(), 'temp') "
    "ORDER BY database_name = 'temp', column_index")


@dataclass(frozen=True)
class Catalog:
    """Each table in the data's main schema (lower-cased names): its kind and whether it is
    temporary (as the data was opened, before the casting views), its columns with their DuckDB
    types as queries read them (a temporary table or view shadows a stored table of the same
    name); `database` is the data's catalog; `shadowed`, the tables a temporary view casting
    them to their declared types shadows."""

    database: str
    kinds: Mapping[str, str]  # table -> BASE TABLE, VIEW or LOCAL TEMPORARY
    tables: Mapping[str, Mapping[str, str]]  # table -> column -> type
    temporary: frozenset[str]
    shadowed: frozenset[str] = frozenset()

    def holder(self, table: str) -> str:
        """The catalog holding what queries read as `table`: the temporary one when a casting
        view shadows it, else the data's (so a view in another catalog reads the same)."""
        return "temp" if table in self.shadowed else self.database

    def columns(self, table: str) -> dict[str, str]:
        """Lower-cased column name -> DuckDB type of `table` (empty if the data has none)."""
        return dict(self.tables.get(table, {}))

    def with_views(self, casts: Mapping[str, Mapping[str, str]]) -> Catalog:
        """The catalog once each table in `casts` is shadowed by a view that reads its columns
        there as the types given, and the others as stored (`SELECT * REPLACE (CAST ...)`)."""
        tables = {name: {col: casts.get(name, {}).get(col, kind) for col, kind in cols.items()}
                  for name, cols in self.tables.items()}
        return Catalog(self.database, self.kinds, tables, self.temporary,
                       self.shadowed | frozenset(casts))


def read_catalog(conn: duckdb.DuckDBPyConnection) -> Catalog:
    """The catalog as `conn` sees it now: two statements, whatever the number of tables."""
    rows = conn.execute(_TABLES_SQL).fetchall()
    database = rows[0][0] if rows else conn.execute("SELECT current_database()").fetchall()[0][0]
    kinds = {name: kind for _, name, kind, _ in rows}  # a temporary table shadows a stored one
    temporary = {name for _, name, kind, _ in rows if kind == "LOCAL TEMPORARY"}
    shadowed = {name for _, name, kind, temp in rows if temp and kind == "VIEW"}
    tables: dict[str, dict[str, str]] = {}
    for name, column, kind in conn.execute(_COLUMNS_SQL).fetchall():
        tables.setdefault(name, {})[column] = kind
    return Catalog(database, kinds, tables, frozenset(temporary), frozenset(shadowed))


_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def keep(conn: duckdb.DuckDBPyConnection, catalog: Catalog) -> None:
    """Remember `catalog` as what `conn` reads for the rest of its life (set as it is opened)."""
    _KEPT[conn] = catalog


def catalog_of(conn: duckdb.DuckDBPyConnection) -> Catalog:
    """The catalog kept for `conn` when the engine opened it, else read now (a connection
    opened elsewhere, as tests and the owner's tools open one)."""
    kept = _KEPT.get(conn)
    return kept if kept is not None else read_catalog(conn)
