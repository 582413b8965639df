"""COUNT(DISTINCT expr), SUM(DISTINCT expr) and AVG(DISTINCT expr) of a column or row expression
that is not the privacy unit: one unit's at most m rows add or remove at most m distinct values
(docs/theory.md §26)."""

from __future__ import annotations

import math

from sqlglot import exp

from ..errors import QueryRefused
from ..policy import TableSpec
from .avg import Avg, clamped_mean
from .base import Binder, Measured, Operand
from .sum import Sum, clamped


def distinct_target(node: exp.AggFunc) -> exp.Expression:
    """The one expression inside `AGG(DISTINCT ...)`, or a refusal naming the accepted form."""
    targets = node.this.expressions
    if len(targets) != 1:
        raise QueryRefused(f"{node.sql(dialect='duckdb')} refused: DISTINCT takes one expression "
                           f"here, e.g. {node.key.upper()}(DISTINCT col)")
    return targets[0]


def _listed(operand: Operand) -> tuple | None:
    """The public values of a bare column with a domain (or a bool's two), the only ones
    counted, else None."""
    if len(operand.columns) != 1 or not isinstance(operand.value, exp.Column):
        return None
    return operand.columns[0].group_values


def _literal(value: object) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    return exp.Literal.string(value) if isinstance(value, str) else exp.Literal.number(value)


class CountDistinct(Measured):
    """COUNT(DISTINCT expr): moves by at most m (2m across groups); by at most D for a column
    with a domain of D values, whose values outside it are not counted."""

    name = "COUNT DISTINCT"
    usage = "COUNT(DISTINCT expr)"
    function = "COUNT"
    bound = frozenset({"count"})

    def matches(self, node: exp.AggFunc) -> bool:
        return False  # bound by COUNT(DISTINCT unit) when its argument is not the unit

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        return binder.measurement(self, binder.operand(node, distinct_target(node), numeric=False))

    def label(self, operand: Operand | None) -> str:
        return f"COUNT(DISTINCT {_operand(operand).name})"

    def describe(self, operand: Operand) -> str:
        return self.label(operand)

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> int:
        domain = _listed(_operand(operand))
        if grouped:
            return 2 * rows_per_unit
        return rows_per_unit if domain is None else min(rows_per_unit, len(domain))

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        domain = _listed(_operand(operand))
        return 0.0, (math.inf if domain is None else float(len(domain)))

    def value(self, operand: Operand) -> exp.Expr:
        """What is counted: the value, or NULL when it is outside the column's domain."""
        domain = _listed(operand)
        if domain is None:
            return operand.value.copy()
        inside = exp.In(this=operand.value.copy(), expressions=[_literal(v) for v in domain])
        return exp.Case(ifs=[exp.If(this=inside, true=operand.value.copy())])

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        return exp.Count(this=exp.Distinct(expressions=[self.value(_operand(operand))]))


class CountDistinctClamped(CountDistinct):
    """COUNT(DISTINCT ...) of a numeric operand's clamped values: AVG(DISTINCT expr)'s count,
    with the sensitivity of any COUNT(DISTINCT)."""

    name = "COUNT DISTINCT clamped"

    def label(self, operand: Operand | None) -> str:
        return f"COUNT(DISTINCT clamped {_operand(operand).name})"

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> int:
        return 2 * rows_per_unit if grouped else rows_per_unit

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        return 0.0, math.inf

    def value(self, operand: Operand) -> exp.Expr:
        return clamped(operand)


class SumDistinct(Sum):
    """SUM(DISTINCT expr) of values clamped to [lo, hi] before DISTINCT: a unit adds at most m
    distinct values and removes at most m, so it moves by what SUM moves."""

    name = "SUM DISTINCT"
    usage = "SUM(DISTINCT expr)"

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Sum) and isinstance(node.this, exp.Distinct)

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        return binder.measurement(self, binder.operand(node, distinct_target(node), numeric=True))

    def label(self, operand: Operand | None) -> str:
        return f"SUM(DISTINCT {_operand(operand).name})"

    def describe(self, operand: Operand) -> str:
        return self.label(operand)

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        return exp.Sum(this=exp.Distinct(expressions=[clamped(_operand(operand))]))


class AvgDistinct(Avg):
    """AVG(DISTINCT expr): SUM(DISTINCT) / COUNT(DISTINCT) of the clamped values, post-processing
    of the two, with AVG's interval."""

    name = "AVG DISTINCT"
    usage = "AVG(DISTINCT expr)"

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Avg) and isinstance(node.this, exp.Distinct)

    def describe(self, operand: Operand) -> str:
        return f"AVG(DISTINCT {operand.name})"

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        operand = binder.operand(node, distinct_target(node), numeric=True)
        return clamped_mean(binder.measurement(SUM_DISTINCT, operand),
                            binder.measurement(COUNT_DISTINCT_CLAMPED, operand), operand.bounds)


def _operand(operand: Operand | None) -> Operand:
    if operand is None:
        raise TypeError("a DISTINCT aggregate needs an operand")
    return operand


COUNT_DISTINCT = CountDistinct()
COUNT_DISTINCT_CLAMPED = CountDistinctClamped()
SUM_DISTINCT = SumDistinct()
AVG_DISTINCT = AvgDistinct()
