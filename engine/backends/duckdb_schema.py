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
from .duckdb_catalog import Catalog, catalog_of
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
# Stored integer types every value of which BIGINT holds: reading them as BIGINT cannot fail.
_WITHIN_BIGINT = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER")
# The one DuckDB type each policy type is read as, whatever a file stores (docs/theory.md §1):
# the gate binds queries on these types, so its verdict depends on the policy, not the file.
DECLARED_TYPES = {SqlType.INT: "BIGINT", SqlType.FLOAT: "DOUBLE", SqlType.STR: "VARCHAR",
                  SqlType.BOOL: "BOOLEAN", SqlType.DATE: "DATE", SqlType.TIMESTAMP: "TIMESTAMP"}


def duckdb_identifier(name: str) -> str:
    """A safely quoted DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def check_schema(conn: duckdb.DuckDBPyConnection, policy: Policy, catalog: Catalog) -> None:
    """Every policy table must be a base table with the listed columns of compatible types
    (`catalog`: the data's schema as `conn` reads it)."""
    for name, table in policy.tables.items():
        found = _table_columns(catalog, name, table.columns)
        if table.privacy_unit is not None and not table.chain and table.privacy_unit not in found:
            raise PolicyError(f"tables.{name}.privacy_unit: no column {table.privacy_unit!r} "
                              "in the data")
    check_chains(policy, catalog.columns,
                 lambda count: int(conn.execute(count.sql("duckdb")).fetchall()[0][0]))
    for name, table in policy.tables.items():
        for col in (c for c in table.columns.values() if c.link_only):
            data_type = catalog.columns(name)[col.name]
            if data_type.split("(")[0].upper() not in _TYPE_FAMILIES[col.type]:
                raise PolicyError(f"tables.{name}.privacy_unit: {name}.{col.name} is {data_type}, and "
                                  f"a key of the chain the policy does not list is read as {col.type}; "
                                  f"list it under tables.{name}.columns with its type")
    for name, public in policy.public_tables.items():
        _table_columns(catalog, name, public.columns)
        _check_unique_key(conn, public)
    for name, parent in policy.parent_tables.items():
        # No uniqueness check: the parent's rows are private, and queries read one per key.
        _table_columns(catalog, name, parent.columns)


def _table_columns(catalog: Catalog, name: str, declared: Mapping[str, ColumnSpec]) -> dict[str, str]:
    """The data's columns of a policy table, which must be a base table holding every declared
    column with a type of the declared family."""
    kinds = catalog.kinds
    if name not in kinds:
        raise PolicyError(f"tables.{name}: no such table in the data "
                          f"(found: {', '.join(sorted(kinds)) or 'none'})")
    if kinds[name] not in ("BASE TABLE", "LOCAL TEMPORARY"):  # temporary: a public `data:` file
        raise PolicyError(f"tables.{name}: is a {kinds[name].lower()}, not a base table")
    found = catalog.columns(name)
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


def read_as_declared(conn: duckdb.DuckDBPyConnection, policy: Policy, catalog: Catalog) -> Catalog:
    """Make every policy table read its declared columns as their declared types: a table whose
    file stores another type of the same family (TINYINT or HUGEINT for int; an integer or
    DECIMAL for float) is shadowed by a temporary view of the same name that casts them, which
    every later statement (bounding, queries) reads. An integer that BIGINT cannot hold stops
    the opening, naming the column: reading it would otherwise fail on that value alone (only
    a stored type that can hold one is counted: which statements run depends on the schema).
    Returns `catalog` (the data's schema as opened) as queries now read it, views included."""
    tables = {**{n: t.columns for n, t in policy.tables.items()},
              **{n: t.columns for n, t in policy.public_tables.items()},
              **{n: t.columns for n, t in policy.parent_tables.items()}}
    views: dict[str, dict[str, str]] = {}
    for name, declared in tables.items():
        stored = catalog.columns(name)
        casts = {col.name: DECLARED_TYPES[col.type] for col in declared.values()
                 if stored[col.name].split("(")[0].upper() != DECLARED_TYPES[col.type]}
        if not casts or name in catalog.temporary:
            # a public table loaded from its own file: read with declared types already
            continue
        source = f"{duckdb_identifier(catalog.database)}.main.{duckdb_identifier(name)}"
        for col, kind in casts.items():
            if kind != "BIGINT" or stored[col].split("(")[0].upper() in _WITHIN_BIGINT:
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
        views[name] = casts
    return catalog.with_views(views) if views else catalog


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
    catalog = catalog_of(conn)
    return {name: frozenset(catalog.columns(name)) for name in policy.tables}


def column_types(conn: duckdb.DuckDBPyConnection, policy: Policy) -> dict[str, dict[str, str]]:
    """Each policy table's columns (lower-cased) and their DuckDB types, a chained table's
    derived unit typed as the column it is derived from: schema, not values."""
    catalog = catalog_of(conn)
    types = {name: catalog.columns(name) for name in policy.tables}
    return {name: with_unit_type(table, types) for name, table in policy.tables.items()}


def schema_gate(conn: duckdb.DuckDBPyConnection, policy: Policy) -> SchemaGate:
    """The gate for this data: each policy table and its bounded copy, EMPTY, with the types
    queries read (the policy's declared types, `read_as_declared`, and the privacy unit's)."""
    catalog = catalog_of(conn)
    types = {name: catalog.columns(name)
             for name in (*policy.tables, *policy.public_tables, *policy.parent_tables)}
    for name, table in policy.tables.items():
        types[name] = with_unit_type(table, types)
    return SchemaGate(readable_tables(policy, types))
