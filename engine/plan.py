"""The plan of a query: typed values that every later step reads.

A plan's expressions are sqlglot trees over the policy's columns (before aggregation) or over
group keys and measurement names (after noise). Binding (engine/sql/bind.py) builds plans and
hardens their expressions into forms DuckDB evaluates without error (engine/sql/harden.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp

from .aggregates import Aggregate, Measured, Operand
from .policy import ColumnSpec, LookupTable, ParentTableSpec, TableSpec
from .sql_types import SqlType


@dataclass(frozen=True)
class Measurement:
    """One exact aggregate that is released with noise (COUNT, SUM, COUNT(DISTINCT unit), ...)."""

    kind: Measured  # the registered aggregate it measures (engine/aggregates/)
    operand: Operand | None  # what it aggregates; None for COUNT(*) and COUNT(DISTINCT unit)
    name: str  # internal column name in the executed query, e.g. "__m0"

    @property
    def integer(self) -> bool:
        """Whether the exact value is an integer (so the discrete Laplace applies)."""
        return self.kind.integer(self.operand)

    @property
    def label(self) -> str:
        return self.kind.label(self.operand)

    @property
    def row(self) -> str:
        """The bounded rows' column holding its `row_value`, when it has one."""
        return f"{self.name}_row"

    @property
    def cells(self) -> tuple[str, ...]:
        """The columns of its noisy values: its name, or one per cell (`__m0_0`, `__m0_1`, ...)."""
        count = self.kind.cells(self.operand)
        if count == 1 and not self.kind.celled:
            return (self.name,)
        return tuple(f"{self.name}_{i}" for i in range(count))


@dataclass(frozen=True)
class OutputColumn:
    """One column of the answer: its name and how to compute it from noisy values."""

    name: str
    expression: exp.Expression  # over group keys and measurement names
    aggregate: Aggregate | None  # when the column is exactly one aggregate, that aggregate
    measurements: tuple[str, ...]  # names of the measurements it is computed from
    operand: Operand | None = None  # what that aggregate aggregates (AVG's bounds)


@dataclass(frozen=True)
class GroupKey:
    """One GROUP BY key and its public values: a column with a domain (a bool, a column with a
    `domain`, a bounded int column) or an expression whose values follow from the policy (a CASE
    with literal results, FLOOR(col / width) of a bounded int column). Every value in `keys`
    appears in the answer; rows whose key is another value (or NULL) are not counted."""

    name: str  # the key's column in the executed queries: the policy column's, or "__k<i>"
    label: str  # how explanations show it: the column's name or the expression's SQL
    type: SqlType  # bool, int, str, date or timestamp
    keys: tuple  # the public values, in the order answers list them
    value: exp.Expression  # its hardened row-level value, over quoted policy column names
    columns: tuple[ColumnSpec, ...]  # the policy columns it reads


@dataclass(frozen=True)
class KeyJoin:
    """The private table joined on a key to a public table (its key unique in the data) or to
    its parent table (one row kept per key): `ON on = lookup.key`, inner or left. Each private
    row matches at most one row, so no row is duplicated. The joined table's columns are read
    as "<table>.<column>" (ColumnSpec names in the plan)."""

    other: LookupTable
    on: ColumnSpec  # the private table's column equal to the key
    left: bool  # LEFT JOIN keeps private rows without a match (their joined columns NULL)

    @property
    def parent(self) -> ParentTableSpec | None:
        """The parent table joined, when it is one (its columns are private)."""
        return self.other if isinstance(self.other, ParentTableSpec) else None


@dataclass(frozen=True)
class UnitJoin:
    """The private table joined to another private table with the same privacy unit, `ON
    table.unit = other.unit`, inner or left, each read through its bounded copy: a unit's
    joined rows pair its at most m1 rows with its at most m2 rows, so at most m1 · m2 of them,
    and no row of one unit meets another unit's (docs/theory.md §16). The other table's
    columns are read as "<other>.<column>"."""

    other: TableSpec
    left: bool  # LEFT JOIN keeps the rows of a unit without rows in `other` (its columns NULL)

    parent = None  # never a parent table


Join = KeyJoin | UnitJoin


@dataclass(frozen=True)
class QueryPlan:
    """Everything later steps need: the table, filter, groups, noisy measurements, outputs."""

    sql: str
    table: TableSpec
    where: exp.Expression | None
    group_by: tuple[GroupKey, ...]
    measurements: tuple[Measurement, ...]
    outputs: tuple[OutputColumn, ...]
    having: exp.Expression | None
    order: tuple[exp.Ordered, ...]
    limit: int | None
    offset: int | None
    flattened_sql: str = ""  # the one-table SELECT its CTEs/subqueries flatten to (engine/sql/flatten.py)
    join: Join | None = None  # the table joined to the private one, if any

    @property
    def rows_per_unit(self) -> int:
        """The most rows of one unit the aggregates read: the table's bound, times the other's
        when joined to another private table on the unit (§16)."""
        m = self.table.max_rows_per_unit
        return m * self.join.other.max_rows_per_unit if isinstance(self.join, UnitJoin) else m

    @property
    def group_count(self) -> int:
        return math.prod(len(col.keys) for col in self.group_by)


@dataclass(frozen=True)
class ExactAnswer:
    """Exact per-group results. Internal: never returned to a caller of the engine."""

    keys: list[tuple]
    values: dict[str, list]
