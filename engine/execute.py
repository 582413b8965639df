"""Open the private data in DuckDB, locked down, and run rewritten queries on it.

The data is opened read-only (a CSV or Parquet file is loaded into memory first), then
external access is switched off and the configuration locked, so no query can read or write
files, load extensions or change settings. Exact results stay inside this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from .errors import InputError, PolicyError
from .gate import SchemaGate
from .policy import Policy, TableSpec
from .rewrite import BOUNDED_CATALOG, bounded_columns, bounded_table_path, bounded_table_sql

_LOCKED = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "error_on_division_by_zero": False,
}
_TYPE_FAMILIES = {
    "int": ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
            "UINTEGER", "UBIGINT", "UHUGEINT"),
    "float": ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
              "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "DECIMAL"),
    "str": ("VARCHAR",),
    "bool": ("BOOLEAN",),
}


@dataclass(frozen=True)
class ExactAnswer:
    """Exact per-group results. Internal: never returned to a caller of the engine."""

    keys: list[tuple]
    values: dict[str, list]


def open_data(path: str | Path, policy: Policy) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB, CSV or Parquet file locked down, and check it against the policy."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data file not found: {path} (expected a DuckDB, CSV or Parquet file)")
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".parquet", ".pq"):
            conn = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                      "autoload_known_extensions": False})
            reader = "read_parquet" if suffix in (".parquet", ".pq") else "read_csv_auto"
            table = duckdb_identifier(path.stem.lower())
            conn.execute(f"CREATE TABLE {table} AS SELECT * FROM {reader}(?)", [str(path)])
            for key, value in _LOCKED.items():
                conn.execute(f"SET {key} = {str(value).lower()}")
            conn.execute("SET lock_configuration = true")
        else:
            conn = duckdb.connect(str(path), read_only=True,
                                  config={**_LOCKED, "lock_configuration": True})
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        raise InputError(f"cannot open data file {path}: {first}") from None
    _check_schema(conn, policy)
    return conn


def duckdb_identifier(name: str) -> str:
    """A safely quoted DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def _check_schema(conn: duckdb.DuckDBPyConnection, policy: Policy) -> None:
    """Every policy table must be a base table with the listed columns of compatible types."""
    rows = conn.execute(
        "SELECT lower(table_name), table_type FROM information_schema.tables "
        "WHERE table_schema = 'main'"
    ).fetchall()
    kinds = dict(rows)
    for name, table in policy.tables.items():
        if name not in kinds:
            raise PolicyError(f"tables.{name}: no such table in the data "
                              f"(found: {', '.join(sorted(kinds)) or 'none'})")
        if kinds[name] != "BASE TABLE":
            raise PolicyError(f"tables.{name}: is a {kinds[name].lower()}, not a base table")
        columns = dict(conn.execute(
            "SELECT lower(column_name), data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND lower(table_name) = ?", [name]
        ).fetchall())
        if table.privacy_unit is not None and table.privacy_unit not in columns:
            raise PolicyError(f"tables.{name}.privacy_unit: no column {table.privacy_unit!r} "
                              "in the data")
        for col in table.columns.values():
            path = f"tables.{name}.columns.{col.name}"
            if col.name not in columns:
                raise PolicyError(f"{path}: no such column in the data")
            data_type = columns[col.name].split("(")[0].upper()
            if data_type not in _TYPE_FAMILIES[col.type]:
                raise PolicyError(f"{path}.type: the policy says {col.type} but the data "
                                  f"column is {columns[col.name]}")


class DataFailure(Exception):
    """SQL that passed the gate failed on the data. Internal: the message is never shown,
    because it could quote data values and its occurrence depends on the data."""


def run(conn: duckdb.DuckDBPyConnection, sql: str, n_keys: int) -> ExactAnswer:
    """Run the rewritten query; the first `n_keys` columns are group keys."""
    try:
        cursor = conn.execute(sql)
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    except duckdb.Error:
        raise DataFailure("the query failed while running on the data") from None
    keys = [tuple(row[:n_keys]) for row in rows]
    values = {name: [row[i] for row in rows] for i, name in enumerate(names) if i >= n_keys}
    return ExactAnswer(keys, values)


def bound_units(conn: duckdb.DuckDBPyConnection, table: TableSpec, hash_key: str) -> None:
    """Make, once per connection, the bounded copy of `table` that queries then read.

    The copy (unit and policy columns of each unit's kept rows) is made whether or not any
    unit is over the bound, so that nothing observable says whether one is. It goes into an
    in-memory catalog that DuckDB compresses on checkpoint, so it costs less memory than the
    rows it holds and scans as fast as the table itself."""
    try:
        attached = conn.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = ?",
                                [BOUNDED_CATALOG]).fetchone()[0]
        if not attached:
            conn.execute(f"ATTACH ':memory:' AS {BOUNDED_CATALOG} (COMPRESS, READ_WRITE)")
        conn.execute(bounded_table_sql(table, hash_key))
        conn.execute(f"CHECKPOINT {BOUNDED_CATALOG}")
    except duckdb.Error:
        raise DataFailure("bounding rows per privacy unit failed on the data") from None


def schema_gate(conn: duckdb.DuckDBPyConnection, policy: Policy) -> SchemaGate:
    """The gate for this data: each policy table and its bounded copy, EMPTY, with the data's
    column types (the privacy unit and the policy's columns, which are all a query may read)."""
    tables: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for name, table in policy.tables.items():
        types = dict(conn.execute(
            "SELECT lower(column_name), data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND lower(table_name) = ?", [name]).fetchall())
        if table.privacy_unit is None:
            tables[(name,)] = [(col, types[col]) for col in sorted(table.columns)]
            continue
        columns = [(col, types[col]) for col in bounded_columns(table)]
        tables[(name,)] = columns
        tables[bounded_table_path(table)] = columns
    return SchemaGate(tables)
