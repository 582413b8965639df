"""Open the private data in DuckDB, locked down, and run rewritten queries on it.

The data is opened read-only (a CSV or Parquet file is loaded into memory first), then
external access is switched off, the policy's time and memory limits set and the
configuration locked, so no query can read or write files, load extensions, change settings
or run unboundedly long or large. Exact results stay inside this process.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from .. import progress
from ..errors import DataFailure, InputError, PolicyError, ResourceLimitExceeded
from ..plan import ExactAnswer
from ..policy import Limits, Policy, TableSpec
from ..rewrite import BOUNDED_CATALOG, bounded_table, copy_scope
from ..watchdog import WATCHDOG
from . import bounded_store
from .bounding import kept_rows, own_rows, with_clamps
from .chain_units import bounded_rows, link_columns, unit_column
from .duckdb_catalog import Catalog, catalog_of, keep, read_catalog
from .duckdb_schema import (
    DECLARED_TYPES,
    FLOAT_TYPES,
    check_schema,
    duckdb_identifier,
    read_as_declared,
)

_LOCKED = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "error_on_division_by_zero": False,
}


@dataclass
class _Guard:
    """The limits a connection from `open_data` runs under, and whether its timer fired."""

    limits: Limits
    timed_out: bool = False
    # (table, column set; None: every column) -> catalog of its prepared copy
    copies: dict[tuple[str, frozenset[str] | None], str] = field(default_factory=dict)
    policy: Policy | None = None  # the policy the data was opened under (chained units)


_GUARDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_POLICIES: list[tuple] = []  # each distinct bounding (`_bounding`) a file was opened under
_POLICIES_LOCK = threading.Lock()
_OPENED_UNDER = f"{BOUNDED_CATALOG}.main.__opened_under"


def _bounding(policy: Policy) -> tuple:
    """What a policy's bounded copies are made of: each private table's unit, bound, chain and
    columns with their types, bounds and lists (a table without a unit too: its copy stores
    clamped values), and its parent tables (not the dependence settings, which calibrate the
    noise but make no copy)."""
    tables = tuple(sorted(
        (name, table.privacy_unit, table.max_rows_per_unit, table.chain,
         tuple(sorted((c.name, c.type, c.lower, c.upper, c.domain, c.span, c.item_list)
                      for c in table.columns.values())))
        for name, table in policy.tables.items()))
    return tables, tuple(sorted(policy.parent_tables.items()))


def _share_instance(conn: duckdb.DuckDBPyConnection, path: Path, policy: Policy) -> None:
    """Refuse a second connection to a data file this process has open under a policy whose
    bounded copies differ.

    DuckDB keeps one instance of a file per process (a second ATTACH of it is refused too), and
    the bounded copies live in that instance's catalog: connections under two policies would
    replace each other's copies, and a query would read rows bounded by the other policy's
    bound. The instance records which bounding it is open under (it forgets with its last
    connection); policies that differ only in their dependence settings (a tightened `eta` or
    model) make the same copies, up to which rows the ledger's hash key keeps, all within the
    one bound. Depends on this process's open connections only, never on the data."""
    bounding = _bounding(policy)
    with _POLICIES_LOCK:
        index = next((i for i, known in enumerate(_POLICIES) if known == bounding), None)
        if index is None:
            _POLICIES.append(bounding)
            index = len(_POLICIES) - 1
        conn.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {BOUNDED_CATALOG} (COMPRESS, READ_WRITE)")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {_OPENED_UNDER} (policy INTEGER)")
        found = {row[0] for row in conn.execute(f"SELECT DISTINCT policy FROM {_OPENED_UNDER}")
                 .fetchall()}
        if found - {index}:
            conn.close()
            raise InputError(
                f"data file {path} is already open in this process under a policy with other "
                "bounds (privacy units, rows per unit or column bounds): DuckDB shares one "
                "instance of a file within a process, so the two policies' bounded copies would "
                "replace each other; close the other connection to it first, or open a copy of "
                "the file", path=str(path))
        if index not in found:  # under the lock: no other connection of this process between
            conn.execute(f"INSERT INTO {_OPENED_UNDER} VALUES (?)", [index])


def open_data(path: str | Path, policy: Policy, store: Path | None = None,
              hash_key: str | None = None) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB, CSV or Parquet file locked down, and check it against the policy.

    The memory limit is set first, so that data loaded into memory counts against it, and
    nothing spills to disk (no temporary directory): a statement that needs more memory fails.
    The time limit is enforced by `time_limit` around each run. Bounded copies the owner
    prepared in `store` for this data, policy and `hash_key` are attached read-only before the
    connection is locked (engine/backends/bounded_store.py); nothing of the data is read for that."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data file not found: {path} (expected a DuckDB, CSV or Parquet file)")
    suffix = path.suffix.lower()
    limits = policy.limits
    config = _config(limits)
    try:
        if suffix in _LOADED:
            conn = duckdb.connect(":memory:", config=config)
            table = duckdb_identifier(path.stem.lower())
            conn.execute("SET enable_progress_bar = true")  # tracked for the bar, never printed
            conn.execute("SET enable_progress_bar_print = false")
            with progress.step(f"loading {path.name}", _probe(conn)):
                conn.execute(f"CREATE TABLE {table} AS SELECT * FROM {_reader(path, policy)}",
                             [str(path)])
        else:
            conn = duckdb.connect(str(path), read_only=True, config=config)
            _share_instance(conn, path, policy)
        _load_public(conn, policy)
        catalog = read_catalog(conn)  # the data's schema, for the rest of the connection's life
        copies = {} if store is None or hash_key is None else \
            _attach_copies(conn, catalog, path, policy, store, hash_key)
        _lock_down(conn)
    except duckdb.OutOfMemoryException:
        raise ResourceLimitExceeded(
            f"cannot open data file {path}: loading it needs more memory than the policy's "
            f"limits.memory_mb ({limits.memory_mb} MB)", "limits.memory_mb", limits.memory_mb
        ) from None
    except duckdb.Error as exc:
        if suffix in _LOADED:
            # DuckDB's message can quote a value or the line it sits on: never shown.
            raise InputError(
                f"cannot load data file {path}: DuckDB could not read it with the policy's column "
                "types (its message is withheld because it can quote the data); load the file "
                "into a DuckDB database with declared types to see why") from None
        first = str(exc).splitlines()[0]
        raise InputError(f"cannot open data file {path}: {first}") from None
    _GUARDS[conn] = _Guard(limits, copies=copies, policy=policy)
    _check(conn, policy, catalog)
    return conn


def _check(conn: duckdb.DuckDBPyConnection, policy: Policy, catalog: Catalog) -> None:
    """Check the opened data against the policy and read it as declared; what `conn` then reads
    is kept as its catalog (engine/backends/duckdb_catalog.py)."""
    check_schema(conn, policy, catalog)
    keep(conn, read_as_declared(conn, policy, catalog))


def _config(limits: Limits) -> dict[str, str | bool | int | float | list[str]]:
    """Every locked setting but external access (some apply per connection); DuckDB refuses to
    set temp_directory once external access is off, so that is switched off after loading."""
    return {"memory_limit": f"{limits.memory_mb}MB", "temp_directory": "",
            **{key: value for key, value in _LOCKED.items() if key != "enable_external_access"}}


def open_frames(frames: Mapping[str, Any], policy: Policy) -> duckdb.DuckDBPyConnection:
    """Copy tables the caller holds in memory (pandas or Polars DataFrames, Arrow tables, DuckDB
    relations), by policy table name, into a new locked-down in-memory DuckDB and check them as
    `open_data` checks a file. The copy is the engine's own: nothing the caller holds can reach
    it through dpsql, and changing the caller's frame afterwards changes no answer."""
    conn = duckdb.connect(":memory:", config=_config(policy.limits))
    try:
        for name, frame in frames.items():
            conn.register("dpsql_source", _scannable(frame, name))
            with progress.step(f"copying {name}", _probe(conn)):
                conn.execute(f"CREATE TABLE {duckdb_identifier(name)} AS SELECT * FROM dpsql_source")
            conn.unregister("dpsql_source")
        _load_public(conn, policy)
        _lock_down(conn)
    except duckdb.OutOfMemoryException:
        conn.close()
        raise ResourceLimitExceeded(
            "cannot copy the data: it needs more memory than the policy's limits.memory_mb "
            f"({policy.limits.memory_mb} MB)", "limits.memory_mb", policy.limits.memory_mb) from None
    except duckdb.Error:
        conn.close()
        raise InputError("cannot copy the data into the engine's own database (DuckDB's message "
                         "is withheld because it can quote the data)") from None
    except BaseException:
        conn.close()
        raise
    _GUARDS[conn] = _Guard(policy.limits, policy=policy)
    _check(conn, policy, read_catalog(conn))
    return conn


_FRAME_MODULES = ("pandas", "polars", "pyarrow")


def _scannable(frame: Any, name: str) -> Any:
    """What DuckDB scans for `frame`: the frame itself, or a relation's rows as an Arrow table
    (read on its own connection, which the engine's cannot see)."""
    if isinstance(frame, duckdb.DuckDBPyRelation):
        try:
            return frame.to_arrow_table()
        except (ImportError, ModuleNotFoundError):
            raise InputError(f"copying the DuckDB relation given for table {name} needs pyarrow "
                             "(pip install pyarrow)") from None
    if type(frame).__module__.split(".")[0] == "pyspark":
        raise InputError(f"table {name}: a Spark DataFrame is computed on Spark; pass "
                         "engine='spark' (the DuckDB engine copies pandas, Polars, Arrow and DuckDB "
                         "tables)")
    if type(frame).__module__.split(".")[0] not in _FRAME_MODULES:
        raise InputError(f"table {name}: expected a DuckDB, CSV or Parquet file path, a pandas or "
                         f"Polars DataFrame, an Arrow table or a DuckDB relation, got "
                         f"{type(frame).__name__}")
    return frame


_LOADED = (".csv", ".tsv", ".parquet", ".pq")  # files loaded into memory, not opened


def _reader(path: Path, policy: Policy) -> str:
    """The table function that loads a CSV or Parquet file. A CSV's policy columns are read as
    the policy's types, not as types DuckDB infers from the values, so the schema the gate
    binds against does not depend on the data."""
    if path.suffix.lower() in (".parquet", ".pq"):
        return "read_parquet(?)"
    table = policy.tables.get(path.stem.lower())
    if table is None or not table.columns:
        return "read_csv_auto(?)"
    types = ", ".join(f"{_sql_string(col.name)}: {_sql_string(DECLARED_TYPES[col.type])}"
                      for col in table.columns.values())
    return f"read_csv_auto(?, types = {{{types}}})"


def _load_public(conn: duckdb.DuckDBPyConnection, policy: Policy) -> None:
    """Load each public table whose rows live in their own CSV or Parquet file (`data:` in the
    policy) as a temporary table beside the private data, a CSV read with the declared column
    types. The file is public, so DuckDB's message about it is shown."""
    files = [(public, public.data) for public in policy.public_tables.values()
             if public.data is not None]
    if not files:  # nothing to load: the catalog is not read
        return
    held = {name for (name,) in conn.execute(
        "SELECT lower(table_name) FROM information_schema.tables").fetchall()}
    for public, data in files:
        where = f"tables.{public.name}.data"
        if public.name in held:
            raise PolicyError(f"{where}: the data already holds a table {public.name}; remove "
                              "data: from the policy or the table from the data")
        if not data.is_file():
            raise PolicyError(f"{where}: file not found: {data}")
        if data.suffix.lower() in (".parquet", ".pq"):  # cast to the declared types
            reader = "(SELECT * REPLACE (" + ", ".join(
                f"CAST({duckdb_identifier(c.name)} AS {DECLARED_TYPES[c.type]}) AS "
                f"{duckdb_identifier(c.name)}" for c in public.columns.values()) + ") FROM read_parquet(?))"
        else:
            types = ", ".join(f"{_sql_string(col.name)}: {_sql_string(DECLARED_TYPES[col.type])}"
                              for col in public.columns.values())
            reader = f"read_csv_auto(?, types = {{{types}}})"
        try:
            # Read on a connection of its own: DuckDB shares one instance per file in a process,
            # so `conn` may already have external access switched off by an earlier open, and
            # a temporary table is the connection's own, so each connection loads the file.
            with duckdb.connect() as side:
                rows = side.sql(f"SELECT * FROM {reader}", params=[str(data)])
                body = ", ".join(f"{duckdb_identifier(name)} {kind}"
                                 for name, kind in zip(rows.columns, rows.types, strict=True))
                frame = rows.df()
            table = duckdb_identifier(public.name)
            conn.execute(f"CREATE TEMP TABLE {table} ({body})")
            conn.register("dpsql_public_rows", frame)
            try:
                conn.execute(f"INSERT INTO {table} SELECT * FROM dpsql_public_rows")
            finally:
                conn.unregister("dpsql_public_rows")
        except duckdb.Error as exc:
            raise PolicyError(f"{where}: cannot load {data}: "
                              f"{str(exc).splitlines()[0]}") from None


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _lock_down(conn: duckdb.DuckDBPyConnection) -> None:
    """Switch external access off and lock the configuration. DuckDB shares one instance per
    file in a process (and refuses a second connection with other settings), so a connection
    may find it already locked by an earlier `open_data`: then it is only checked."""
    if conn.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:
        names = ", ".join(f"current_setting('{key}')" for key in _LOCKED)
        if list(conn.execute(f"SELECT {names}").fetchall()[0]) != list(_LOCKED.values()):
            raise InputError("the data file is already open in this process with other settings")
        return
    # Progress is tracked, never printed, so that a terminal can show a bar (engine/progress.py).
    conn.execute("SET enable_progress_bar = true")
    conn.execute("SET enable_progress_bar_print = false")
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")


@contextmanager
def time_limit(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Interrupt what `conn` runs inside the block once the policy's time limit has passed.

    The process's watchdog thread calls `conn.interrupt()`, which stops a running statement
    within milliseconds (DuckDB's own `max_execution_time` was measured to let statements run
    on long past it). The lock keeps it from interrupting once the block is left."""
    guard = _GUARDS.get(conn)
    if guard is None:
        yield
        return
    lock = threading.Lock()
    inside = True

    def fire() -> None:
        with lock:
            if inside:
                guard.timed_out = True
                conn.interrupt()

    guard.timed_out = False
    token = WATCHDOG.arm(guard.limits.time_seconds, fire)
    try:
        yield
    finally:
        with lock:
            inside = False
        WATCHDOG.disarm(token)


def _probe(conn: duckdb.DuckDBPyConnection) -> Callable[[], float | None]:
    """How far the statement `conn` runs is, from DuckDB's own progress (None when unknown)."""
    def fraction() -> float | None:
        percent = conn.query_progress()
        return None if percent < 0 else min(percent, 100.0) / 100.0
    return fraction


def cancellation(conn: duckdb.DuckDBPyConnection,
                 exc: duckdb.Error) -> ResourceLimitExceeded | None:
    """The error to raise when `exc` is DuckDB cancelling a statement at the connection's time
    or memory limit, else None. Its message names the limit, never anything from the data."""
    guard = _GUARDS.get(conn)
    if guard is None:
        return None
    limits = guard.limits
    if isinstance(exc, duckdb.InterruptException) and guard.timed_out:
        return ResourceLimitExceeded(
            f"query cancelled: it ran longer than the time limit of {limits.time_seconds:g} s "
            "(limits.time_seconds in the policy); nothing was charged",
            "limits.time_seconds", limits.time_seconds)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return ResourceLimitExceeded(
            f"query cancelled: it needed more than the memory limit of {limits.memory_mb} MB "
            "(limits.memory_mb in the policy); nothing was charged",
            "limits.memory_mb", limits.memory_mb)
    return None


def run(conn: duckdb.DuckDBPyConnection, sql: str, n_keys: int) -> ExactAnswer:
    """Run the rewritten query; the first `n_keys` columns are group keys."""
    try:
        with time_limit(conn), progress.step("running the query", _probe(conn)):
            cursor = conn.execute(sql)
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
    except duckdb.Error as exc:
        cancelled = cancellation(conn, exc)
        if cancelled is not None:
            raise cancelled from None
        raise DataFailure("the query failed while running on the data") from None
    keys = [tuple(row[:n_keys]) for row in rows]
    values = {name: [row[i] for row in rows] for i, name in enumerate(names) if i >= n_keys}
    return ExactAnswer(keys, values)


def bound_units(conn: duckdb.DuckDBPyConnection, table: TableSpec, hash_key: str,
                columns: Collection[str] | None = None) -> None:
    """Make the bounded copy of `table` that queries reading `columns` (None: every column)
    then read: each unit's kept rows by the rule over those columns, holding only them.

    The copy is made whether or not any unit is over the bound, so that nothing observable
    says whether one is. It goes into an in-memory catalog that DuckDB compresses on
    checkpoint, so it costs less memory than the rows it holds and scans as fast as the table
    itself. A table without a privacy unit keeps every row: its copy is a view of its policy
    columns and their clamped values, or of the owner's prepared copy holding them (§34).
    Backends call this once per (table, column set) and connection."""
    scope = copy_scope(table, columns)
    try:
        conn.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {BOUNDED_CATALOG} (COMPRESS, READ_WRITE)")
        guard = _GUARDS.get(conn)
        copy = None if guard is None else guard.copies.get((table.name, scope))
        if copy is not None:  # prepared by the owner for exactly this data, policy and ledger
            declared = ", ".join(f"CAST({duckdb_identifier(c.name)} AS {DECLARED_TYPES[c.type]}) AS "
                                 f"{duckdb_identifier(c.name)}" for c in table.columns.values()
                                 if scope is None or c.name in scope)
            replaced = f" REPLACE ({declared})" if declared else ""
            conn.execute(f"CREATE OR REPLACE VIEW {bounded_table(table, scope).sql('duckdb')} AS "
                         f"SELECT *{replaced} FROM "
                         f"{exp.table_(table.name, 'main', copy, quoted=True).sql('duckdb')}")
            return
        if table.privacy_unit is None:
            source = exp.table_(table.name, "main", catalog_of(conn).holder(table.name), quoted=True)
            rows = own_rows(table, source)
            conn.execute(f"CREATE OR REPLACE VIEW {bounded_table(table).sql('duckdb')} AS "
                         f"{with_clamps(rows, table).sql('duckdb')}")
            return
        policy = None if guard is None else guard.policy
        unit_type = _unit_type(catalog_of(conn), table).split("(")[0].upper()
        with progress.step(f"bounding rows per {table.unit} in {table.name}", _probe(conn)):
            conn.execute(bounded_copy_sql(table, hash_key, unit_type in FLOAT_TYPES, scope, policy))
            conn.execute(f"CHECKPOINT {BOUNDED_CATALOG}")
    except duckdb.Error as exc:
        cancelled = cancellation(conn, exc)
        if cancelled is not None:
            raise cancelled from None
        raise DataFailure("bounding rows per privacy unit failed on the data") from None


def _unit_type(schema: Catalog, table: TableSpec) -> str:
    """The data type of `table`'s unit in the data's `schema`: its column's, or for a chained
    table the type of the column it is derived from (engine/backends/chain_units.py)."""
    if not table.chain:
        return schema.columns(table.name)[table.unit]
    holder, column = unit_column(table)
    return schema.columns(holder)[column]


def _attach_copies(conn: duckdb.DuckDBPyConnection, schema: Catalog, path: Path, policy: Policy,
                   store: Path, hash_key: str) -> dict[tuple[str, frozenset[str] | None], str]:
    """Attach each prepared copy (of a table with a privacy unit, for one column set) whose
    fingerprint matches (only file facts and the data's `schema` are read); (table, set) ->
    catalog."""
    copies = {}
    for name, table in policy.tables.items():
        if not bounded_store.worth_preparing(table):
            continue
        try:
            types = schema.columns(name) if table.privacy_unit is None else \
                {**schema.columns(name), table.unit: _unit_type(schema, table)}
        except KeyError:  # a table or unit column missing: the schema check names it next
            continue
        for number, scope in enumerate(bounded_store.prepared_scopes(policy, table)):
            copy = bounded_store.copy_path(store, path, table, hash_key, types, scope)
            catalog = bounded_store.attach_copy(conn, copy, table, number) if copy.is_file() else None
            if catalog is not None:
                copies[(name, scope)] = catalog
    return copies


def prepare_copies(path: str | Path, policy: Policy, hash_key: str,
                   store: Path) -> tuple[bounded_store.PreparedCopy, ...]:
    """The owner's act: write the bounded copies of every table with a privacy unit (of every
    column and of each column set its eta_by_columns names) and the copy of every row with the
    stored clamped values of each table without one that has bounded numeric columns, for
    later connections to this data under this policy and ledger (engine/backends/bounded_store.py)."""
    path = Path(path)
    open_data(path, policy).close()  # the data is readable and matches the policy
    bounded_store.check_store(store)
    loader = _reader(path, policy) if path.suffix.lower() in _LOADED else None
    copies = []
    for table in policy.tables.values():
        if not bounded_store.worth_preparing(table) or \
                (loader is not None and table.name != path.stem.lower()):
            continue
        written = []
        for scope in bounded_store.prepared_scopes(policy, table):
            what = "every column" if scope is None else ", ".join(sorted(scope)) or "no column"
            with progress.step(f"preparing the bounded copy of {table.name} for {what}"):
                try:
                    copy = bounded_store.prepare_table(path, policy, table, hash_key, store,
                                                       loader, scope)
                except duckdb.Error:
                    raise DataFailure(f"preparing the bounded copy of {table.name} failed") from None
            copies.append(copy)
            written.append(copy.path)
        bounded_store.remove_stale(store, table, written)
    return tuple(copies)


_COPY_SQL: dict[tuple, str] = {}  # rendered bounding statements, by everything they depend on
_COPY_SQL_KEPT = 256


def bounded_copy_sql(table: TableSpec, hash_key: str, unit_is_float: bool,
                     columns: Collection[str] | None = None, policy: Policy | None = None) -> str:
    """The DuckDB statement that makes the bounded copy of `table` for queries reading
    `columns` (None: every column; engine/backends/bounding.py), a chained table's over its
    rows with their derived unit (the `policy` it is read under), with the stored clamped
    values (engine/stored_clamps.py). Rendering the rule costs more
    than running it on a small table, so each statement is rendered once per process."""
    if table.chain and policy is None:
        raise ValueError(f"table {table.name}'s unit is reached through its chain: bound it "
                         "with its policy")
    scope = copy_scope(table, columns)
    key = (table.name, table.unit, table.max_rows_per_unit,
           tuple(sorted((name, col.type, col.lower, col.upper) for name, col in table.columns.items())),
           hash_key, unit_is_float, None if scope is None else tuple(sorted(scope)), table.chain,
           tuple(link_columns(policy, table)) if policy is not None and table.chain else ())
    sql = _COPY_SQL.get(key)
    if sql is None:
        rows = kept_rows(table, hash_key, exp.to_table(table.name, quoted=True), unit_is_float, scope) \
            if policy is None else bounded_rows(policy, table, hash_key,
                                                lambda name: exp.to_table(name, quoted=True),
                                                unit_is_float, scope)
        sql = (f"CREATE OR REPLACE TABLE {bounded_table(table, scope).sql('duckdb')} AS "
               f"{with_clamps(rows, table, scope).sql('duckdb')}")
        if len(_COPY_SQL) >= _COPY_SQL_KEPT:
            _COPY_SQL.pop(next(iter(_COPY_SQL)))
        _COPY_SQL[key] = sql
    return sql
