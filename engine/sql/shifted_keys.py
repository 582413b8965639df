"""A GROUP BY key over a date or timestamp column moved by a literal INTERVAL of fixed length
(`day + INTERVAL 1 DAY`, `CAST(ts + INTERVAL 2 HOUR AS DATE)`, `date_trunc('week', day +
INTERVAL 3 DAY)`): the moved column bound as a column of its own whose declared range is the
column's (narrowed by WHERE) moved the same way, so every key form of keys.py applies to it and
its keys follow from the policy alone (docs/theory.md §32)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import GroupKey
from ..policy import ColumnSpec
from ..sql_types import TIME_TYPES, SqlType
from .calendar import FIXED_UNITS, interval_step
from .scalars import short
from .scope import Scope, declared
from .where import narrowed

MOVED = "__moved"  # the name a moved column is bound under: "__moved0", "__moved1", ...
_FIXED = ", ".join(f"{unit.lower()}s" for unit in FIXED_UNITS)


def moved_columns(node: exp.Expression, scope: Scope, where: exp.Expression | None, index: int
                  ) -> tuple[exp.Expression, Scope, Callable[[GroupKey], GroupKey]] | None:
    """`node` with each `col ± INTERVAL n unit` on a date or timestamp column replaced by a
    column of its own, the scope holding those columns, and how to turn a key bound on them
    back into the GROUP BY item `index` over the rows (each replaced by its moved,
    range-guarded value); None when `node` moves no column."""
    replaced = node.copy()
    parts = [(part, moved) for part in replaced.find_all(exp.Add, exp.Sub)
             if (moved := _moved(part, scope)) is not None]
    if not parts:
        return None
    columns: dict[str, ColumnSpec] = {}
    values: dict[str, exp.Expression] = {}
    originals: dict[str, ColumnSpec] = {}
    for number, (part, (written, column, seconds)) in enumerate(parts):
        name = f"{MOVED}{number}"
        spec = _moved_spec(column, seconds, scope, where, part.sql(dialect="duckdb"), name)
        columns[name], originals[name] = spec, column
        values[name] = _moved_value(part, written, spec, scope)
        if part is replaced:
            replaced = exp.column(name)
        else:
            part.replace(exp.column(name))
    inner = Scope(replace(scope.table, columns={**scope.table.columns, **columns}), scope.aliases,
                  scope.data_columns, scope.joined)

    def back(key: GroupKey) -> GroupKey:
        value = key.value.copy()
        if isinstance(value, exp.Column) and value.name in values:
            value = values[value.name].copy()
        for column_node in list(value.find_all(exp.Column)):
            if column_node.name in values:
                column_node.replace(values[column_node.name].copy())
        return replace(key, name=f"__k{index}", label=node.sql(dialect="duckdb"), value=value,
                       columns=tuple(dict.fromkeys(originals.get(c.name, c) for c in key.columns)))
    return replaced, inner, back


def renamed(refusal: QueryRefused, scope: Scope, node: exp.Expression) -> QueryRefused:
    """A refusal about a moved column, naming what the query wrote instead."""
    text = str(refusal)
    parts = [part for part in node.find_all(exp.Add, exp.Sub) if _moved(part, scope)]
    for number, part in enumerate(parts):
        written = part.sql(dialect="duckdb")
        text = text.replace(f"{scope.table.name}.{MOVED}{number}", written)
        text = text.replace(f"{MOVED}{number}", written)
    return QueryRefused(text)


def _moved(node: exp.Expr, scope: Scope) -> tuple[exp.Column, ColumnSpec, int] | None:
    """(the column as written, its policy column, signed seconds) of `col + INTERVAL n unit`,
    `INTERVAL n unit + col` or `col - INTERVAL n unit` on a date or timestamp column, else
    None; refused for a calendar unit (a month or year has no fixed length)."""
    if not isinstance(node, (exp.Add, exp.Sub)):
        return None
    this, other = node.this, node.expression
    if isinstance(node, exp.Add) and isinstance(this, exp.Interval):
        this, other = other, this
    while isinstance(this, exp.Paren):
        this = this.this
    if not isinstance(this, exp.Column) or not isinstance(other, exp.Interval):
        return None
    column = scope.spec_of(this)
    if column is None or column.type not in TIME_TYPES:
        return None
    step = interval_step(other)
    if step is None or step[0] not in FIXED_UNITS:
        why = f"a {step[0].lower()} step has none" if step else \
            f"write INTERVAL n unit with a whole number n, not {short(other)}"
        raise QueryRefused(f"GROUP BY {short(node)} refused: a {column.type} key moves by a whole "
                           f"number of a fixed length ({_FIXED}); {why}")
    unit, count = step
    return this, column, count * FIXED_UNITS[unit] * (-1 if isinstance(node, exp.Sub) else 1)


def _moved_spec(column: ColumnSpec, seconds: int, scope: Scope, where: exp.Expression | None,
                text: str, name: str) -> ColumnSpec:
    """The moved column: a date when a date moves by whole days (DuckDB's value is that day's
    midnight), else a timestamp, with the column's range (narrowed by WHERE) moved; refused
    when it leaves the years 1 to 9999."""
    declared(column, scope, f"GROUP BY {text}")
    first, last = narrowed(column, where)
    step = dt.timedelta(seconds=seconds)
    try:
        moved = (first + step, last + step)
    except OverflowError:
        moved = None
    if moved is None or moved[0].year < 1 or moved[1].year > 9999:
        raise QueryRefused(f"GROUP BY {text} refused: it falls outside the years 1 to 9999")
    kind = SqlType.DATE if column.type == SqlType.DATE and seconds % 86_400 == 0 else SqlType.TIMESTAMP
    return ColumnSpec(name, kind, span=moved)


def _moved_value(part: exp.Expr, written: exp.Column, spec: ColumnSpec, scope: Scope
                 ) -> exp.Expression:
    """The moved column's value on a row: the column as binding reads it (NULL outside its
    declared range) moved by the interval as written, kept only inside the moved range, so that
    every date function on it is total; a date moved by whole days cast back to a date."""
    interval = part.expression if isinstance(part.expression, exp.Interval) else part.this
    step = exp.Sub if isinstance(part, exp.Sub) else exp.Add
    moved = exp.Paren(this=step(this=scope.rewrite_scalar(written), expression=interval.copy()))
    first, last = spec.span  # type: ignore[misc]
    low, high = (exp.TryCast(this=exp.Literal.string(v.isoformat(sep=" ")),
                             to=exp.DataType.build("TIMESTAMP")) for v in (first, last))
    kept = exp.Case(ifs=[exp.If(this=exp.Paren(this=exp.and_(
        exp.GTE(this=moved.copy(), expression=low), exp.LTE(this=moved.copy(), expression=high))),
        true=moved.copy())])
    if spec.type == SqlType.DATE:
        return exp.TryCast(this=kept, to=exp.DataType.build("DATE"))
    return kept
