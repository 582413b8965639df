"""The catalog the Postgres wire endpoint shows: an in-memory DuckDB holding one EMPTY table per
policy table with its declared columns, so the pg_catalog and information_schema questions of
psql, SQLAlchemy and JDBC are answered from the policy alone; it has no file, no data, no
extensions and no file system access."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import struct
import threading
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from ..backends.duckdb_schema import DECLARED_TYPES
from ..errors import DpsqlError
from ..policy import Policy
from .schema import public_schema


class WireError(DpsqlError):
    """A statement the Postgres endpoint does not serve; carries its SQLSTATE."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message, sqlstate=sqlstate)


TIME_LIMIT = 5.0  # seconds a catalog question may run before it is interrupted
_OIDS = {"BOOLEAN": 16, "BIGINT": 20, "SMALLINT": 21, "INTEGER": 23, "VARCHAR": 25, "FLOAT": 700,
         "DOUBLE": 701, "DATE": 1082, "TIMESTAMP": 1114, "UBIGINT": 20, "UINTEGER": 20, "USMALLINT": 23,
         "UTINYINT": 21, "TINYINT": 21, "HUGEINT": 1700, "DECIMAL": 1700}
# Postgres spellings DuckDB does not read, rewritten before a catalog question runs.
_REWRITES = ((re.compile(r"OPERATOR\s*\(\s*pg_catalog\s*\.\s*([^\s)]+)\s*\)", re.I), r"\1"),
             (re.compile(r"COLLATE\s+pg_catalog\s*\.\s*\"?default\"?", re.I), ""),
             (re.compile(r"::\s*(?:pg_catalog\s*\.\s*)?reg(?:class|type|proc|namespace)\b", re.I), ""),
             (re.compile(r"\bAS\s+REG(?:CLASS|TYPE|PROC|NAMESPACE)\b", re.I), "AS VARCHAR"),
             (re.compile(r"\bAS\s+OID\b", re.I), "AS INTEGER"),
             (re.compile(r"\b(?:pg_catalog|information_schema)\s*\.\s*(?=_pg_expandarray\b)", re.I), ""),
             (re.compile(r"\bpg_catalog\s*\.\s*", re.I), ""))
# pg_catalog views as psql reads them: DuckDB's, less this schema's own views, plus the columns
# psql 15 asks for that DuckDB lacks.
_SHADOW = "dpsql_pg"
_SHADOWED = {
    "pg_class": "SELECT *, false AS relforcerowsecurity FROM pg_catalog.pg_class "
                "WHERE relnamespace NOT IN {hidden}",
    "pg_tables": "SELECT * FROM pg_catalog.pg_tables WHERE schemaname <> '{shadow}'",
    "pg_namespace": "SELECT * FROM pg_catalog.pg_namespace WHERE oid NOT IN {hidden}",
    # the endpoint's reported parameters (as SHOW answers them), not DuckDB's own settings
    "pg_settings": "SELECT * FROM {shadow}.dpsql_settings",
}
# pg_catalog tables DuckDB lacks that psql's \d reads: present and empty (no policies, no
# extended statistics, no publications, no inheritance, no roles but the analyst's).
_EMPTY = {
    "pg_policy": "oid INTEGER, polname VARCHAR, polrelid INTEGER, polcmd VARCHAR, polpermissive BOOLEAN, "
                 "polroles INTEGER[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_roles": "oid INTEGER, rolname VARCHAR",
    "pg_statistic_ext": "oid INTEGER, stxrelid INTEGER, stxname VARCHAR, stxnamespace INTEGER, "
                        "stxkind VARCHAR[], stxkeys INTEGER[], stxstattarget INTEGER, stxexprs VARCHAR",
    "pg_publication": "oid INTEGER, pubname VARCHAR, puballtables BOOLEAN",
    "pg_publication_rel": "oid INTEGER, prpubid INTEGER, prrelid INTEGER, prqual VARCHAR, prattrs INTEGER[]",
    "pg_publication_namespace": "oid INTEGER, pnpubid INTEGER, pnnspid INTEGER",
    "pg_inherits": "inhrelid INTEGER, inhparent INTEGER, inhseqno INTEGER, inhdetachpending BOOLEAN",
    "pg_trigger": "oid INTEGER, tgrelid INTEGER, tgname VARCHAR, tgenabled VARCHAR, tgisinternal BOOLEAN, "
                  "tgparentid INTEGER",
}
_MACROS = ("pg_get_userbyid(x) AS 'dpsql'", "to_regtype(x) AS CAST(NULL AS INTEGER)",
           "to_regclass(x) AS CAST(NULL AS INTEGER)", "pg_encoding_to_char(x) AS 'UTF8'",
           "obj_description(x, y) AS CAST(NULL AS VARCHAR)",
           "pg_get_function_identity_arguments(x) AS ''", "pg_is_in_recovery() AS false",
           "pg_get_statisticsobjdef_columns(x) AS ''", "pg_relation_is_publishable(x) AS false",
           "pg_get_serial_sequence(x, y) AS CAST(NULL AS VARCHAR)", "pg_collation_is_visible(x) AS true",
           "json_build_object(a, b, c, d) AS CAST(NULL AS VARCHAR), "
           "(a, b, c, d, e, f, g, h, i, j, k, l, m, n) AS CAST(NULL AS VARCHAR)",
           "array_upper(x, y) AS len(x)",
           "pg_get_expr(x, y) AS CAST(NULL AS VARCHAR), (x, y, z) AS CAST(NULL AS VARCHAR)",
           "pg_get_function_result(x) AS CAST(NULL AS VARCHAR)",
           "pg_get_indexdef(x) AS CAST(NULL AS VARCHAR), (x, y, z) AS CAST(NULL AS VARCHAR)",
           # JDBC's key and index questions expand pg_index.indkey, which is always empty here
           "_pg_expandarray(x) AS {'x': CAST(NULL AS INTEGER), 'n': CAST(NULL AS INTEGER)}")


# The types whose binary format is sent when a client asks (JDBC does for a prepared statement
# it runs again): each cell is converted from its text form, so both formats say the same.
BINARY_OIDS = frozenset((16, 18, 19, 20, 21, 23, 25, 26, 700, 701, 1043, 1082, 1114, 1700))
_EPOCH = dt.datetime(2000, 1, 1)  # Postgres' binary dates and timestamps count from here


@dataclass(frozen=True)
class Rows:
    """A statement's answer as sent on the wire: (name, type oid) columns, text cells, tag."""

    columns: tuple[tuple[str, int], ...]
    rows: tuple[tuple[str | None, ...], ...]
    tag: str


class Catalog:
    """The policy's tables, empty, in a locked in-memory DuckDB that clients' catalog queries run on."""

    def __init__(self, policy: Policy, parameters: dict[str, str]) -> None:
        self._db = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": "128MB"})
        self._db.execute("CREATE SCHEMA public")
        self._db.execute(f"CREATE SCHEMA {_SHADOW}")
        self._db.execute(f"SET search_path = 'public,{_SHADOW}'")
        hidden = f"(SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = '{_SHADOW}')"
        self._db.execute(f"CREATE TABLE {_SHADOW}.dpsql_settings (name VARCHAR, setting VARCHAR, "
                         "short_desc VARCHAR, vartype VARCHAR)")
        self._db.executemany(f"INSERT INTO {_SHADOW}.dpsql_settings VALUES (?, ?, '', 'string')",
                             sorted({**parameters, "max_index_keys": "32"}.items()))
        for view, select in _SHADOWED.items():
            self._db.execute(f"CREATE VIEW {_SHADOW}.{view} AS {select.format(hidden=hidden, shadow=_SHADOW)}")
        schema = public_schema(policy)
        self.tables: frozenset[str] = frozenset(
            name.lower() for kind in ("tables", "public_tables", "parent_tables") for name in schema[kind])
        for kind in ("tables", "public_tables", "parent_tables"):
            for name, table in schema[kind].items():
                columns = ", ".join(f"{_quote(c)} {DECLARED_TYPES[spec['type']]}"
                                    for c, spec in table["columns"].items())
                self._db.execute(f"CREATE TABLE public.{_quote(name)} ({columns})")
        for table, columns in _EMPTY.items():
            self._db.execute(f"CREATE TABLE {_SHADOW}.{table} ({columns})")
        for macro in _MACROS:
            self._db.execute(f"CREATE MACRO {_SHADOW}.{macro}")
        for setting in ("SET enable_external_access = false", "SET autoload_known_extensions = false",
                        "SET autoinstall_known_extensions = false", "SET lock_configuration = true"):
            self._db.execute(setting)
        self._lock = threading.Lock()

    def query(self, sql: str) -> Rows:
        """Run a catalog question on the empty tables (interrupted after TIME_LIMIT seconds)."""

        for pattern, replacement in _REWRITES:
            sql = pattern.sub(replacement, sql)
        with self._lock:
            return self._run(sql)

    def _run(self, sql: str) -> Rows:
        try:
            statements = duckdb.extract_statements(sql)
        except duckdb.Error as exc:
            raise WireError(f"could not parse the SQL: {str(exc).splitlines()[0][:200]}", "42601") from None
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            raise WireError("catalog statement refused: one SELECT about the tables and columns is "
                            "answered at a time, nothing that changes the catalog", "0A000")
        cursor = self._db
        timer = threading.Timer(TIME_LIMIT, cursor.interrupt)
        timer.start()
        try:
            cursor.execute(sql)
            if cursor.description is None:
                raise WireError("catalog statement refused: only questions about the tables and "
                                "columns are answered", "0A000")
            columns = tuple((str(d[0]), _OIDS.get(str(d[1]).split("(")[0].upper(), 25))
                            for d in cursor.description)
            rows = tuple(tuple(text_cell(v) for v in row) for row in cursor.fetchmany(10_000))
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0][:200]
            raise WireError(f"catalog question not answered ({first}); this endpoint answers the "
                            "pg_catalog and information_schema questions of psql, SQLAlchemy and JDBC "
                            "about the policy's tables and columns", "0A000") from None
        finally:
            timer.cancel()
        return Rows(columns, rows, f"SELECT {len(rows)}")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def text_cell(value: Any) -> str | None:
    """A value in Postgres' text format (NULL as None, booleans t/f, arrays in braces)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    try:
        if value != value:  # NaN and pandas' missing values
            return "NaN" if isinstance(value, float) else None
    except (TypeError, ValueError):
        pass
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "t" if value else "f"
    if isinstance(value, float):
        return ("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else repr(value)
    if isinstance(value, list | tuple):
        return "{" + ",".join("NULL" if v is None else str(text_cell(v)) for v in value) + "}"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def binary_cell(text: str, oid: int) -> bytes:
    """A text cell in the binary format of its type (one of BINARY_OIDS)."""
    if oid == 16:
        return b"\1" if text == "t" else b"\0"
    if oid in (20, 21, 23, 26):
        return int(text).to_bytes({20: 8, 21: 2, 23: 4, 26: 4}[oid], "big", signed=oid != 26)
    if oid in (700, 701):
        return struct.pack("!f" if oid == 700 else "!d", float(text))
    if oid == 1082:
        return struct.pack("!i", (dt.date.fromisoformat(text) - _EPOCH.date()).days)
    if oid == 1114:
        delta = dt.datetime.fromisoformat(text) - _EPOCH
        return struct.pack("!q", (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)
    if oid == 1700:
        return _numeric(decimal.Decimal(text))
    return text.encode()


def _numeric(value: decimal.Decimal) -> bytes:
    """NUMERIC's binary form: digit count, weight, sign, scale, then base-10000 digits."""
    if value.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    exponent = value.as_tuple().exponent
    scale = max(0, -exponent) if isinstance(exponent, int) else 0
    whole, _, fraction = f"{abs(value):f}".partition(".")
    whole = whole.lstrip("0")
    whole = "0" * (-len(whole) % 4) + whole
    fraction += "0" * (-len(fraction) % 4)
    digits = [int(whole[i:i + 4]) for i in range(0, len(whole), 4)] + \
        [int(fraction[i:i + 4]) for i in range(0, len(fraction), 4)]
    weight = len(whole) // 4 - 1
    while digits and digits[0] == 0:
        digits, weight = digits[1:], weight - 1
    while digits and digits[-1] == 0:
        digits.pop()
    sign = 0x4000 if value.is_signed() and digits else 0
    return struct.pack(f"!hhHh{len(digits)}h", len(digits), weight if digits else 0, sign, scale, *digits)
