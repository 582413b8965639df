"""COUNT(DISTINCT <privacy unit>): the number of units, a row with a NULL unit being its own;
COUNT(DISTINCT <anything else>) is bound by engine/aggregates/distinct.py."""

from __future__ import annotations

import math

from sqlglot import exp

from ..policy import TableSpec
from .base import Binder, Measured, Operand
from .distinct import COUNT_DISTINCT


class CountDistinctUnit(Measured):
    """COUNT(DISTINCT unit): moves by 1 (2m across groups, one per row that changes group)."""

    name = "COUNT(DISTINCT unit)"
    usage = "COUNT(DISTINCT <privacy unit>), COUNT(DISTINCT expr)"
    function = "COUNT"
    reads_unit = True
    bound = frozenset({"count_star", "count"})

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct)

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        targets = node.this.expressions
        if len(targets) == 1 and binder.is_unit(targets[0]):
            return binder.measurement(self, None)
        return COUNT_DISTINCT.bind(node, binder)

    def label(self, operand: Operand | None) -> str:
        return "COUNT(DISTINCT unit)"

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> int:
        return 2 * rows_per_unit if grouped else 1

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        return 0.0, math.inf

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        # Each row with a NULL unit is a unit of its own: COUNT(*) - COUNT(unit) of them, added
        # in DOUBLE (exact below 2**53 rows) so that the plan holds no integer arithmetic.
        unit = table.unit
        distinct = exp.Count(this=exp.Distinct(expressions=[exp.column(unit, quoted=True)]))
        nulls = exp.Sub(this=_double(exp.Count(this=exp.Star())),
                        expression=_double(exp.Count(this=exp.column(unit, quoted=True))))
        return exp.Add(this=_double(distinct), expression=exp.paren(nulls))


def _double(node: exp.Expr) -> exp.Expr:
    return exp.cast(node, "DOUBLE")


COUNT_DISTINCT_UNIT = CountDistinctUnit()
