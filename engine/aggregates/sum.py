"""SUM(col): the sum of a bounded numeric column's values, each clamped to the policy's bounds."""

from __future__ import annotations

from sqlglot import exp

from ..errors import QueryRefused
from ..policy import ColumnSpec, TableSpec
from .base import Binder, Measured


def bounded_numeric(node: exp.AggFunc, binder: Binder) -> ColumnSpec:
    """The column of SUM(col) or AVG(col): numeric, with public lower and upper bounds."""
    column = binder.bare_column(node, node.this)
    if not column.numeric:
        raise QueryRefused(f"{node.key.upper()}({column.name}) refused: the column is "
                           f"{column.type}, not numeric")
    if not column.bounded:
        raise QueryRefused(
            f"{node.key.upper()}({column.name}) refused: the policy gives no lower/upper "
            f"bounds for {column.name}, so its sensitivity is unbounded"
        )
    return column


class Sum(Measured):
    """SUM of values clamped to [lo, hi]: moves by m·(max(hi,0) − min(lo,0)), or
    2m·max(|lo|, |hi|) across groups."""

    name = "SUM"
    usage = "SUM(col)"
    function = "SUM"
    bound = frozenset({"sum"})

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Sum)

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        return binder.measurement(self, bounded_numeric(node, binder))

    def integer(self, column: ColumnSpec | None) -> bool:
        return _column(column).type == "int"

    def sensitivity(self, column: ColumnSpec | None, rows_per_unit: int, grouped: bool) -> float:
        lo, hi = _column(column).bounds
        if grouped:
            return 2 * rows_per_unit * max(abs(lo), abs(hi))
        return rows_per_unit * (max(hi, 0) - min(lo, 0))

    def sql(self, column: ColumnSpec | None, table: TableSpec) -> exp.Expr:
        return exp.Sum(this=_clamped(_column(column)))


def _column(column: ColumnSpec | None) -> ColumnSpec:
    if column is None:
        raise TypeError("SUM needs a column")
    return column


def _clamped(column: ColumnSpec) -> exp.Expr:
    """CASE-based clamp: unlike GREATEST/LEAST it keeps NULL as NULL (skipped by SUM)."""
    value: exp.Expr = exp.column(column.name, quoted=True)
    if column.type == "float":
        value = exp.cast(value, "DOUBLE")
    lo, hi = (exp.Literal.number(bound) for bound in column.bounds)
    return (
        exp.Case()
        .when(exp.LT(this=value, expression=lo), lo)
        .when(exp.GT(this=value.copy(), expression=hi), hi.copy())
        .else_(value.copy())
    )


SUM = Sum()
