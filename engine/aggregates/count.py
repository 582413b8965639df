"""COUNT(*), COUNT(col) and COUNT(expr): rows (with a non-NULL value), each unit contributing at
most m."""

from __future__ import annotations

import math

from sqlglot import exp

from ..policy import TableSpec
from .base import Binder, Measured, Operand


class Count(Measured):
    """COUNT(*), COUNT(col) or COUNT(expr): moves by m rows (2m across groups, when rows change
    group)."""

    name = "COUNT"
    usage = "COUNT(*), COUNT(expr)"
    function = "COUNT"
    bound = frozenset({"count_star", "count"})

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Count) and not isinstance(node.this, exp.Distinct)

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        arg = node.this
        if isinstance(arg, exp.Star):
            return binder.measurement(self, None)
        if binder.is_unit(arg):
            return binder.measurement(COUNT_UNIT, None)
        return binder.measurement(self, binder.operand(node, arg, numeric=False))

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> int:
        return 2 * rows_per_unit if grouped else rows_per_unit

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        return exp.Count(this=exp.Star() if operand is None else operand.value.copy())

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        return 0.0, math.inf


class CountUnit(Count):
    """COUNT(<privacy unit>): the rows whose unit is not NULL, as SmartNoise SQL counts it (not
    the units: that is COUNT(DISTINCT unit)). A subset of COUNT(*)'s rows, so it moves by m
    rows too (2m across groups): a row with a NULL unit is a unit of its own that adds 0."""

    name = "COUNT(unit)"
    usage = "COUNT(<privacy unit>)"
    reads_unit = True

    def matches(self, node: exp.AggFunc) -> bool:
        return False  # bound by COUNT when its argument is the unit

    def label(self, operand: Operand | None) -> str:
        return "COUNT(unit)"

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        return exp.Count(this=exp.column(table.unit, quoted=True))


COUNT = Count()
COUNT_UNIT = CountUnit()
