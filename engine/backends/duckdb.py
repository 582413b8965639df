"""The DuckDB backend: the data in a locked-down DuckDB, SQL bound on a schema-only gate first.

Its parts: engine/backends/duckdb_execute.py opens the data (read-only, no external access, limits, locked
configuration), checks the schema, makes the bounded copies (one per column set a query reads,
docs/theory.md §28) and runs SQL under the time limit
(engine/backends/bounded_store.py keeps the owner's prepared copies beside the ledger);
engine/backends/duckdb_gate.py binds SQL on empty tables of the data's types and refuses what could fail.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from ..errors import QueryRefused
from ..policy import Policy, TableSpec
from ..rewrite import copies_read, copy_scope
from ..sql.public_keys import distinct_rows
from . import ExactAnswer
from . import duckdb_execute as execute
from . import duckdb_schema as schema
from .bounded_store import PreparedCopy, store_dir


class DuckDBBackend:
    """A Backend over one DuckDB connection to the private data."""

    dialect = "duckdb"

    def __init__(self, conn: duckdb.DuckDBPyConnection, policy: Policy) -> None:
        self.conn = conn
        self._policy = policy
        self._gate = schema.schema_gate(conn, policy)
        self._columns = schema.data_columns(conn, policy)
        self._types = schema.column_types(conn, policy)
        self._bounded: set[tuple[str, frozenset[str] | None]] = set()
        self._public_rows: dict[tuple[str, tuple[str, ...], int], tuple[tuple, ...]] = {}

    @classmethod
    def open(cls, path: str | Path, policy: Policy, ledger: str | Path | None = None,
             hash_key: str | None = None) -> DuckDBBackend:
        """Open a DuckDB, CSV or Parquet file locked down and check it against the policy; the
        owner's bounded copies kept beside `ledger` for its `hash_key` are used when current."""
        store = None if ledger is None else store_dir(ledger)
        conn = execute.open_data(path, policy, store, hash_key)
        try:
            return cls(conn, policy)
        except BaseException:
            conn.close()
            raise

    @classmethod
    def copy_of(cls, frames: Mapping[str, Any], policy: Policy) -> DuckDBBackend:
        """Copy in-memory tables (DataFrames, Arrow tables, DuckDB relations) by policy table
        name into a locked-down DuckDB of the engine's own, and check them against the policy."""
        conn = execute.open_frames(frames, policy)
        try:
            return cls(conn, policy)
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def prepare_copies(path: str | Path, policy: Policy, ledger: str | Path,
                       hash_key: str) -> tuple[PreparedCopy, ...]:
        """The owner's act (`dpsql prepare`): write the bounded copy of every table with a
        privacy unit beside `ledger`, for later backends opened on this data, policy and ledger."""
        return execute.prepare_copies(path, policy, hash_key, store_dir(ledger))

    def data_columns(self) -> Mapping[str, frozenset[str]]:
        return self._columns

    def public_rows(self, table: str, columns: tuple[str, ...], limit: int) -> tuple[tuple, ...]:
        """A public table's distinct rows of `columns` (no NULL), at most `limit + 1`, read once
        per connection: the data is read-only."""
        key = (table, columns, limit)
        if key not in self._public_rows:
            if table not in self._policy.public_tables:
                raise ValueError(f"{table} is not a public table")
            try:
                with execute.time_limit(self.conn):
                    found = self.conn.execute(distinct_rows(table, columns, limit).sql(self.dialect)).fetchall()
            except duckdb.Error as exc:  # the public table's rows only: the message may be shown
                raise QueryRefused(f"reading the rows of the public table {table} failed: "
                                   f"{str(exc).splitlines()[0]}") from None
            self._public_rows[key] = tuple(tuple(row) for row in found)
        return self._public_rows[key]

    def render(self, query: exp.Expression) -> str:
        """The tree as DuckDB SQL; the bounded copy of each column set it reads joins the gate."""
        for path, columns in copies_read(self._policy, query, self._types).items():
            self._gate.add(path, columns)
        return query.sql(self.dialect)

    def check(self, sql: str) -> None:
        self._gate.check(sql)

    def bound(self, table: TableSpec, hash_key: str, columns: Collection[str] | None = None) -> None:
        """The bounded copy for the columns read is made on the first query reading them (never
        for explain): the data is read-only, so it stays valid for the connection."""
        key = (table.name, copy_scope(table, columns))
        if key not in self._bounded:
            execute.bound_units(self.conn, table, hash_key, key[1])
            self._bounded.add(key)

    def run(self, sql: str, n_keys: int) -> ExactAnswer:
        return execute.run(self.conn, sql, n_keys)

    def close(self) -> None:
        self._gate.close()
        self.conn.close()
