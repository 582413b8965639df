"""Reading WHERE from the query text alone: its top-level AND terms, the interval a term holds
a date or timestamp column in (`narrowed`), and the key values no counted row can have
(`pruned`), so that group keys and time points follow from the text, never the data."""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from ..errors import QueryRefused
from ..policy import ColumnSpec
from ..sql_types import TIME_TYPES, SqlType
from .calendar import time_literal
from .scalars import CAST_TYPES, numeric_literal
from .scope import Scope


def narrowed(column: ColumnSpec, where: exp.Expression | None) -> tuple[dt.datetime, dt.datetime]:
    """A date or timestamp column's bounds, narrowed by top-level AND terms of WHERE that
    compare the column itself with literals (>=, >, <=, <, =, BETWEEN, IN): no counted row
    holds a value outside. Any other term narrows nothing."""
    first, last = column.period
    for term in _terms(where):
        low, high = _term_interval(term, column)
        if low is not None:
            first = max(first, low)
        if high is not None:
            last = min(last, high)
    if first > last:
        raise QueryRefused(f"GROUP BY over {column.name} refused: the WHERE condition leaves "
                           "none of its values possible, so there is no group to answer")
    return first, last


def _term_interval(term: exp.Expression, column: ColumnSpec
                   ) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The interval a WHERE term holds the column in (None: no bound on that side), exact for
    strict comparisons (a date column's next or previous day, a timestamp's microsecond)."""
    def is_column(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and node.name.lower() == column.name.lower()

    low: dt.datetime | None = None
    high: dt.datetime | None = None
    strict_low = strict_high = False
    if isinstance(term, exp.Between) and is_column(term.this):
        low, high = _time_constant(term.args["low"]), _time_constant(term.args["high"])
    elif isinstance(term, exp.In) and is_column(term.this) and not term.args.get("query"):
        found = [_time_constant(e) for e in term.expressions]
        present = [v for v in found if v is not None]
        if not found or len(present) < len(found):
            return None, None
        low, high = min(present), max(present)
    elif isinstance(term, exp.Binary) and type(term) in (exp.EQ, exp.GT, exp.GTE, exp.LT, exp.LTE):
        left, right = term.this, term.expression
        kind: type[exp.Expression] = type(term)
        if is_column(right) and not is_column(left):
            left, right, kind = right, left, _MIRROR[kind]
        value = _time_constant(right) if is_column(left) else None
        if value is None:
            return None, None
        if kind in (exp.GT, exp.GTE, exp.EQ):
            low = value
        if kind in (exp.LT, exp.LTE, exp.EQ):
            high = value
        strict_low, strict_high = kind is exp.GT, kind is exp.LT
    if column.type == SqlType.DATE:  # a date compares as its midnight: the days within the interval
        day = dt.timedelta(days=1)
        if low is not None:
            low = _shift(_midnight(low), day) if strict_low or low != _midnight(low) else low
        if high is not None:
            high = _shift(high, -day) if strict_high and high == _midnight(high) else _midnight(high)
        return low, high
    tick = dt.timedelta(microseconds=1)
    return (None if low is None else _shift(low, tick) if strict_low else low,
            None if high is None else _shift(high, -tick) if strict_high else high)


def _shift(value: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    """value + delta; past the last (or first) representable moment, the empty side's end."""
    try:
        return value + delta
    except OverflowError:
        return dt.datetime.max if delta > dt.timedelta(0) else dt.datetime.min


def _midnight(moment_: dt.datetime) -> dt.datetime:
    return dt.datetime(moment_.year, moment_.month, moment_.day)


def _time_constant(node: exp.Expression) -> dt.datetime | None:
    """The value of a DATE or TIMESTAMP literal, else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.this, exp.Literal) \
            and node.this.is_string and CAST_TYPES.get(node.args["to"].this) in TIME_TYPES:
        return time_literal(node.this.this, CAST_TYPES[node.args["to"].this])
    return None


def pruned(values: tuple, column: ColumnSpec, where: exp.Expression | None, scope: Scope) -> tuple:
    """The key values a WHERE leaves possible, read from the query text alone: a top-level AND
    term comparing the grouped column itself with literals (=, <>, <, <=, >, >=, IN, BETWEEN,
    or the bare bool column, NOT included) is false for a row whose key is a pruned value,
    so no counted row has that key. Any other term prunes nothing."""
    terms = _terms(where)
    kept = tuple(v for v in values if all(_holds(term, column, v, scope) for term in terms))
    if not kept:
        raise QueryRefused(f"GROUP BY {column.name} refused: the WHERE condition leaves none of "
                           "its values possible, so there is no group to answer")
    return kept


def _terms(where: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND terms of a WHERE condition."""
    terms: list[exp.Expression] = []
    pending = [where] if where is not None else []
    while pending:
        term = pending.pop()
        while isinstance(term, exp.Paren):
            term = term.this
        if isinstance(term, exp.And):
            pending += [term.this, term.expression]
        else:
            terms.append(term)
    return terms


_COMPARE: dict[type[exp.Expression], Callable[[Any, Any], bool]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.LT: operator.lt, exp.LTE: operator.le,
    exp.GT: operator.gt, exp.GTE: operator.ge}
_MIRROR: dict[type[exp.Expression], type[exp.Expression]] = {
    exp.LT: exp.GT, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def _holds(term: exp.Expression, column: ColumnSpec, value, scope: Scope) -> bool:
    """False only when `term` is certainly false (or NULL) on a row whose `column` is `value`."""
    if column.type in TIME_TYPES:
        return _time_holds(term, column, value)
    def is_column(node: exp.Expression) -> bool:
        return scope.refers_to(node, column)

    def constant(node: exp.Expression):
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
            return -numeric_literal(node.this)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return node.this if column.type == SqlType.STR else None
            return numeric_literal(node) if column.type == SqlType.INT else None
        if isinstance(node, exp.Boolean) and column.type == SqlType.BOOL:
            return bool(node.this)
        return None

    if column.type == SqlType.BOOL:
        if is_column(term):
            return value is True
        if isinstance(term, exp.Not) and is_column(term.this):
            return value is False
    if isinstance(term, exp.Binary) and type(term) in _COMPARE:
        left, right = term.this, term.expression
        kind: type[exp.Expression] = type(term)
        if is_column(right) and not is_column(left):
            left, right, kind = right, left, _MIRROR[kind]
        literal = constant(right) if is_column(left) else None
        if literal is None or (kind not in (exp.EQ, exp.NEQ) and column.type != SqlType.INT):
            return True
        return _COMPARE[kind](value, literal)
    if isinstance(term, exp.In) and is_column(term.this) and not term.args.get("query"):
        literals = [constant(e) for e in term.expressions]
        return any(v is None for v in literals) or value in literals
    if isinstance(term, exp.Between) and is_column(term.this) and column.type == SqlType.INT:
        low, high = constant(term.args["low"]), constant(term.args["high"])
        return low is None or high is None or low <= value <= high
    return True


def _time_holds(term: exp.Expression, column: ColumnSpec, value: dt.date) -> bool:
    """`_holds` for a date column's key (a day): by the interval a term holds the column in,
    and by the literals of `<>` and IN."""
    day = dt.datetime(value.year, value.month, value.day)
    is_column = isinstance(term.this, exp.Column) and term.this.name.lower() == column.name.lower()
    if isinstance(term, exp.In) and is_column and not term.args.get("query"):
        found = [_time_constant(e) for e in term.expressions]
        return any(v is None for v in found) or day in found
    if isinstance(term, exp.NEQ) and is_column:
        literal = _time_constant(term.expression)
        return literal is None or literal != day
    low, high = _term_interval(term, column)
    return (low is None or low <= day) and (high is None or day <= high)
