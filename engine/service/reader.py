"""The service's second handle on the ledger, for what needs no data: token checks, budgets,
history, the report and the public schema. It has its own sqlite connection and lock, so none of
them waits behind a query or an explain on the worker thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import NoReturn, TypeVar

from sqlglot import exp

from ..accounting.ledger import Ledger
from ..accounting.ledger_binding import binding_of
from ..database import PrivateDatabase
from ..plan import ExactAnswer
from ..policy import TableSpec

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
