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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from ..errors import DataFailure, InputError, PolicyError, QueryRefused, ResourceLimitExceeded
from ..plan import ExactAnswer
from ..policy import Policy, TableSpec
from ..rewrite import (
    BOUNDED_CATALOG,
    bounded_columns,
    bounded_table_path,
    copies_read,
    copy_of,
    copy_scope,
    readable_tables,
)
from ..sql_types import NUMBER_TYPES, TIME_TYPES, SqlType
from .chain_units import bounded_rows, chain_source, check_chains, with_unit_type
from .duckdb_gate import SchemaGate
from .spark_session import local_session, quiet_pandas_warning
from .spark_sql import to_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A source is a DataFrame, a Parquet file or folder (a Path, or a str ending in .parquet or
# naming an existing path), or the name of a catalog table.
Source = Any

_SETTINGS = {"spark.sql.ansi.enabled": "false", "spark.sql.caseSensitive": "false"}
# Spark type name -> (policy families it can hold, the DuckDB type the gate binds it as).
_TYPES: dict[str, tuple[frozenset[SqlType], str]] = {
    "tinyint": (frozenset(NUMBER_TYPES), "TINYINT"),
    "smallint": (frozenset(NUMBER_TYPES), "SMALLINT"),
    "int": (frozenset(NUMBER_TYPES), "INTEGER"),
    "bigint": (frozenset(NUMBER_TYPES), "BIGINT"),
    "float": (frozenset({SqlType.FLOAT}), "FLOAT"),
    "double": (frozenset({SqlType.FLOAT}), "DOUBLE"),
    "decimal": (frozenset({SqlType.FLOAT}), "DECIMAL"),
    "string": (frozenset({SqlType.STR}), "VARCHAR"),
    "boolean": (frozenset({SqlType.BOOL}), "BOOLEAN"),
    "date": (frozenset(), "DATE"),
    "timestamp": (frozenset(), "TIMESTAMP"),
    "binary": (frozenset(), "BLOB"),
}
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
        self._types: dict[str, dict[str, str]] = {}
        for name, table in policy.tables.items():
            _check_schema(table, frames[name])
            frame = _as_declared(table, frames[name])
            self._types[name] = {f.name.lower(): f.dataType.simpleString() for f in frame.schema.fields}
            frame.createOrReplaceTempView(_view(name))
            self._empty.createDataFrame([], frame.schema).createOrReplaceTempView(_view(name))
        check_chains(policy, self._types.__getitem__, self._repeated)
        for name, table in policy.tables.items():
            self._types[name] = with_unit_type(table, self._types)
            if table.privacy_unit is not None:
                columns = ", ".join(f"`{col}`" for col in bounded_columns(table))
                source = f"({chain_source(policy, table, _located).sql(self.dialect)})" \
                    if table.chain else _view(name)
                self._empty.sql(f"SELECT {columns} FROM {source}").createOrReplaceTempView(
                    _bounded_view(name))
        self._gate = SchemaGate(self._gate_tables())
        self._duckdb: dict[str, str] = {}  # rendered Spark SQL -> the same tree as DuckDB SQL
        self._checked: dict[str, str | None] = {}
        self._bounded: set[str] = set()
        self._cached: list[DataFrame] = []

    @classmethod
    def open(cls, spark: SparkSession | None, source: Source | Mapping[str, Source],
             policy: Policy) -> SparkBackend:
        """Open a DataFrame, a Parquet path or a catalog table (or a mapping of policy table
        names to them) under `policy`; a single source is the policy's only table, or the table
        the Parquet file is named after."""
        with quiet_pandas_warning():
            user = spark if spark is not None else local_session()
            own = _own_session(user)
            frames = {name: _frame(own, user, src, name) for name, src in _sources(source, policy).items()}
            return cls(own, frames, policy)

    def data_columns(self) -> Mapping[str, frozenset[str]]:
        return {name: frozenset(types) for name, types in self._types.items()}

    def render(self, query: exp.Expression) -> str:
        """The tree as Spark SQL over this backend's views, with DuckDB's meaning (see
        spark_sql.py), or QueryRefused for a form Spark cannot give that meaning (decided by the
        text and the schema alone); the DuckDB rendering is kept for `check`."""
        public = sorted({t.name for t in query.find_all(exp.Table) if t.name in self._policy.public_tables})
        if public:
            raise QueryRefused(f"JOIN with public table {public[0]} refused on Spark: public tables "
                               "are not loaded by the Spark backend; run the query on DuckDB")
        private = sorted({self._table_of(t) for t in query.find_all(exp.Table)
                          if self._table_of(t) in self._policy.tables})
        if len(private) > 1:
            raise QueryRefused(f"JOIN of private tables {private[0]} and {private[1]} refused on "
                               "Spark: it is not checked to keep the same rows as DuckDB yet; run "
                               "the query on DuckDB")
        parent = sorted({t.name for t in query.find_all(exp.Table) if t.name in self._policy.parent_tables})
        if parent:
            raise QueryRefused(f"JOIN with parent table {parent[0]} refused on Spark: parent tables "
                               "are not loaded by the Spark backend; run the query on DuckDB")
        self._add_copies(query)
        duckdb_sql = query.sql("duckdb")
        names = [self._table_of(t) for t in query.find_all(exp.Table) if self._table_of(t) in self._types]
        families = {col: _policy_family(kind) for col, kind in self._types[names[0]].items()} \
            if names else {}
        tree = to_spark(query, families)
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
        rendered SQL reads: the same rule as DuckDB's, over the same columns."""
        if table.privacy_unit is None:
            return
        scope = copy_scope(table, columns)
        name = bounded_table_path(table, scope)[2]
        if name in self._bounded:
            return
        unit_is_float = _family(self._types[table.name][table.unit]) in _FLOATS
        sql = bounded_rows(self._policy, table, hash_key, _located, unit_is_float,
                           scope).sql(self.dialect)
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
        """The view a table reference of the rewrite's tree reads (None: not a data table)."""
        if table.catalog == BOUNDED_CATALOG and (table.name in self._types or
                                                 copy_of(self._policy, table.name) is not None):
            return _bounded_view(table.name)
        if not table.catalog and not table.db and table.name in self._types:
            return _view(table.name)
        return None

    def _table_of(self, ref: exp.Table) -> str:
        """The policy table a table reference reads: its own name, or the table whose bounded
        copy of a column set it names."""
        found = copy_of(self._policy, ref.name) if ref.catalog == BOUNDED_CATALOG else None
        return ref.name if found is None else found[0].name

    def _add_copies(self, query: exp.Expression) -> None:
        """Give both gates (the DuckDB one and the empty Spark views) the bounded copy of each
        column set `query` reads that they do not hold yet."""
        types = {name: {col: _duckdb_type(kind) for col, kind in self._types[name].items()}
                 for name in self._policy.tables}
        for path, columns in copies_read(self._policy, query, types).items():
            self._gate.add(path, columns)
            found = copy_of(self._policy, path[2])
            assert found is not None
            table = found[0]
            names = ", ".join(f"`{col}`" for col, _ in columns)
            source = f"({chain_source(self._policy, table, _located).sql(self.dialect)})" \
                if table.chain else _view(table.name)
            self._empty.sql(f"SELECT {names} FROM {source}").createOrReplaceTempView(
                _bounded_view(path[2]))

    def _gate_tables(self) -> dict[tuple[str, ...], list[tuple[str, str]]]:
        """The DuckDB gate's empty tables: each policy table and its bounded copy."""
        return readable_tables(self._policy, {
            name: {col: _duckdb_type(kind) for col, kind in self._types[name].items()}
            for name in self._policy.tables})


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


def _sources(source: Source | Mapping[str, Source], policy: Policy) -> dict[str, Source]:
    """Each policy table's source: a mapping names them; a single source is the policy's only
    table or, for a Parquet path, the table it is named after."""
    if isinstance(source, Mapping):
        missing = sorted(set(policy.tables) - {str(k).lower() for k in source})
        if missing:
            raise InputError(f"no Spark source for policy table(s) {', '.join(missing)} "
                             f"(given: {', '.join(sorted(map(str, source))) or 'none'})")
        return {str(k).lower(): v for k, v in source.items() if str(k).lower() in policy.tables}
    if len(policy.tables) == 1:
        return {next(iter(policy.tables)): source}
    if isinstance(source, (str, Path)) and Path(source).stem.lower() in policy.tables:
        return {Path(source).stem.lower(): source}
    raise InputError(f"the policy has {len(policy.tables)} tables: give the Spark engine a mapping "
                     "of table name to DataFrame, Parquet path or catalog table")


def _frame(own: SparkSession, user: SparkSession, source: Source, name: str) -> DataFrame:
    """The source as a DataFrame of the backend's own session."""
    from pyspark.sql import DataFrame

    if isinstance(source, DataFrame):
        # The rows stay in the JVM: the frame's plan is adopted by the other session.
        jdf = own._jsparkSession.createDataFrame(source._jdf.rdd(), source._jdf.schema())
        return DataFrame(jdf, own)
    text = str(source)
    try:
        if isinstance(source, Path) or text.lower().endswith((".parquet", ".pq")) or Path(text).exists():
            if not Path(text).exists():
                raise InputError(f"data file not found: {text} (expected a Parquet file or folder)")
            return own.read.parquet(text)
        if own.catalog.tableExists(text):
            return own.table(text)
        if user.catalog.tableExists(text):
            return _frame(own, user, user.table(text), name)
    except InputError:
        raise
    except Exception:
        raise InputError(f"cannot read the Spark source of table {name}: {text} (expected a "
                         "DataFrame, a Parquet file or folder, or a catalog table)") from None
    raise InputError(f"no Spark table or Parquet path {text!r} for policy table {name}")


# The Spark type each policy type is read as, whatever the source stores (as on DuckDB,
# engine/backends/duckdb_schema.py DECLARED_TYPES), so a verdict follows the policy, not the file.
_DECLARED = {SqlType.INT: "bigint", SqlType.FLOAT: "double", SqlType.STR: "string",
             SqlType.BOOL: "boolean"}


def _as_declared(table: TableSpec, frame: DataFrame) -> DataFrame:
    """`frame` with each policy column cast to its declared type (a widening of its family)."""
    from pyspark.sql import functions as F

    declared = {col.name: _DECLARED[col.type] for col in table.columns.values() if col.type in _DECLARED}
    return frame.select(*[F.col(f"`{f.name}`").cast(declared[f.name.lower()]).alias(f.name)
                          if f.name.lower() in declared else F.col(f"`{f.name}`")
                          for f in frame.schema.fields])


def _check_schema(table: TableSpec, frame: DataFrame) -> dict[str, str]:
    """Lower-cased column name -> Spark type name, after checking the policy's columns."""
    types = {field.name.lower(): field.dataType.simpleString() for field in frame.schema.fields}
    if table.privacy_unit is not None and not table.chain:  # a chain's: checked by check_chains
        if table.privacy_unit not in types:
            raise PolicyError(f"tables.{table.name}.privacy_unit: no column {table.privacy_unit!r} "
                              "in the data")
        if _family(types[table.privacy_unit]) not in _TYPES:
            raise PolicyError(f"tables.{table.name}.privacy_unit: the data column is "
                              f"{types[table.privacy_unit]}, not one of {', '.join(_TYPES)}")
    for col in table.columns.values():
        path = f"tables.{table.name}.columns.{col.name}"
        if col.link_only and col.name not in types:  # a chain's key: check_chains names it
            continue
        if col.name not in types:
            raise PolicyError(f"{path}: no such column in the data")
        if col.type in TIME_TYPES:
            raise PolicyError(f"{path}.type: {col.type} columns are not supported on the Spark "
                              "engine (its date functions and time zones differ from DuckDB's); "
                              "use the DuckDB engine, or leave the column out of the policy")
        if col.type not in _TYPES.get(_family(types[col.name]), (frozenset(), ""))[0]:
            raise PolicyError(f"{path}.type: the policy says {col.type} but the data column is "
                              f"{types[col.name]}")
    return types


def _policy_family(spark_type: str) -> str:
    """The family spark_sql.py types a column by: int, float, decimal, str, bool or other."""
    family = _family(spark_type)
    if family in ("tinyint", "smallint", "int", "bigint"):
        return SqlType.INT
    if family in ("float", "double"):
        return SqlType.FLOAT
    return {"decimal": "decimal", "string": SqlType.STR, "boolean": SqlType.BOOL}.get(family, "other")


def _family(spark_type: str) -> str:
    """A Spark type's name without its parameters: decimal(10,2) -> decimal."""
    return spark_type.split("(")[0]


def _duckdb_type(spark_type: str) -> str:
    """The DuckDB type the gate binds a Spark column as (a decimal keeps its precision)."""
    family = _family(spark_type)
    if family == "decimal":
        return spark_type.upper()
    return _TYPES.get(family, (frozenset(), "VARCHAR"))[1]


def _plain(value: Any) -> Any:
    """A Spark value as DuckDB returns it: whole DECIMAL sums as int."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value
