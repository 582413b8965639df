"""The Spark backend: the exact aggregates computed by Spark SQL, everything else in the driver.

Only SQL rendered from a validated plan reaches Spark, never the analyst's text (Spark cannot be
locked down like DuckDB: `SET`, `reflect()` and path-qualified tables work in its SQL). The plan's
tree is judged twice before it meets the data: its DuckDB rendering by the gate
(engine/backends/duckdb_gate.py) on empty tables of the data's types (every cast and function
total), and its Spark rendering (with DuckDB's meaning, engine/backends/spark_sql.py) by Spark's
analyser on empty tables of the same schema. The backend works in sessions of its own
(`newSession`: their own temporary views and settings) with ANSI mode off, so division, casts and
overflow give NULL instead of raising, and sums are taken as DECIMAL(38,0) (integers) or DOUBLE, so
they cannot wrap. Only one row per group comes back to the driver.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Collection, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from ..errors import DataFailure, QueryRefused, ResourceLimitExceeded
from ..plan import ExactAnswer
from ..policy import LookupTable, Policy, TableSpec
from ..rewrite import (
    BOUNDED_CATALOG,
    bounded_columns,
    bounded_table_path,
    copies_read,
    copy_of,
    copy_scope,
    readable_tables,
)
from ..sql.public_keys import distinct_rows
from ..sql_types import SqlType
from ..stored_clamps import clamped_columns, companion
from . import spark_tables as tables
from .bounding import with_clamps
from .chain_units import bounded_rows, chain_source, check_chains, repeats, with_unit_type
from .duckdb_gate import SchemaGate
from .spark_session import local_session, quiet_pandas_warning
from .spark_sql import to_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_SETTINGS = {"spark.sql.ansi.enabled": "false", "spark.sql.caseSensitive": "false",
             "spark.sql.session.timeZone": "UTC"}
_FLOATS = {"float", "double", "decimal"}
_REMEMBERED = 1024  # rendered queries kept for `check` (the preparer keeps 256 plans)


class SparkBackend:
    """A Backend over Spark DataFrames, one per policy table, in a session of its own."""

    dialect = "spark"

    def __init__(self, spark: SparkSession, frames: Mapping[str, DataFrame], policy: Policy) -> None:
        """`spark` is a session of the backend's own (see `open`), `frames` belong to it."""
        self._spark = spark
        self._empty = _own_session(spark)  # the same views, empty: where SQL is checked
        self._policy = policy
        self._limits = policy.limits
        self._tag = f"dpsql-{uuid.uuid4().hex}"
        self._types: dict[str, dict[str, str]] = {}  # private tables' columns and Spark types
        self._lookups: dict[str, dict[str, str]] = {}  # public and parent tables'
        for name, table in policy.tables.items():
            tables.check_private(table, frames[name])
            self._types[name] = self._load(name, tables.as_declared(table.columns, frames[name]))
        lookups: dict[str, LookupTable] = {**policy.public_tables, **policy.parent_tables}
        for name, lookup in lookups.items():
            tables.check_columns(name, lookup.columns, frames[name])
            self._lookups[name] = self._load(name, tables.as_declared(lookup.columns, frames[name]))
        check_chains(policy, self._types.__getitem__, self._repeated)
        for public in policy.public_tables.values():
            refusal = tables.unique_key_refusal(public, self._repeated(repeats(public.name, public.key)))
            if refusal is not None:
                raise refusal
        for name, table in policy.tables.items():
            self._types[name] = with_unit_type(table, self._types)
            self._empty_copy(name, table, None)
        for name, parent in policy.parent_tables.items():
            self._empty_copy(name, parent.one_per_key(), None)
        self._gate = SchemaGate(self._gate_tables())
        self._duckdb: dict[str, str] = {}  # rendered Spark SQL -> the same tree as DuckDB SQL
        self._checked: dict[str, str | None] = {}
        self._bounded: set[str] = set()
        self._cached: list[DataFrame] = []
        self._public_rows: dict[tuple[str, tuple[str, ...], int], tuple[tuple, ...]] = {}

    @classmethod
    def open(cls, spark: SparkSession | None, source: tables.Source | Mapping[str, tables.Source],
             policy: Policy) -> SparkBackend:
        """Open a DataFrame, a Parquet or CSV path or a catalog table (or a mapping of policy
        table names to them, or a folder holding a file named after each table) under `policy`;
        a single source is the policy's only table."""
        with quiet_pandas_warning():
            user = spark if spark is not None else local_session()
            own = _own_session(user)
            frames = {name: tables.frame(own, user, src, name)
                      for name, src in tables.sources(source, policy).items()}
            for name, public in policy.public_tables.items():
                if public.data is not None:
                    frames[name] = tables.public_file(own, public)
            return cls(own, frames, policy)

    def public_rows(self, table: str, columns: tuple[str, ...], limit: int) -> tuple[tuple, ...]:
        """A public table's distinct rows of `columns` (no NULL), at most `limit + 1`, read once
        per backend (docs/theory.md §32)."""
        key = (table, columns, limit)
        if key not in self._public_rows:
            if table not in self._policy.public_tables:
                raise ValueError(f"{table} is not a public table")
            query = distinct_rows(table, columns, limit)
            for ref in query.find_all(exp.Table):
                ref.replace(_located(ref.name))
            found = self._guarded(lambda: self._spark.sql(query.sql(self.dialect)).collect(),
                                  f"reading the rows of the public table {table} failed")
            self._public_rows[key] = tuple(tuple(_plain(v) for v in row) for row in found)
        return self._public_rows[key]

    def data_columns(self) -> Mapping[str, frozenset[str]]:
        return {name: frozenset(types) for name, types in self._types.items()}

    def render(self, query: exp.Expression) -> str:
        """The tree as Spark SQL over this backend's views, with DuckDB's meaning (see
        spark_sql.py), or QueryRefused for a form Spark cannot give that meaning (decided by the
        text and the schema alone); the DuckDB rendering is kept for `check`."""
        self._add_copies(query)
        duckdb_sql = query.sql("duckdb")
        tree = to_spark(query, self._families(query))
        for table in list(tree.find_all(exp.Table)):
            view = self._view_of(table)
            if view is not None:
                table.replace(exp.Table(this=exp.to_identifier(view), alias=table.args.get("alias")))
        sql = tree.sql(self.dialect)
        if len(self._duckdb) >= _REMEMBERED:  # oldest first, like the preparer's plan cache
            oldest = next(iter(self._duckdb))
            del self._duckdb[oldest]
            self._checked.pop(oldest, None)
        self._duckdb[sql] = duckdb_sql
        return sql

    def check(self, sql: str) -> None:
        """Refuse unless the DuckDB gate accepts the same tree and Spark binds this SQL on
        empty tables; neither reads data."""
        duckdb_sql = self._duckdb.get(sql)
        if duckdb_sql is None:
            raise QueryRefused("only SQL this backend rendered from a checked plan may run on Spark")
        self._gate.check(duckdb_sql)
        if sql not in self._checked:
            self._checked[sql] = self._judge(sql)
        refusal = self._checked[sql]
        if refusal is not None:
            raise QueryRefused(refusal)

    def bound(self, table: TableSpec, hash_key: str, columns: Collection[str] | None = None) -> None:
        """Make the bounded rows of `table` for queries reading `columns` (None: every column)
        once (kept in Spark's memory, spilling to disk) and register them as the view the
        rendered SQL reads: the same rule as DuckDB's, over the same columns. A table without
        a privacy unit keeps every row: its copy is a view that clamps as it is read."""
        scope = copy_scope(table, columns)
        name = bounded_table_path(table, scope)[2]
        if name in self._bounded:
            return
        types = self._types.get(table.name) or self._lookups[table.name]  # a parent's own
        unit_is_float = table.privacy_unit is not None and tables.family(types[table.unit]) in _FLOATS
        sql = with_clamps(bounded_rows(self._policy, table, hash_key, _located, unit_is_float, scope),
                          table, scope).sql(self.dialect)
        if table.privacy_unit is None:
            self._spark.sql(sql).createOrReplaceTempView(_bounded_view(name))
            self._bounded.add(name)
            return
        from pyspark import StorageLevel

        def make() -> Any:
            frame = self._spark.sql(sql).persist(StorageLevel.MEMORY_AND_DISK)
            self._cached.append(frame)
            frame.count()
            return frame

        frame = self._guarded(make, "bounding rows per privacy unit failed on the data")
        frame.createOrReplaceTempView(_bounded_view(name))
        self._bounded.add(name)

    def run(self, sql: str, n_keys: int) -> ExactAnswer:
        """Run checked SQL; only its rows (one per group) come back to the driver."""
        frame = self._spark.sql(sql)
        names = frame.columns
        rows = self._guarded(frame.collect, "the query failed while running on the data")
        keys = [tuple(row[:n_keys]) for row in rows]
        values = {name: [_plain(row[i]) for row in rows] for i, name in enumerate(names) if i >= n_keys}
        return ExactAnswer(keys, values)

    def close(self) -> None:
        for frame in self._cached:
            frame.unpersist()
        self._gate.close()

    def _guarded(self, action: Any, failure: str) -> Any:
        """Run a Spark action under the policy's time limit: cancelled past it
        (ResourceLimitExceeded), DataFailure if it fails otherwise (its message is withheld)."""
        context = self._spark.sparkContext
        fired = threading.Event()

        def fire() -> None:
            fired.set()
            context.cancelJobGroup(self._tag)
            self._spark.interruptTag(self._tag)

        # Job groups and tags are per thread (PySpark pins each Python thread to a JVM thread).
        context.setJobGroup(self._tag, "dpsql exact aggregates", interruptOnCancel=True)
        self._spark.addTag(self._tag)
        timer = threading.Timer(self._limits.time_seconds, fire)
        timer.daemon = True
        timer.start()
        try:
            return action()
        except Exception:
            if fired.is_set():
                raise ResourceLimitExceeded(
                    f"query cancelled: it ran longer than the time limit of "
                    f"{self._limits.time_seconds:g} s (limits.time_seconds in the policy); nothing "
                    "was charged", "limits.time_seconds", self._limits.time_seconds) from None
            raise DataFailure(failure) from None
        finally:
            timer.cancel()
            self._spark.removeTag(self._tag)
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def _repeated(self, count: exp.Select) -> int:
        """Run a count of repeated key values (engine/backends/chain_units.py) on the data."""
        for table in count.find_all(exp.Table):
            table.replace(_located(table.name))
        return int(self._guarded(lambda: self._spark.sql(count.sql(self.dialect)).collect()[0][0],
                                 "checking the chain's keys failed on the data"))

    def _judge(self, sql: str) -> str | None:
        """Bind `sql` on the empty views (PySpark analyses a statement when it is given):
        a function of the text and the schema."""
        try:
            self._empty.sql(sql)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or ["error"])[0]
            return f"the query cannot be run on Spark: {first}"
        return None

    def _view_of(self, table: exp.Table) -> str | None:
        """The view a table reference of the rewrite's tree reads (None: not a data table): a
        bounded copy (of a private table, or a parent's one row per key), or a table itself."""
        if table.catalog == BOUNDED_CATALOG and (table.name in self._types or
                                                 table.name in self._policy.parent_tables or
                                                 copy_of(self._policy, table.name) is not None):
            return _bounded_view(table.name)
        if not table.catalog and not table.db and (table.name in self._types or
                                                   table.name in self._policy.public_tables):
            return _view(table.name)
        return None

    def _table_of(self, ref: exp.Table) -> str:
        """The policy table a table reference reads: its own name, or the table whose bounded
        copy of a column set it names."""
        found = copy_of(self._policy, ref.name) if ref.catalog == BOUNDED_CATALOG else None
        return ref.name if found is None else found[0].name

    def _families(self, query: exp.Expression) -> dict[str, str]:
        """The type family (spark_sql.py) of each column name the tree's rows may hold: every
        column of each table it reads, and a joined table's as "<table>.<column>" too (a name
        two tables hold with two families is "other": its casts are judged as unknown)."""
        families: dict[str, str] = {}
        for ref in query.find_all(exp.Table):
            if self._view_of(ref) is None:
                continue
            name = self._table_of(ref)
            types = self._types.get(name) or self._lookups[name]
            stored = {companion(c.name): types[c.name] for c in clamped_columns(self._policy.tables[name])} \
                if ref.catalog == BOUNDED_CATALOG and name in self._policy.tables else {}
            for col, kind in {**types, **stored}.items():
                family = _policy_family(kind)
                for key in (col, f"{name}.{col}"):
                    families[key] = family if families.get(key, family) == family else "other"
        return families

    def _load(self, name: str, frame: DataFrame) -> dict[str, str]:
        """Register `frame` as table `name`'s view, and an empty one of its schema where SQL is
        checked; its columns' Spark types."""
        frame.createOrReplaceTempView(_view(name))
        self._empty.createDataFrame([], frame.schema).createOrReplaceTempView(_view(name))
        return tables.spark_types(frame)

    def _empty_copy(self, name: str, table: TableSpec, scope: frozenset[str] | None) -> None:
        """The empty view of `table`'s bounded copy for the column set `scope` (None: every
        column) named `name`, stored clamped values included (a chained table's over its rows
        with their derived unit), where SQL is checked."""
        source = chain_source(self._policy, table, _located).subquery("t") if table.chain \
            else _located(table.name)
        rows = exp.select(*(exp.column(col, quoted=True) for col in bounded_columns(table, scope))) \
            .from_(source)
        self._empty.sql(with_clamps(rows, table, scope).sql(self.dialect)) \
            .createOrReplaceTempView(_bounded_view(name))

    def _add_copies(self, query: exp.Expression) -> None:
        """Give both gates (the DuckDB one and the empty Spark views) the bounded copy of each
        column set `query` reads that they do not hold yet."""
        types = {name: {col: tables.duckdb_type(kind) for col, kind in self._types[name].items()}
                 for name in self._policy.tables}
        for path, columns in copies_read(self._policy, query, types).items():
            self._gate.add(path, columns)
            found = copy_of(self._policy, path[2])
            assert found is not None
            self._empty_copy(path[2], *found)

    def _gate_tables(self) -> dict[tuple[str, ...], list[tuple[str, str]]]:
        """The DuckDB gate's empty tables: each policy table and its bounded copy, each public
        table and each parent table's copy of one row per key."""
        return readable_tables(self._policy, {
            name: {col: tables.duckdb_type(kind) for col, kind in types.items()}
            for name, types in {**self._types, **self._lookups}.items()})


def _own_session(spark: SparkSession) -> SparkSession:
    """A session sharing `spark`'s context but with its own views and settings, ANSI off.
    PySpark logs every failed statement with its stack; the refusals this backend makes of
    SQL bound on empty tables are its own answer, so that logger is quieted."""
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    session = spark.newSession()
    for key, value in _SETTINGS.items():
        session.conf.set(key, value)
    return session


def _located(name: str) -> exp.Table:
    """A policy table's view as a table reference."""
    return exp.Table(this=exp.to_identifier(_view(name)))


def _view(name: str) -> str:
    """The temporary view of a policy table in the backend's own sessions."""
    return f"dpsql_{name}"


def _bounded_view(name: str) -> str:
    """The view of a bounded copy: of every column, after the table; of a column set (named
    `table["a","b"]`), after the table and a digest of the name."""
    table, bracket, _ = name.partition("[")
    if not bracket:
        return f"dpsql_bounded_{name}"
    return f"dpsql_bounded_{table}_{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def _policy_family(spark_type: str) -> str:
    """The family spark_sql.py types a column by: int, float, decimal, str, bool, date,
    timestamp or other."""
    family = tables.family(spark_type)
    if family in ("tinyint", "smallint", "int", "bigint"):
        return SqlType.INT
    if family in ("float", "double"):
        return SqlType.FLOAT
    return {"decimal": "decimal", "string": SqlType.STR, "boolean": SqlType.BOOL, "date": SqlType.DATE,
            "timestamp_ntz": SqlType.TIMESTAMP}.get(family, "other")


def _plain(value: Any) -> Any:
    """A Spark value as DuckDB returns it: whole DECIMAL sums as int."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value
