"""Check that the data holds the policy's tables as declared, and read each as its declared types.

The schema, never the values, decides what a query can name and how the gate binds it: every
table and column the policy lists must exist with a type of the declared family, and a table
stored with another type of that family is read through a view that casts it.
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from ..errors import PolicyError
from ..policy import ColumnSpec, Policy, PublicTableSpec
from ..rewrite import readable_tables
from ..sql_types import SqlType
from .chain_units import check_chains, with_unit_type
from .duckdb_gate import SchemaGate

FLOAT_TYPES = ("FLOAT", "DOUBLE", "REAL", "DECIMAL")
_TYPE_FAMILIES = {
    SqlType.INT: ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                  "UINTEGER", "UBIGINT", "UHUGEINT"),
    SqlType.FLOAT: ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                    "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "DECIMAL"),
    SqlType.STR: ("VARCHAR",),
    SqlType.BOOL: ("BOOLEAN",),
    SqlType.DATE: ("DATE",),
    SqlType.TIMESTAMP: ("TIMESTAMP",),
}
# The one DuckDB type each policy type is read as, whatever a file stores (docs/theory.md §1):
# the gate binds queries on these types, so its verdict depends on the policy, not the file.
DECLARED_TYPES = {SqlType.INT: "BIGINT", SqlType.FLOAT: "DOUBLE", SqlType.STR: "VARCHAR",
                  SqlType.BOOL: "BOOLEAN", SqlType.DATE: "DATE", SqlType.TIMESTAMP: "TIMESTAMP"}


def duckdb_identifier(name: str) -> str:
    """A safely quoted DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def check_schema(conn: duckdb.DuckDBPyConnection, policy: Policy) -> None:
    """Every policy table must be a base table with the listed columns of compatible types.
    Only the data's own catalog and the connection's temporary one are read: another
    connection to the same file in this process shares the bounded copies' catalog, whose
    copies (views among them) carry the tables' names."""
    rows = conn.execute(
        "SELECT lower(table_name), table_type FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_catalog IN (current_database(), 'temp')"
    ).fetchall()
    kinds = dict(rows)
    for name, table in policy.tables.items():
        found = _table_columns(conn, kinds, name, table.columns)
        if table.privacy_unit is not None and not table.chain and table.privacy_unit not in found:
            raise PolicyError(f"tables.{name}.privacy_unit: no column {table.privacy_unit!r} "
                              "in the data")
    check_chains(policy, lambda name: columns(conn, name),
                 lambda count: int(conn.execute(count.sql("duckdb")).fetchall()[0][0]))
    for name, table in policy.tables.items():
        for col in (c for c in table.columns.values() if c.link_only):
            data_type = columns(conn, name)[col.name]
            if data_type.split("(")[0].upper() not in _TYPE_FAMILIES[col.type]:
                raise PolicyError(f"tables.{name}.privacy_unit: {name}.{col.name} is {data_type}, and "
                                  f"a key of the chain the policy does not list is read as {col.type}; "
                                  f"list it under tables.{name}.columns with its type")
    for name, public in policy.public_tables.items():
        _table_columns(conn, kinds, name, public.columns)
        _check_unique_key(conn, public)
    for name, parent in policy.parent_tables.items():
        # No uniqueness check: the parent's rows are private, and queries read one per key.
        _table_columns(conn, kinds, name, parent.columns)


def _table_columns(conn: duckdb.DuckDBPyConnection, kinds: Mapping[str, str], name: str,
                   declared: Mapping[str, ColumnSpec]) -> dict[str, str]:
    """The data's columns of a policy table, which must be a base table holding every declared
    column with a type of the declared family."""
    if name not in kinds:
        raise PolicyError(f"tables.{name}: no such table in the data "
                          f"(found: {', '.join(sorted(kinds)) or 'none'})")
    if kinds[name] not in ("BASE TABLE", "LOCAL TEMPORARY"):  # temporary: a public `data:` file
        raise PolicyError(f"tables.{name}: is a {kinds[name].lower()}, not a base table")
    found = columns(conn, name)
    for col in declared.values():
        if col.link_only:  # a chain's key: checked with its chain (check_chains)
            continue
        path = f"tables.{name}.columns.{col.name}"
        if col.name not in found:
            raise PolicyError(f"{path}: no such column in the data")
        data_type = found[col.name].split("(")[0].upper()
        if col.type == SqlType.TIMESTAMP and data_type != "TIMESTAMP" and "TIMESTAMP" in data_type:
            raise PolicyError(f"{path}.type: the data column is {found[col.name]}; a "
                              "timestamp column must be TIMESTAMP (without time zone, "
                              "microseconds): EXTRACT and date_trunc of a time zone's "
                              "timestamps depend on the session, so store them as UTC "
                              "TIMESTAMP")
        if data_type not in _TYPE_FAMILIES[col.type]:
            raise PolicyError(f"{path}.type: the policy says {col.type} but the data "
                              f"column is {found[col.name]}")
    return found


def read_as_declared(conn: duckdb.DuckDBPyConnection, policy: Policy) -> None:
    """Make every policy table read its declared columns as their declared types: a table whose
    file stores another type of the same family (TINYINT or HUGEINT for int; an integer or
    DECIMAL for float) is shadowed by a temporary view of the same name that casts them, which
    every later statement (bounding, queries) reads. An integer that BIGINT cannot hold stops
    the opening, naming the column: reading it would otherwise fail on that value alone."""
    catalog = conn.execute("SELECT current_database()").fetchall()[0][0]
    tables = {**{n: t.columns for n, t in policy.tables.items()},
              **{n: t.columns for n, t in policy.public_tables.items()},
              **{n: t.columns for n, t in policy.parent_tables.items()}}
    for name, declared in tables.items():
        stored = columns(conn, name)
        casts = {col.name: DECLARED_TYPES[col.type] for col in declared.values()
                 if stored[col.name].split("(")[0].upper() != DECLARED_TYPES[col.type]}
        if not casts:
            continue
        temporary = conn.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary AND "
                                 "lower(table_name) = ?", [name]).fetchall()[0][0]
        if temporary:  # a public table loaded from its own file: read with declared types already
            continue
        source = f"{duckdb_identifier(catalog)}.main.{duckdb_identifier(name)}"
        for col, kind in casts.items():
            if kind != "BIGINT":
                continue
            quoted = duckdb_identifier(col)
            over = conn.execute(f"SELECT count(*) FROM {source} WHERE {quoted} IS NOT NULL AND "
                                f"TRY_CAST({quoted} AS BIGINT) IS NULL").fetchall()[0][0]
            if over:
                raise PolicyError(f"tables.{name}.columns.{col}.type: the data column is "
                                  f"{stored[col]} and holds {over} value(s) outside BIGINT, which "
                                  "an int column is read as; declare it float or store it as "
                                  "BIGINT", values=over)
        replaced = ", ".join(f"CAST({duckdb_identifier(col)} AS {kind}) AS {duckdb_identifier(col)}"
                             for col, kind in casts.items())
        conn.execute(f"CREATE TEMP VIEW {duckdb_identifier(name)} AS SELECT * REPLACE ({replaced}) "
                     f"FROM {source}")


def _check_unique_key(conn: duckdb.DuckDBPyConnection, public: PublicTableSpec) -> None:
    """A public table's key must be unique in the data, so that a private row joins at most one
    of its rows. This reads the public table only: the error, seen by whoever opens the data,
    says nothing about private rows (NULL keys join nothing and may repeat)."""
    key, table = duckdb_identifier(public.key), duckdb_identifier(public.name)
    repeated = conn.execute(f"SELECT COUNT(*) FROM (SELECT {key} FROM main.{table} WHERE {key} "
                            f"IS NOT NULL GROUP BY {key} HAVING COUNT(*) > 1)").fetchone()
    if repeated is not None and repeated[0]:
        raise PolicyError(f"tables.{public.name}.key: {public.key} is not unique in the data "
                          f"({repeated[0]} value(s) repeat); a public table's key must be unique, "
                          "so that each private row joins at most one of its rows",
                          repeated=repeated[0])


def data_columns(conn: duckdb.DuckDBPyConnection, policy: Policy) -> dict[str, frozenset[str]]:
    """The data's column names (lower-cased) of each policy table: schema, not values. The plan
    uses them to say that a column exists but is not in the policy, rather than unknown."""
    return {name: frozenset(columns(conn, name)) for name in policy.tables}


def column_types(conn: duckdb.DuckDBPyConnection, policy: Policy) -> dict[str, dict[str, str]]:
    """Each policy table's columns (lower-cased) and their DuckDB types, a chained table's
    derived unit typed as the column it is derived from: schema, not values."""
    types = {name: columns(conn, name) for name in policy.tables}
    return {name: with_unit_type(table, types) for name, table in policy.tables.items()}


def columns(conn: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    """Lower-cased column name -> DuckDB type of a table in the main schema, as queries read
    it (a temporary view from `read_as_declared` shadows the stored table). Read from the
    `duckdb_columns` view, which information_schema.columns renames column for column (without
    the other 40 columns that view computes: it is read several times as a process opens the
    data)."""
    return dict(conn.execute(
        "SELECT lower(column_name), data_type FROM duckdb_columns "
        "WHERE schema_name = 'main' AND lower(table_name) = ? "
        "ORDER BY database_name = 'temp', column_index", [table]
    ).fetchall())


def schema_gate(conn: duckdb.DuckDBPyConnection, policy: Policy) -> SchemaGate:
    """The gate for this data: each policy table and its bounded copy, EMPTY, with the types
    queries read (the policy's declared types, `read_as_declared`, and the privacy unit's)."""
    types = {name: columns(conn, name)
             for name in (*policy.tables, *policy.public_tables, *policy.parent_tables)}
    for name, table in policy.tables.items():
        types[name] = with_unit_type(table, types)
    return SchemaGate(readable_tables(policy, types))
