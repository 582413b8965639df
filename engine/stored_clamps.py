"""Clamped values stored in the bounded copies: each bounded numeric column's value clamped to its
policy bounds is computed once, when the copy is made, and aggregates of a bare column read it
instead of evaluating the clamp on every row of every query (docs/theory.md §34).

The stored value is the very CASE a query would evaluate (engine/aggregates/sum.py `clamped`),
so every exact answer is the same, NULL, NaN and infinities included. Which columns have one
and which aggregates read it follow from the policy and the query text alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from sqlglot import exp

from .aggregates.base import Operand
from .aggregates.count import Count
from .aggregates.per_unit import Inner, PerUnit
from .aggregates.sum import Stored, Sum, clamped
from .aggregates.variance import SumOfSquares
from .plan import QueryPlan
from .policy import ColumnSpec, TableSpec
from .sql_types import SqlType

CLAMP_RULE = "stored-clamp-1"
"""Names how the stored values are computed, in the fingerprint of prepared copies."""
PREFIX = "__clamped_"
# Kinds whose SQL reads their operand only as its clamped value, or only whether it is NULL
# (the clamped value is NULL exactly when the value is): these may read the stored one.
_READERS = (Sum, SumOfSquares, Count)
# A per-unit query's aggregates that read their operand only that way (not COUNT(DISTINCT)).
_INNER = frozenset({Inner.COUNT, Inner.SUM, Inner.AVG, Inner.MIN, Inner.MAX})


def companion(name: str) -> str:
    """The copy's column holding column `name`'s clamped value."""
    return PREFIX + name


def clamped_columns(table: TableSpec, scope: Collection[str] | None = None) -> tuple[ColumnSpec, ...]:
    """The columns of `table`'s bounded copy for the column set `scope` (None: every column)
    whose clamped value the copy stores: each int or float policy column with bounds, in name
    order, unless its companion's name is another column's (then it has none)."""
    names = sorted(table.columns if scope is None else scope)
    taken = {*table.columns, table.privacy_unit}
    return tuple(col for col in (table.columns[name] for name in names)
                 if col.type in (SqlType.INT, SqlType.FLOAT) and col.bounded and not col.link_only
                 and col.name != table.privacy_unit and companion(col.name) not in taken)


def clamp_of(column: ColumnSpec, value: exp.Expression) -> exp.Expr:
    """The stored clamped value of `column` over its row value `value`: the CASE an aggregate of
    the bare column evaluates."""
    return clamped(Operand(column.name, column.type, value, (column,), column.lower, column.upper))


def companion_types(table: TableSpec, types: Mapping[str, str],
                    scope: Collection[str] | None = None) -> list[tuple[str, str]]:
    """(companion, data type) of each stored clamped value of the copy, typed as its column
    (a BIGINT column's clamp to integer bounds is a BIGINT, a DOUBLE's a DOUBLE)."""
    return [(companion(col.name), types[col.name]) for col in clamped_columns(table, scope)]


def stored(plan: QueryPlan) -> QueryPlan:
    """`plan` with each aggregate of a bare bounded column of a table read through its bounded
    copy reading the copy's stored clamped value (a two-level query's per-unit aggregates; an
    unnesting query, whose rows are items, and a table read as it is are left alone). For
    the SQL only: the plan's labels, columns and sensitivities are the original's."""
    table = plan.table
    if plan.unnest is not None:
        return plan
    if plan.inner is not None:
        values = tuple(dataclasses.replace(v, operand=_stored(v.operand, table))
                       if v.kind in _INNER else v for v in plan.inner.values)
        inner: PerUnit = dataclasses.replace(plan.inner, values=values)
        return dataclasses.replace(plan, inner=inner)
    measurements = tuple(dataclasses.replace(m, operand=_stored(m.operand, table))
                         if type(m.kind) in _READERS else m for m in plan.measurements)
    return dataclasses.replace(plan, measurements=measurements)


def reads_stored(plan: QueryPlan) -> bool:
    """Whether an aggregate of `plan` (as `stored` made it) reads a stored clamped value: a
    table without a privacy unit is then read through its copy, else as it is."""
    return any(isinstance(m.operand, Stored) for m in plan.measurements)


def _stored(operand: Operand | None, table: TableSpec) -> Operand | None:
    """The operand read as its column's stored clamped value, when it is a bare bounded column
    of `table` clamped to that column's own bounds; else the operand itself. It still names the
    column itself among its columns, so the rows read carry it as before."""
    if operand is None or isinstance(operand, Stored) or not isinstance(operand.value, exp.Column) \
            or operand.value.table:
        return operand
    column = table.columns.get(operand.value.name)
    if column is None or column not in clamped_columns(table) or operand.columns != (column,) \
            or operand.type != column.type or (operand.lower, operand.upper) != (column.lower, column.upper):
        return operand
    name = companion(column.name)
    held = ColumnSpec(name, column.type, column.lower, column.upper)
    return Stored(operand.name, operand.type, exp.column(name, quoted=True), (column, held),
                  operand.lower, operand.upper)

