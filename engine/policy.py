"""The data owner's policy as typed values: tables, columns, limits, eta by column set and the
declared models (engine/policy_yaml.py reads and validates the YAML file into them)."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..calibration.declared import DeclaredModel
from .errors import PolicyError
from .sql_types import NUMBER_TYPES, SqlType

# The types a policy may declare a column as (every SqlType but NULL, an expression's only).
COLUMN_TYPES = tuple(t for t in SqlType if t is not SqlType.NULL)
# Dates and timestamps a policy, a literal or a value read may hold: Python's and every DuckDB
# date function's common range (values outside are read as NULL, see `ColumnSpec.period`).
FIRST_DAY = dt.datetime(1, 1, 1)
LAST_MOMENT = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)


class Ranged:
    """A value with a type and optional public bounds (a policy column, an aggregate's operand)."""

    name: str
    type: SqlType
    lower: float | None
    upper: float | None

    @property
    def numeric(self) -> bool:
        return self.type in NUMBER_TYPES

    @property
    def bounded(self) -> bool:
        return self.lower is not None and self.upper is not None

    @property
    def bounds(self) -> tuple[float, float]:
        """(lower, upper), the public range values are clamped to; only when bounded."""
        if self.lower is None or self.upper is None:
            raise ValueError(f"{self.name} has no lower/upper bounds")
        return self.lower, self.upper


@dataclass(frozen=True)
class ItemList:
    """A text column that holds a list (`list: {separator, max_items, domain}` in the policy):
    UNNEST(string_split(col, separator)) reads at most the first `max_items` items of each row,
    whose public values are `domain` (None: the items are no group key), docs/theory.md §31."""

    separator: str
    max_items: int
    domain: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ColumnSpec(Ranged):
    """One column the analyst may reference, with its public bounds or domain."""

    name: str
    type: SqlType
    lower: float | None = None
    upper: float | None = None
    domain: tuple | None = None
    span: tuple[dt.datetime, dt.datetime] | None = None  # a date/timestamp column's bounds
    # A chain's key the owner did not list under `columns`: it may appear only in a join along
    # the chain and in COUNT(DISTINCT ...) (engine/policy_chain.py, docs/theory.md §30).
    link_only: bool = False
    item_list: ItemList | None = None  # a str column holding a list of items (§31)

    @property
    def period(self) -> tuple[dt.datetime, dt.datetime]:
        """The range a date or timestamp column's values are read in: its declared bounds, or
        every supported date; values outside are read as NULL (engine/sql/scope.py, `_guarded`)."""
        if self.span is not None:
            return self.span
        return FIRST_DAY, (LAST_MOMENT if self.type == SqlType.TIMESTAMP else dt.datetime(9999, 12, 31))

    @property
    def keys(self) -> tuple:
        """The public values of a column that may be grouped on (see `group_values`)."""
        if self.group_values is None:
            raise ValueError(f"column {self.name} has no public domain")
        return self.group_values

    @property
    def group_values(self) -> tuple | None:
        """The public values this column may be grouped on, or None if it is not a key."""
        if self.type == SqlType.BOOL:
            return (False, True)
        return self.domain


@dataclass(frozen=True)
class UnitLink:
    """One foreign key of a chain: `column` of a private table references `table`.`key`, the
    privacy unit of a table that holds it, or a key of another chained table, unique in the
    data (checked when the data is opened). Neither column need be a policy column."""

    column: str  # the referencing table's column (`o_custkey`)
    table: str  # the referenced private table (`customer`)
    key: str  # its referenced column (`c_custkey`)

    def describe(self) -> str:
        return f"{self.column} -> {self.table}.{self.key}"


@dataclass(frozen=True)
class TableSpec:
    """A private table: its privacy unit, contribution bound and referenceable columns.

    A table whose unit is reached through foreign keys (`privacy_unit: {through: ...,
    references: ...}`) has `chain`, the links from its own column up to the table holding the
    unit (docs/theory.md §24); its `privacy_unit` is then that table's unit column, which its
    bounded copy carries, derived through the chain (engine/backends/chain_units.py)."""

    name: str
    privacy_unit: str | None
    max_rows_per_unit: int
    columns: Mapping[str, ColumnSpec]
    dependence_group: str | None = None  # column naming each unit's dependence group (owner tools)
    chain: tuple[UnitLink, ...] = ()  # the foreign keys its rows reach their unit through
    # Whether a query reads the bounded copy of the columns it reads (docs/theory.md §28) rather
    # than of every column: only when an eta_by_columns declaration or a declared model names one
    # of its columns, since otherwise every column set has the same eta and the copy of every
    # column (the one `dpsql prepare` writes) calibrates every query the same.
    scoped: bool = True

    @property
    def unit(self) -> str:
        """The privacy unit column (of its bounded copy, for a chained table); only for tables
        whose rows are not each an individual."""
        if self.privacy_unit is None:
            raise ValueError(f"table {self.name} has no privacy unit")
        return self.privacy_unit

    @property
    def through(self) -> UnitLink | None:
        """The table's own foreign key toward its unit, or None when it holds its unit."""
        return self.chain[0] if self.chain else None


@dataclass(frozen=True)
class PublicTableSpec:
    """A table the owner vouches is public (a region lookup): never charged, never protected.
    A private table may join it on `key`, which the data must hold unique (checked when the
    data is opened), so each private row matches at most one of its rows."""

    name: str
    key: str
    columns: Mapping[str, ColumnSpec]
    # The CSV or Parquet file holding its rows, loaded when the data is opened; None: a table
    # of the private data's DuckDB file.
    data: Path | None = None


@dataclass(frozen=True)
class ParentTableSpec:
    """A private table of records shared by several individuals (a household's address), which
    one private table, the `child`, references by `foreign_key` = `key`. It is only read joined
    from its child, one row kept per key (docs/theory.md §16), so each child row matches at
    most one of its rows whatever the data holds; its columns are shared by everyone who
    references a row, so their eta is 1 unless eta_by_columns declares a smaller one."""

    name: str
    key: str
    columns: Mapping[str, ColumnSpec]
    child: str  # the private table whose rows reference it
    foreign_key: str  # the child's column holding this table's key

    def qualified(self) -> frozenset[str]:
        """Its columns as `table.column`: the columns whose eta defaults to 1."""
        return frozenset(f"{self.name}.{name}" for name in self.columns)

    def one_per_key(self) -> TableSpec:
        """The table as bounding sees it: the key as its unit, one row kept per unit (by the
        keyed hash of engine/backends/bounding.py), so each key joins at most one row."""
        return TableSpec(self.name, self.key, 1,
                         {name: col for name, col in self.columns.items() if name != self.key})


LookupTable = PublicTableSpec | ParentTableSpec
"""A table a private table may join on its key: each private row matches at most one row."""


@dataclass(frozen=True)
class Limits:
    """The owner's bounds on one query's cost, so no query can run unboundedly long or large."""

    max_noisy_values: int = 100_000  # groups x noisy aggregates, checked before the data is read
    time_seconds: float = 30.0  # wall-clock limit of each statement run on the data
    memory_mb: int = 4096  # DuckDB's memory limit for the data connection (nothing spills to disk)
    quantile_bins: int = 64  # equal bins of an operand's [lower, upper] that quantiles are read from
    max_sql_chars: int = 20_000  # characters of one query's SQL text, checked before it is parsed
    max_noisy_columns: int = 1024  # noisy values per group (bins count one each), before SQL is built
    plan_seconds: float = 30.0  # wall-clock limit on planning one query (explain included)


@dataclass(frozen=True)
class EtaDeclaration:
    """The owner's eta for one set of columns (qualified `table.column` names): the TV bound on
    how much one individual's record moves the law of the others' records projected onto them."""

    columns: frozenset[str]
    eta: float

    def describe(self) -> str:
        return "{" + ", ".join(sorted(self.columns)) + "}"


@dataclass(frozen=True)
class ScopedEta:
    """The eta that applies to a set of columns read, and the declaration it comes from."""

    eta: float
    declaration: EtaDeclaration | None  # None: the default eta (every column set)
    shared: bool = False  # the default is 1: the columns include a parent table's

    @property
    def source(self) -> str:
        """Where the eta comes from, in words a reader of an answer or a report can check."""
        if self.declaration is None and self.shared:
            return "1: a parent table's columns, shared by everyone who references a row"
        if self.declaration is None:
            return "dependence.eta (the default for every column set)"
        return f"dependence.eta_by_columns {self.declaration.describe()}"


@dataclass(frozen=True)
class Policy:
    """The whole policy: budget, dependence model, tables (names lower-cased) and limits."""

    budget_epsilon: float
    k: int
    eta: float  # the default: eta of every column set not declared in eta_by_columns
    mode: str
    tables: Mapping[str, TableSpec]
    limits: Limits = Limits()
    eta_by_columns: tuple[EtaDeclaration, ...] = ()
    models: tuple[DeclaredModel, ...] = ()  # dependence.models: declared models of columns
    prefer_model: bool = False  # dependence.mode is `model`: queries a model covers use it
    public_tables: Mapping[str, PublicTableSpec] = field(default_factory=dict)
    parent_tables: Mapping[str, ParentTableSpec] = field(default_factory=dict)
    schema: str | None = None  # a schema name queries may qualify tables with (`PUMS.PUMS`), lower-cased

    def referenced_keys(self, name: str) -> frozenset[str]:
        """The columns of private table `name` that other tables' chains reference as a key
        unique in the data (not its privacy unit): checked unique when the data is opened."""
        if not self.tables[name].chain:
            return frozenset()
        return frozenset(other.through.key for other in self.tables.values()
                         if other.through is not None and other.through.table == name)

    @property
    def shared_columns(self) -> frozenset[str]:
        """Every parent table's columns (`table.column`): their eta defaults to 1, not eta."""
        return frozenset().union(*(p.qualified() for p in self.parent_tables.values()))

    def eta_for(self, columns: frozenset[str] | None) -> ScopedEta:
        """The eta of a query or transcript that reads `columns` (None: every column)."""
        return scoped_eta(self.eta, self.eta_by_columns, columns, self.shared_columns)


def scoped_eta(default: float, declarations: tuple[EtaDeclaration, ...],
               columns: frozenset[str] | None, shared: frozenset[str] = frozenset()) -> ScopedEta:
    """The smallest declared eta among the column sets containing `columns`, else the default,
    which is 1 when `columns` include a `shared` column (a parent table's; None: every column).

    Sound because an answer that reads only the columns S depends on the others' records only
    through their projection onto S (and their presence), and projection cannot increase total
    variation, so eta_S <= eta_S' for S a subset of S' (docs/theory.md, column-scoped eta)."""
    if shared and (columns is None or columns & shared):
        best = ScopedEta(1.0, None, shared=True)
    else:
        best = ScopedEta(default, None)
    if columns is None:
        return best
    for declaration in declarations:
        if columns <= declaration.columns and declaration.eta < best.eta:
            best = ScopedEta(declaration.eta, declaration)
    return best


def declarations_json(declarations: tuple[EtaDeclaration, ...]) -> str:
    """A canonical JSON text of eta_by_columns (the ledger's binding records it)."""
    items = sorted([sorted(d.columns), d.eta] for d in declarations)
    return json.dumps(items) if items else ""


def declarations_from_json(text: str) -> tuple[EtaDeclaration, ...]:
    """Read `declarations_json` back (ValueError, KeyError or TypeError if it is not one)."""
    if not text:
        return ()
    return tuple(EtaDeclaration(frozenset(str(c) for c in columns), float(eta))
                 for columns, eta in json.loads(text))


def shared_json(columns: frozenset[str]) -> str:
    """A canonical JSON text of the parent tables' columns ("" for none; the ledger records it)."""
    return json.dumps(sorted(columns)) if columns else ""


def shared_from_json(text: str) -> frozenset[str]:
    """Read `shared_json` back (ValueError or TypeError if it is not one)."""
    if not text:
        return frozenset()
    items = json.loads(text)
    if not isinstance(items, list) or not all(isinstance(c, str) for c in items):
        raise ValueError(f"not a list of column names: {text!r}")
    return frozenset(items)


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?")


def parse_time(value: Any, ctype: SqlType, path: str) -> dt.datetime:
    """A date ('YYYY-MM-DD') or timestamp ('YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]', no time zone)
    as a naive datetime (a date at midnight), or a PolicyError naming `path` and the format."""
    want = "an ISO date 'YYYY-MM-DD'" if ctype == SqlType.DATE else \
        "an ISO timestamp 'YYYY-MM-DD HH:MM:SS' without a time zone"
    if isinstance(value, dt.datetime):  # YAML reads an unquoted timestamp as a datetime
        if value.tzinfo is not None or ctype == SqlType.DATE:
            raise PolicyError(f"{path}: expected {want}, got {value!r}")
        return value
    if isinstance(value, dt.date):  # YAML reads an unquoted date as a date
        return dt.datetime(value.year, value.month, value.day)
    pattern = _ISO_DATE if ctype == SqlType.DATE else _ISO_TIMESTAMP
    if not isinstance(value, str) or pattern.fullmatch(value.strip()) is None:
        raise PolicyError(f"{path}: expected {want}, got {value!r}")
    try:
        return dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise PolicyError(f"{path}: {value!r} is not a valid date or time (expected {want})") from None
