"""The service's handles on the ledger for what needs no data. The reader: token checks, budgets,
history, the report and the public schema, on its own sqlite connection and lock, so none of them
waits behind a query or an explain. The planner: explains, on a database with the data's schema
(its own schema-only gate) but not its data, so that no explain waits behind a query."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import NoReturn, TypeVar

from sqlglot import exp

from ..accounting.ledger import Ledger
from ..accounting.ledger_binding import binding_of
from ..backends import duckdb_schema
from ..backends.duckdb import DuckDBBackend
from ..database import PrivateDatabase
from ..plan import ExactAnswer
from ..policy import Policy, TableSpec
from ..rewrite import copies_read

T = TypeVar("T")


class NoData:
    """A backend without data: the reader's database can read the ledger, never the data."""

    def data_columns(self) -> Mapping[str, frozenset[str]]:
        self._refuse()

    def public_rows(self, table: str, columns: tuple[str, ...], limit: int) -> tuple[tuple, ...]:
        self._refuse()

    def render(self, query: exp.Expression) -> str:
        self._refuse()

    def check(self, sql: str) -> None:
        self._refuse()

    def bound(self, table: TableSpec, hash_key: str, columns: Collection[str] | None = None) -> None:
        self._refuse()

    def run(self, sql: str, n_keys: int) -> ExactAnswer:
        self._refuse()

    def close(self) -> None:
        pass

    @staticmethod
    def _refuse() -> NoReturn:
        raise RuntimeError("the service's ledger reader holds no data")


class SchemaOnly(NoData):
    """The data's schema without its data: the column names, and SQL rendered and bound on a
    schema-only gate of its own (made from the DuckDB connection's schema, as the backend's
    own gate is), so that an explain planned here says what it says on the worker."""

    def __init__(self, backend: DuckDBBackend, policy: Policy) -> None:
        self._policy = policy
        self._columns = duckdb_schema.data_columns(backend.conn, policy)
        self._types = duckdb_schema.column_types(backend.conn, policy)
        self._gate = duckdb_schema.schema_gate(backend.conn, policy)

    def data_columns(self) -> Mapping[str, frozenset[str]]:
        return self._columns

    def render(self, query: exp.Expression) -> str:
        """As DuckDBBackend.render: the bounded copy of each column set read joins the gate."""
        for path, columns in copies_read(self._policy, query, self._types).items():
            self._gate.add(path, columns)
        return query.sql(DuckDBBackend.dialect)

    def check(self, sql: str) -> None:
        self._gate.check(sql)

    def close(self) -> None:
        self._gate.close()


def planner(database: PrivateDatabase) -> PrivateDatabase | None:
    """A database for explains beside the worker's: its policy, ledger file and reuse setting,
    the data's schema and no data (None for a backend other than DuckDB, whose explains stay
    on the worker). Made on the worker's thread, which owns the data connection."""
    backend = database._backend
    if not isinstance(backend, DuckDBBackend):
        return None
    ledger = Ledger(database.ledger.path, binding_of(database.policy))
    return PrivateDatabase(SchemaOnly(backend, database.policy), database.policy, ledger,
                           reuse=database.reuse)


class Reader:
    """A PrivateDatabase over the worker's policy and ledger file but without data, used by one
    request thread at a time: its budget and cap figures are computed as the worker's are."""

    def __init__(self, database: PrivateDatabase) -> None:
        ledger = Ledger(database.ledger.path, binding_of(database.policy))
        self._database = PrivateDatabase(NoData(), database.policy, ledger)
        self._lock = threading.Lock()

    def read(self, work: Callable[[PrivateDatabase], T]) -> T:
        """Run `work` on the data-less database under the reader's lock."""
        with self._lock:
            return work(self._database)

    def close(self) -> None:
        with self._lock:
            self._database.close()
