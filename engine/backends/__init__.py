"""Where the exact aggregates are computed: the Backend protocol and what it returns.

A backend holds the private data. It checks the data against the policy when it opens, makes
the bounded rows (at most max_rows_per_unit per privacy unit), renders the rewrite's sqlglot
trees in its dialect, bind-checks the rendered SQL without reading data, and runs it within the
policy's limits. Noise, the ledger and post-processing stay in the engine: a backend returns exact
values to the engine and nothing else. DuckDB implements it (engine/backends/duckdb.py), and
Spark (engine/backends/spark.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from sqlglot import exp

from ..errors import DataFailure
from ..plan import ExactAnswer
from ..policy import TableSpec

__all__ = ["Backend", "DataFailure", "ExactAnswer"]


class Backend(Protocol):
    """The private data and the one place SQL built from a query meets it."""

    def data_columns(self) -> Mapping[str, frozenset[str]]:
        """Each policy table's column names in the data (schema, never values), so a refusal
        can say a column exists but is not in the policy."""
        ...

    def public_rows(self, table: str, columns: tuple[str, ...], limit: int) -> tuple[tuple, ...]:
        """The distinct rows of `columns` of the public `table` holding no NULL, at most
        `limit + 1` (engine/sql/public_keys.py `distinct_rows`), read once per connection: a
        key set given by a public table's rows (docs/theory.md §32). Public data only."""
        ...

    def render(self, query: exp.Expression) -> str:
        """The rewrite's tree as SQL of this backend's dialect, with the meaning it has on
        DuckDB (QueryRefused for a form the dialect cannot express with that meaning; decided
        by the text and the schema alone)."""
        ...

    def check(self, sql: str) -> None:
        """Raise QueryRefused unless `sql` binds and can fail on no data value; reads no data."""
        ...

    def bound(self, table: TableSpec, hash_key: str, columns: Collection[str] | None = None) -> None:
        """Make the bounded rows of `table` that checked SQL reading its policy columns
        `columns` (None: every column) reads, kept by the rule over those columns (once per
        set; DataFailure if that fails on the data)."""
        ...

    def run(self, sql: str, n_keys: int) -> ExactAnswer:
        """Run checked SQL; its first `n_keys` columns are group keys (DataFailure if it fails
        on the data, ResourceLimitExceeded at the policy's limits)."""
        ...

    def close(self) -> None:
        ...
