"""The plan of a query: typed values that every later step reads.

A plan's expressions are sqlglot trees over the policy's columns (before aggregation) or over
group keys and measurement names (after noise). Binding (engine/sql/bind.py) builds plans and
hardens their expressions into forms DuckDB evaluates without error (engine/sql/harden.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from sqlglot import exp

from .aggregates import Aggregate, Measured, Operand
from .aggregates.per_unit import PerUnit
from .policy import ColumnSpec, LookupTable, ParentTableSpec, TableSpec
from .sql_types import SqlType
from .unnest_rows import Unnested


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


class EdgeKind(StrEnum):
    """How a table of a join tree is joined to its parent in the tree (docs/theory.md §25)."""

    KEY = "key"  # a public table's unique key, or a parent table's key from its child
    CHAIN = "chain"  # a chained table's foreign key = the referenced table's key (up the chain)
    CHILD = "child"  # a referenced table's key = the foreign key of the rows referencing it
    UNIT = "unit"  # two private tables on their common privacy unit


@dataclass(frozen=True)
class JoinEdge:
    """One edge of the join tree: each row of `parent` meets at most `fanout` rows of `child`
    (1 on a key unique in the data or in its bounded copy, the child's bound m otherwise:
    every row it meets is of the parent row's unit)."""

    parent: str  # the tables' names (a query joins each table once)
    child: str
    kind: EdgeKind
    fanout: int


@dataclass(frozen=True)
class JoinedTable:
    """A table joined after the FROM table, in the order written: a public table, a parent
    table (read through its copy of one row per key) or a private table (through its bounded
    copy). Its columns are read as "<table>.<column>" (ColumnSpec names in the plan)."""

    table: LookupTable | TableSpec
    left: bool  # LEFT JOIN keeps the rows before it without a match (its columns NULL)
    on: exp.Expression | None  # its ON over the rows' column names; None: no condition (TRUE)
    label: str = ""  # its alias, when the query joins the table more than once (a public table)

    @property
    def shown(self) -> str:
        """The name its columns are read under in the rows ("<shown>.<column>")."""
        return self.label or self.table.name

    @property
    def parent(self) -> ParentTableSpec | None:
        """The parent table joined, when it is one (its columns are private)."""
        return self.table if isinstance(self.table, ParentTableSpec) else None

    @property
    def private(self) -> TableSpec | None:
        """The private table joined, when it is one (read through its bounded copy)."""
        return self.table if isinstance(self.table, TableSpec) else None


@dataclass(frozen=True)
class JoinTree:
    """The tables a query joins to its FROM table and the tree of equi-joins that bounds its
    rows: every joined row holds one row of `root`, a private table, and at most `fanout` rows
    of each child per row of its parent, and every private row of it is of the root row's unit,
    so a unit has at most m_root times the product of the fanouts of joined rows (§25)."""

    tables: tuple[JoinedTable, ...]
    root: TableSpec
    edges: tuple[JoinEdge, ...]

    @property
    def rows_per_unit(self) -> int:
        return self.root.max_rows_per_unit * math.prod(edge.fanout for edge in self.edges)

    @property
    def bounded(self) -> tuple[TableSpec, ...]:
        """The joined tables read through a bounded copy: each private table's, and each parent
        table's copy of one row per key."""
        copies = []
        for joined in self.tables:
            if joined.private is not None:
                copies.append(joined.private)
            elif joined.parent is not None:
                copies.append(joined.parent.one_per_key())
        return tuple(copies)


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
    join: JoinTree | None = None  # the tables joined to the FROM table, if any
    distinct: bool = False  # SELECT DISTINCT: the released rows de-duplicated (post-processing)
    inner: PerUnit | None = None  # a two-level query's per-unit query, whose rows it reads (§29)
    # The released key rows when they are not every combination of the keys' values: a public
    # table's distinct rows crossed with the other keys' values (§32), in key order, sorted.
    key_rows: tuple[tuple, ...] | None = None
    unnest: Unnested | None = None  # the list column it reads as items, one row per item (§31)

    @property
    def rows_per_unit(self) -> int:
        """The most rows of one unit the aggregates read: the table's bound, the join tree's,
        or a two-level query's rows per unit (§16, §25, §29), times the items a row gives when
        the query unnests a list column (§31)."""
        if self.inner is not None:
            rows = self.inner.rows_per_unit
        else:
            rows = self.table.max_rows_per_unit if self.join is None else self.join.rows_per_unit
        return rows * (self.unnest.max_items if self.unnest is not None else 1)

    @property
    def bounded_tables(self) -> tuple[TableSpec, ...]:
        """Every table the query reads through a bounded copy, made before it runs."""
        return (self.table, *(self.join.bounded if self.join is not None else ()))

    @property
    def group_count(self) -> int:
        if self.key_rows is not None:
            return len(self.key_rows)
        return math.prod(len(col.keys) for col in self.group_by)


@dataclass(frozen=True)
class ExactAnswer:
    """Exact per-group results. Internal: never returned to a caller of the engine."""

    keys: list[tuple]
    values: dict[str, list]
