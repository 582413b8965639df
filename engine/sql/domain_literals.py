"""Literals compared with a column: read as DuckDB reads them, and in its domain when it has one.

A text literal compared with a date or timestamp column is that date or timestamp
(`day > '2024-01-05'`), a 0 or 1 compared with a bool column is FALSE or TRUE, and TRUE or FALSE
compared with an int column is 1 or 0, as DuckDB casts them, and a date or timestamp literal plus
or minus a literal INTERVAL is the date or time it names (`coerce_literals`, from the text alone,
docs/theory.md §26).

`WHERE state IN ('ca', 'Texas')` with the domain [CA, NY, TX, WA] can only ever match rows the
policy says do not exist, so answering it spends budget on a noisy 0 (or on values outside the
declared domain). The domain is public, so the query is refused before anything is spent,
naming the domain and the value nearest to what was written.
"""

from __future__ import annotations

import calendar
import datetime as dt
import difflib
from collections.abc import Callable
from typing import cast

from sqlglot import exp

from ..errors import QueryRefused
from ..policy import ColumnSpec
from ..sql_types import TIME_TYPES, SqlType
from .calendar import time_literal
from .scalars import short

Resolve = Callable[[exp.Column], "ColumnSpec | None"]  # a column's policy spec, if it has one


_COMPARED = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
             exp.Between, exp.In)


def coerce_literals(tree: exp.Expression, resolve: Resolve) -> None:
    """Rewrite, in place, the literals compared with a bare column (=, <>, <, <=, >, >=, IS
    [NOT] DISTINCT FROM, BETWEEN, IN) into the column's type where DuckDB would cast them: ISO
    text to a DATE or TIMESTAMP (refused in one line when it is not one), 0/1 to FALSE/TRUE
    for a bool column, TRUE/FALSE to 1/0 for an int column; and fold each literal
    `DATE 'x' ± INTERVAL n unit` into the date or time it names."""
    for shifted in list(tree.find_all(exp.Add, exp.Sub)):
        folded = _shifted_time(cast(exp.Expression, shifted))
        if folded is not None:
            shifted.replace(folded)
    for node in list(tree.find_all(*_COMPARED)):
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            continue
        if isinstance(node, exp.Between):
            keys = ["this", "low", "high"]
        elif isinstance(node, exp.In):
            keys = ["this"]
        else:
            keys = ["this", "expression"]
        sides = [node.args.get(k) for k in keys] + (list(node.expressions) if isinstance(node, exp.In) else [])
        columns = [side for side in sides if isinstance(side, exp.Column)]
        spec = resolve(columns[0]) if len(columns) == 1 else None
        if spec is None:
            continue
        for side in sides:
            if side is not columns[0] and isinstance(side, (exp.Literal, exp.Boolean)):
                side.replace(_coerced(side, spec.type))


_SHIFTS = {"DAY": "days", "WEEK": "weeks", "MONTH": "months", "YEAR": "years", "HOUR": "hours",
           "MINUTE": "minutes", "SECOND": "seconds"}
_TIME_LITERAL_TYPES = {exp.DataType.Type.DATE: SqlType.DATE, exp.DataType.Type.TIMESTAMP: SqlType.TIMESTAMP,
                       exp.DataType.Type.TIMESTAMPNTZ: SqlType.TIMESTAMP}


def _shifted_time(node: exp.Expression) -> exp.Expression | None:
    """`DATE 'x' + INTERVAL n unit` (or minus) as the literal DuckDB computes, calendar months
    ending on the month's last day: a DATE when both are whole days, else a TIMESTAMP; None
    for anything else."""
    base, interval = node.this, node.expression
    if not (isinstance(base, exp.Cast) and isinstance(base.this, exp.Literal) and base.this.is_string
            and base.to.this in _TIME_LITERAL_TYPES and isinstance(interval, exp.Interval)):
        return None
    amount, sign = interval.this, 1
    while isinstance(amount, (exp.Paren, exp.Neg)):
        sign = -sign if isinstance(amount, exp.Neg) else sign
        amount = amount.this
    unit = interval.args.get("unit")
    name = unit.name.upper().rstrip("S") if unit is not None else ""
    if not isinstance(amount, exp.Literal) or not amount.this.lstrip("-").isdigit() or name not in _SHIFTS:
        return None
    kind = _TIME_LITERAL_TYPES[base.to.this]
    start = time_literal(base.this.this, kind)
    steps = sign * int(amount.this) * (-1 if isinstance(node, exp.Sub) else 1)
    try:
        moment = _shift(start, name, steps)
    except (OverflowError, ValueError):
        raise QueryRefused(f"{short(node)} refused: it falls outside the years 1 to 9999") from None
    if not 1 <= moment.year <= 9999:
        raise QueryRefused(f"{short(node)} refused: it falls outside the years 1 to 9999")
    if kind == SqlType.DATE and name in ("DAY", "WEEK", "MONTH", "YEAR"):
        return exp.maybe_parse(f"DATE '{moment.date().isoformat()}'", dialect="duckdb")
    return exp.maybe_parse(f"TIMESTAMP '{moment.isoformat(sep=' ')}'", dialect="duckdb")


def _shift(start: dt.datetime, unit: str, steps: int) -> dt.datetime:
    """`start` moved by `steps` units; a month or year step keeps the day, or takes the month's
    last day when it has fewer (2024-01-31 + 1 month is 2024-02-29, as in DuckDB)."""
    if unit in ("MONTH", "YEAR"):
        months = start.year * 12 + start.month - 1 + steps * (12 if unit == "YEAR" else 1)
        year, month = divmod(months, 12)
        day = min(start.day, calendar.monthrange(year, month + 1)[1])
        return start.replace(year=year, month=month + 1, day=day)
    return start + dt.timedelta(**{_SHIFTS[unit]: steps})


def _coerced(literal: exp.Literal | exp.Boolean, kind: SqlType) -> exp.Expression:
    """The literal as a value of type `kind`, where DuckDB's implicit cast would make it one."""
    if kind in TIME_TYPES and isinstance(literal, exp.Literal) and literal.is_string:
        time_literal(literal.this, kind)
        return exp.cast(exp.Literal.string(literal.this), "DATE" if kind == SqlType.DATE else "TIMESTAMP")
    if kind == SqlType.BOOL and isinstance(literal, exp.Literal) and not literal.is_string \
            and literal.this in ("0", "1"):
        return exp.Boolean(this=literal.this == "1")
    if kind == SqlType.INT and isinstance(literal, exp.Boolean):
        return exp.Literal.number(1 if literal.this else 0)
    return literal.copy()


def check_domain_literals(tree: exp.Expression, resolve: Resolve) -> None:
    """Refuse `col = lit`, `col <> lit` or `col [NOT] IN (lit, ...)` anywhere in `tree` when
    `col` has a public domain and a literal is not one of its values."""
    for node in tree.find_all(exp.EQ, exp.NEQ, exp.In):
        sides = [node.this, *node.expressions] if isinstance(node, exp.In) else [node.this, node.expression]
        if isinstance(node, exp.In) and node.args.get("query") is not None:
            continue
        columns = [s for s in sides if isinstance(s, exp.Column)]
        if len(columns) != 1:
            continue
        spec = resolve(columns[0])
        if spec is None or spec.domain is None:
            continue
        for side in sides:
            value = _literal(side, spec.type)
            if value is not None and value not in spec.domain:
                always = isinstance(node, exp.NEQ) or (isinstance(node, exp.In)
                                                       and isinstance(node.parent, exp.Not))
                raise QueryRefused(_message(columns[0], side, value, spec.domain, always))


def _literal(node: exp.Expression, kind: SqlType) -> object | None:
    """A literal of the column's type (text for str, an integer for int), else None."""
    negative = isinstance(node, exp.Neg)
    node = node.this if negative else node
    if not isinstance(node, exp.Literal):
        return None
    if kind == SqlType.STR:
        return node.this if node.is_string else None
    if node.is_string:
        return None
    try:
        number = float(node.this)
    except ValueError:
        return None
    number = -number if negative else number
    return int(number) if number.is_integer() else number


def _message(column: exp.Column, literal: exp.Expression, value: object, domain: tuple,
             always: bool) -> str:
    shown = ", ".join(map(str, domain)) if len(domain) <= 20 else \
        ", ".join(map(str, domain[:20])) + f", ... ({len(domain)} values)"
    nearest = _nearest(value, domain)
    hint = "" if nearest is None else f"; did you mean {nearest!r}?"
    return (f"{literal.sql(dialect='duckdb')} refused: {column.name} has the public domain "
            f"[{shown}], which does not hold {value!r}, so the comparison is "
            f"{'true for every row' if always else 'true for no row'}{hint} "
            "(nothing was charged)")


def _nearest(value: object, domain: tuple) -> object | None:
    """The domain value nearest to `value`: the same text in another case, the closest
    spelling, or the closest number."""
    if isinstance(value, str):
        texts = [str(d) for d in domain]
        for d in domain:
            if str(d).lower() == value.lower():
                return d
        close = difflib.get_close_matches(value.lower(), [t.lower() for t in texts], n=1, cutoff=0.3)
        if close:
            return domain[[t.lower() for t in texts].index(close[0])]
        prefix = [d for d in domain if str(d)[:1].lower() == value[:1].lower()]
        return prefix[0] if prefix else None
    numbers = [d for d in domain if isinstance(d, (int, float))]
    if not numbers or not isinstance(value, (int, float)):
        return None
    return min(numbers, key=lambda d: abs(d - value))
