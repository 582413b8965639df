"""SUM(expr): the sum of a bounded numeric operand's values, each clamped to its public bounds."""

from __future__ import annotations

import math

from sqlglot import exp

from ..policy import TableSpec
from ..sql_types import SqlType
from .base import Binder, Measured, Operand


def bounded_numeric(node: exp.AggFunc, binder: Binder) -> Operand:
    """The operand of SUM(expr) or AVG(expr): numeric (a condition counts as 0/1), with public
    lower and upper bounds from the policy."""
    return binder.operand(node, node.this, numeric=True)


class Sum(Measured):
    """SUM of values clamped to [lo, hi]: moves by m·(max(hi,0) − min(lo,0)), or
    2m·max(|lo|, |hi|) across groups."""

    name = "SUM"
    usage = "SUM(expr)"
    function = "SUM"
    bound = frozenset({"sum"})

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Sum) and not isinstance(node.this, exp.Distinct)

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        return binder.measurement(self, bounded_numeric(node, binder))

    def integer(self, operand: Operand | None) -> bool:
        return _operand(operand).type in (SqlType.INT, SqlType.BOOL)

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> float:
        lo, hi = _operand(operand).bounds
        if grouped:
            return 2 * rows_per_unit * max(abs(lo), abs(hi))
        return rows_per_unit * (max(hi, 0) - min(lo, 0))

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        return exp.Sum(this=clamped(_operand(operand)))

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        """A sum of values in [lo, hi] has their sign when they all have one."""
        lo, hi = _operand(operand).bounds
        return (0.0 if lo >= 0 else -math.inf), (0.0 if hi <= 0 else math.inf)


def _operand(operand: Operand | None) -> Operand:
    if operand is None:
        raise TypeError("SUM needs an operand")
    return operand


class Stored(Operand):
    """An operand whose value is a column of the bounded copy that already holds the clamped
    value (engine/stored_clamps.py): `clamped` reads it as it is."""


def clamped(operand: Operand) -> exp.Expr:
    """CASE-based clamp of the operand's value, as a number, to its bounds: unlike
    GREATEST/LEAST it keeps NULL as NULL (skipped by SUM). A `Stored` operand is the clamped
    value already."""
    if isinstance(operand, Stored):
        return operand.value.copy()
    value = number(operand)
    lo, hi = (exp.Literal.number(bound) for bound in operand.bounds)
    return (
        exp.Case()
        .when(exp.LT(this=value.copy(), expression=lo), lo)
        .when(exp.GT(this=value.copy(), expression=hi), hi.copy())
        .else_(value.copy())
    )


def number(operand: Operand) -> exp.Expr:
    """The operand's value as the number it is summed as: a float as DOUBLE, a condition as
    0/1, an integer expression (which hardening may have evaluated in DOUBLE) as BIGINT."""
    value = operand.value.copy()
    if operand.type == SqlType.FLOAT:
        return exp.cast(value, "DOUBLE")
    if operand.type == SqlType.BOOL or not isinstance(value, exp.Column):
        return exp.TryCast(this=value, to=exp.DataType.build("BIGINT"))
    return value


SUM = Sum()
