"""A date or timestamp column plus or minus a literal INTERVAL, compared with a literal
(`day + INTERVAL 7 DAY > DATE '2024-03-10'`): the literal moved the other way instead
(`day > DATE '2024-03-03'`), from the query text alone, so no row is shifted and the query is
the one with the moved literal (docs/theory.md §26.3)."""

from __future__ import annotations

from sqlglot import exp

from ..errors import QueryRefused
from ..policy import ColumnSpec
from ..sql_types import SqlType
from .domain_literals import Resolve
from .scalars import short

_UNITS = ("WEEK", "DAY", "HOUR", "MINUTE", "SECOND")  # the units of a fixed length
_SIDES = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)


def move_shifts(tree: exp.Expression, resolve: Resolve) -> None:
    """Rewrite, in place, each comparison (=, <>, <, <=, >, >=, IS [NOT] DISTINCT FROM,
    BETWEEN, IN) of `col ± INTERVAL n unit` with literals into the comparison of `col` with each
    literal ∓ that interval; coerce_literals then folds them. Exact when the unit has a fixed
    length (weeks, days, hours, minutes, seconds: DuckDB compares a date with a timestamp as
    that day's midnight); a calendar month or year, which has none, is refused in one line.
    Anything else is left as written."""
    for node in list(tree.find_all(*_SIDES, exp.Between, exp.In)):
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            continue
        keys = ["this", "low", "high"] if isinstance(node, exp.Between) else \
            ["this"] if isinstance(node, exp.In) else ["this", "expression"]
        sides = [node.args[k] for k in keys if node.args.get(k) is not None]
        if isinstance(node, exp.In):
            sides += list(node.expressions)
        shifted = [side for side in sides if _shift_of(side, resolve) is not None]
        others = [side for side in sides if side not in shifted]
        if len(shifted) != 1 or not all(_is_literal(side) for side in others):
            continue
        (moving,) = shifted
        column, interval, sign = _shift_of(moving, resolve) or (None, None, 1)
        assert column is not None and interval is not None
        for side in others:
            moved = exp.Sub if sign > 0 else exp.Add
            side.replace(moved(this=_typed(side, resolve(column)), expression=interval.copy()))
        moving.replace(column.copy())


def _shift_of(node: exp.Expression, resolve: Resolve) -> tuple[exp.Column, exp.Interval, int] | None:
    """(column, interval, +1 or -1) of `col + INTERVAL n unit`, `INTERVAL n unit + col` or
    `col - INTERVAL n unit` on a date or timestamp column, else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, (exp.Add, exp.Sub)):
        return None
    this, other = node.this, node.expression
    if isinstance(node, exp.Add) and isinstance(this, exp.Interval):
        this, other = other, this
    if not (isinstance(this, exp.Column) and isinstance(other, exp.Interval)):
        return None
    spec = resolve(this)
    if spec is None or spec.type not in (SqlType.DATE, SqlType.TIMESTAMP):
        return None
    unit = other.args.get("unit")
    name = unit.name.upper().rstrip("S") if unit is not None else ""
    if name not in _UNITS:
        units = ", ".join(f"{u.lower()}s" for u in _UNITS)
        raise QueryRefused(f"{short(node)} refused: a {spec.type} column compared with a literal "
                           f"moves by a fixed length ({units}); a {name.lower() or 'calendar'} "
                           "step has none")
    return this, other, -1 if isinstance(node, exp.Sub) else 1


def _is_literal(node: exp.Expression) -> bool:
    return (isinstance(node, exp.Literal) and node.is_string) or (
        isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string)


def _typed(literal: exp.Expression, spec: ColumnSpec | None) -> exp.Expression:
    """The literal as a typed DATE or TIMESTAMP literal (ISO text read as the column's type)."""
    if isinstance(literal, exp.Literal) and spec is not None:
        return exp.cast(exp.Literal.string(literal.this),
                        "DATE" if spec.type == SqlType.DATE else "TIMESTAMP")
    return literal.copy()
