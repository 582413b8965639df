"""The Backend seam: PrivateDatabase reaches the data only through a Backend, so a second
backend is one class; and through it, nothing but checked SQL ever meets the data."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import binding_of
from dpsql.engine.backends import Backend, ExactAnswer
from dpsql.engine.backends.duckdb import DuckDBBackend
from dpsql.engine.policy import TableSpec
from dpsql.engine.policy_yaml import load_policy
from sqlglot import exp

from tests.support import charge_count


class RecordingBackend:
    """A backend of its own (delegating the work to DuckDB) that records what it is asked."""

    def __init__(self, inner: DuckDBBackend) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def data_columns(self) -> Mapping[str, frozenset[str]]:
        return self.inner.data_columns()

    def public_rows(self, table: str, columns: tuple[str, ...], limit: int) -> tuple[tuple, ...]:
        self.calls.append(f"public rows {table}")
        return self.inner.public_rows(table, columns, limit)

    def render(self, query: exp.Expression) -> str:
        self.calls.append("render")
        return self.inner.render(query)

    def check(self, sql: str) -> None:
        self.calls.append("check")
        self.inner.check(sql)

    def bound(self, table: TableSpec, hash_key: str, columns: Collection[str] | None = None) -> None:
        self.calls.append(f"bound {table.name}")
        self.inner.bound(table, hash_key, columns)

    def run(self, sql: str, n_keys: int) -> ExactAnswer:
        self.calls.append("run")
        return self.inner.run(sql, n_keys)

    def close(self) -> None:
        self.calls.append("close")
        self.inner.close()


def _open(setup) -> tuple[PrivateDatabase, RecordingBackend]:
    policy = load_policy(setup.policy)
    backend = RecordingBackend(DuckDBBackend.open(setup.db, policy))
    typed: Backend = backend  # the protocol is all the database needs
    return PrivateDatabase(typed, policy, Ledger(setup.ledger, binding_of(policy))), backend


def test_a_query_is_rendered_and_checked_before_the_data_is_touched(setup):
    db, backend = _open(setup)
    with db:
        result = db.query("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=1.0)
    assert backend.calls == ["render", "check", "bound people", "run", "close"]
    assert len(result.df) == 4 and charge_count(setup.ledger) == 1


def test_explain_and_refusals_never_reach_the_data(setup):
    db, backend = _open(setup)
    with db:
        db.explain("SELECT SUM(age) FROM people", epsilon=1.0)
        with pytest.raises(QueryRefused):
            db.explain("SELECT COUNT(*) FROM people WHERE EXP(age) > 1", epsilon=1.0)
        with pytest.raises(QueryRefused):
            db.query("SELECT COUNT(*) FROM people WHERE EXP(age) > 1", epsilon=1.0)
    assert not any(call == "run" or call.startswith("bound") for call in backend.calls)
    assert charge_count(setup.ledger) == 0


@pytest.mark.parametrize("condition", ["age IN (0 / 0 + age)", "income IN (0 / 0 + income, 1)"])
def test_a_constant_that_is_not_a_number_is_refused_in_one_line(setup, condition):
    """DuckDB's serialized plan writes such a constant as NAN, which is not JSON: the gate used
    to crash on it; it refuses the query instead, from the query text alone."""
    db, backend = _open(setup)
    with db, pytest.raises(QueryRefused, match="not a number") as info:
        db.query(f"SELECT COUNT(*) FROM people WHERE {condition}", epsilon=1.0)
    assert "\n" not in str(info.value) and charge_count(setup.ledger) == 0
    assert "run" not in backend.calls
