"""Bounded copies prepared once by the data owner and kept beside the ledger.

Bounding a large table (each privacy unit keeps at most `max_rows_per_unit` rows, chosen by the
keyed hash of engine/backends/bounding.py over the columns a query reads) is the slowest step
of a first query, and every new process repeated it. `prepare` writes, for each table with a
privacy unit, the kept rows of the column sets `prepared_scopes` names (every column, none as
COUNT(*) reads, and each set of its columns the policy's eta_by_columns declares: the sets the
owner expects queries to read; any other set is bounded in memory when a query first reads
it) to a DuckDB file each in `<ledger>.bounded/`, named by a fingerprint of everything they
depend on: the data file as it is (resolved path, size, modification time in nanoseconds, inode, device), the
table's bounding fields in the policy (for a table whose unit is reached through foreign keys,
its chain), the data's column types, the column set, the bounds of the columns whose clamped
values the copy stores (engine/stored_clamps.py) and how they are computed, the ledger's
secret hash key, the bounding rule and the DuckDB version. A connection attaches a file only when its name
matches, so after a change to any of them the engine bounds in memory again, as before, until
the owner prepares anew: a stale copy is never used. The files hold private rows and are as
private as the data (mode 0600 in a 0700 directory).

A table without a privacy unit keeps every row, so it needs no bounding; but its copy stores
each bounded numeric column's clamped value (docs/theory.md §34), which queries otherwise
compute on every row. `prepare` writes that copy (every row, the policy's columns and their
clamped values) too, under the same fingerprint, for each such table with a bounded numeric
column; without it a query reads a view that clamps as it reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
from sqlglot import exp

from ..errors import InputError
from ..policy import Policy, TableSpec
from ..rewrite import copy_scope
from ..stored_clamps import CLAMP_RULE, clamped_columns
from .bounding import RULE_VERSION, with_clamps
from .chain_units import bounded_rows, with_unit_type
from .duckdb_schema import DECLARED_TYPES

FLOAT_TYPES = ("FLOAT", "DOUBLE", "REAL", "DECIMAL")
COPY_CATALOG = "dpsql_copy_"  # prefix of the catalog a prepared copy is attached as


@dataclass(frozen=True)
class PreparedCopy:
    """One table's bounded copy as `prepare` wrote it."""

    table: str
    path: Path
    rows: int  # rows kept
    bytes: int  # size of the file on disk
    seconds: float


def store_dir(ledger: str | Path) -> Path:
    """Where the bounded copies of a ledger live: a directory beside it."""
    ledger = Path(ledger)
    return ledger.with_name(ledger.name + ".bounded")


def prepared_scopes(policy: Policy, table: TableSpec) -> tuple[frozenset[str] | None, ...]:
    """The column sets of `table` whose bounded copies `prepare` writes: every column (None),
    none (what COUNT(*) reads), then each set of its own columns that the policy's
    eta_by_columns declares."""
    scopes: list[frozenset[str] | None] = list(dict.fromkeys([None, copy_scope(table, ())]))
    prefix = table.name + "."
    for declaration in policy.eta_by_columns:
        own = [c[len(prefix):] for c in declaration.columns if c.startswith(prefix)]
        scope = copy_scope(table, own) if len(own) == len(declaration.columns) else None
        if scope is not None and scope not in scopes:
            scopes.append(scope)
    return tuple(scopes)


def worth_preparing(table: TableSpec) -> bool:
    """Whether `prepare` writes copies of `table`: a table with a privacy unit (its bounded
    rows), or one without that has bounded numeric columns (every row, with their stored
    clamped values: the one thing such a copy saves a query)."""
    return table.privacy_unit is not None or bool(clamped_columns(table))


def unit_is_float(table: TableSpec, types: dict[str, str]) -> bool:
    """Whether the data stores `table`'s privacy unit as a floating or decimal number (False
    for a table without one)."""
    return table.privacy_unit is not None and \
        types.get(table.unit, "").split("(")[0].upper() in FLOAT_TYPES


def copy_path(store: Path, data: Path, table: TableSpec, hash_key: str,
              types: dict[str, str], scope: frozenset[str] | None = None) -> Path:
    """The file a bounded copy of `table` for the column set `scope` (None: every column) has
    under these inputs (it may not exist)."""
    stat = data.stat()
    facts = {
        "data": str(data.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
        "inode": stat.st_ino, "device": stat.st_dev, "table": table.name, "unit": table.privacy_unit,
        "max_rows_per_unit": table.max_rows_per_unit,
        "columns": sorted([name, col.type, types.get(name, "")] for name, col in table.columns.items()),
        "unit_type": types.get(table.privacy_unit or "", ""), "hash_key": hash_key, "rule": RULE_VERSION,
        "chain": [[link.column, link.table, link.key] for link in table.chain],
        "read_columns": None if scope is None else sorted(scope),
        "clamped": [[col.name, col.type, col.lower, col.upper] for col in clamped_columns(table, scope)],
        "clamp_rule": CLAMP_RULE,
        "duckdb": duckdb.__version__,
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]
    return store / f"{table.name}-{digest}.duckdb"


def prepare_table(data: Path, policy: Policy, table: TableSpec, hash_key: str, store: Path,
                  loader: str | None, scope: frozenset[str] | None = None) -> PreparedCopy:
    """Write `table`'s bounded copy for the column set `scope` (None: every column) to its
    fingerprinted file. `loader` is the table function
    that loads a CSV or Parquet file as the engine does (None for a DuckDB file, attached
    read-only); the data's types are read the way a connection reads them (a chained table's
    unit typed as the column it is derived from, its rows joined up its chain in the data).

    The copy is written under a temporary name and renamed into place, so a reader sees a
    whole file or none (`remove_stale` then removes the table's copies under older
    fingerprints)."""
    started = time.perf_counter()
    store.mkdir(mode=0o700, exist_ok=True)
    os.chmod(store, 0o700)
    temporary = store / f".{table.name}.{secrets.token_hex(6)}.writing"
    try:
        with duckdb.connect(str(temporary)) as writer:
            os.chmod(temporary, 0o600)
            if loader is None:
                writer.execute(f"ATTACH {_literal(str(data))} AS src (READ_ONLY)")
            else:
                writer.execute("ATTACH ':memory:' AS src")
                writer.execute(f"CREATE TABLE src.main.{_quoted(table.name)} AS SELECT * FROM {loader}",
                               [str(data)])
            types = with_unit_type(table, {name: dict(writer.execute(
                "SELECT lower(column_name), data_type FROM information_schema.columns "
                "WHERE table_catalog = 'src' AND table_schema = 'main' AND lower(table_name) = ?",
                [name]).fetchall()) for name in {table.name, *(link.table for link in table.chain)}})
            final = copy_path(store, data, table, hash_key, types, scope)
            rows = with_clamps(bounded_rows(policy, table, hash_key, _source, unit_is_float(table, types),
                                            scope), table, scope, DECLARED_TYPES)
            writer.execute(f"CREATE TABLE main.{_quoted(table.name)} AS {rows.sql('duckdb')}")
            count = writer.execute(f"SELECT count(*) FROM main.{_quoted(table.name)}").fetchall()[0][0]
            writer.execute("DETACH src")
            writer.execute("CHECKPOINT")
        os.replace(temporary, final)
    finally:
        temporary.unlink(missing_ok=True)
        Path(f"{temporary}.wal").unlink(missing_ok=True)
    return PreparedCopy(table.name, final, int(count), final.stat().st_size,
                        time.perf_counter() - started)


def _source(name: str) -> exp.Table:
    """A policy table of the data `prepare_table` attaches as `src`."""
    return exp.to_table(f"src.main.{_quoted(name)}", dialect="duckdb")


def remove_stale(store: Path, table: TableSpec, current: list[Path]) -> None:
    """Remove the copies of `table` under older fingerprints (those not in `current`)."""
    for stale in store.glob(f"{table.name}-*.duckdb"):
        if stale not in current:
            stale.unlink(missing_ok=True)


def attach_copy(conn: duckdb.DuckDBPyConnection, path: Path, table: TableSpec,
                number: int = 0) -> str | None:
    """Attach a prepared copy read-only (before the connection is locked down) as the catalog
    of `table`'s `number`-th prepared column set; that catalog, or None if the file cannot be
    attached (the engine then bounds in memory)."""
    catalog = f"{COPY_CATALOG}{table.name}_{number}"
    try:
        conn.execute(f"ATTACH {_literal(str(path))} AS {_quoted(catalog)} (READ_ONLY)")
    except duckdb.Error:
        return None
    return catalog


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def check_store(store: Path) -> None:
    """Refuse a store path that exists but is not a directory."""
    if store.exists() and not store.is_dir():
        raise InputError(f"{store} exists and is not a directory; the bounded copies of a ledger "
                         "live in a directory beside it")
