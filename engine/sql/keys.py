"""GROUP BY key domains: what each GROUP BY item groups on and its public values (a column's
domain or bounds, CASE results, width buckets, EXTRACT parts, date_trunc periods), narrowed and
pruned by WHERE, at most MAX_GROUPS of them."""

from __future__ import annotations

import math
from dataclasses import replace

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import GroupKey
from ..policy import ColumnSpec
from ..sql_types import TIME_TYPES, SqlType
from .bounds import Range, time_range, value_range
from .calendar import moment, part_values, periods, seconds, time_part, trunc_unit
from .key_values import expression_keys
from .public_keys import PublicColumn, PublicRows, crossed, public_column, row_block
from .scalars import int_literal, numeric_literal, short
from .scope import Scope, declared
from .shifted_keys import moved_columns, renamed
from .where import narrowed, pruned

MAX_GROUPS = 1_000_000


def bind_group(select: exp.Select, scope: Scope) -> tuple[GroupKey, ...]:
    """The GROUP BY keys, each over its declared values."""
    return bind_group_rows(select, scope, None)[0]


def bind_group_rows(select: exp.Select, scope: Scope, read: PublicRows | None
                    ) -> tuple[tuple[GroupKey, ...], tuple[tuple, ...] | None]:
    """The GROUP BY keys and, when columns of a joined public table that list no values are
    keys and `read` can read its rows, the released key rows (that table's distinct rows
    crossed with the other keys' values; docs/theory.md §32); else None: every combination."""
    group = select.args.get("group")
    if group is None:
        return (), None
    for option in ("grouping_sets", "cube", "rollup", "all", "totals"):
        if group.args.get(option):
            raise QueryRefused(f"GROUP BY {option.upper()} refused: list public columns instead")
    where = select.args["where"].this if select.args.get("where") is not None else None
    keys: list[GroupKey] = []
    public: dict[str, list[tuple[int, PublicColumn, exp.Expression]]] = {}  # occurrence -> its grouped columns
    for item in group.expressions:
        if isinstance(item, (exp.Rollup, exp.Cube, exp.GroupingSets)):
            raise QueryRefused(f"GROUP BY {short(item)} refused: list public columns instead")
        target = _group_target(item, select, scope)
        column = public_column(target, scope) if read is not None else None
        if column is not None:
            key = GroupKey(column.spec.name, column.spec.name, column.spec.type, (),
                           exp.column(column.spec.name, quoted=True), (column.spec,))
        else:
            key = _group_key(target, scope, len(keys), where)
        if all(key.value != other.value for other in keys):
            if column is not None:
                public.setdefault(column.source.shown, []).append((len(keys), column, target))
            keys.append(key)
    blocks = []
    for grouped in public.values():
        if all(column.listed for _, column, _ in grouped):  # the declared values, as before
            for position, _, target in grouped:
                keys[position] = _group_key(target, scope, position, where)
            continue
        assert read is not None
        rows = row_block([column for _, column, _ in grouped], scope, where, read, MAX_GROUPS)
        positions = tuple(position for position, _, _ in grouped)
        for index, position in enumerate(positions):
            keys[position] = replace(keys[position], keys=tuple(sorted({row[index] for row in rows})))
        blocks.append((positions, rows))
    return tuple(keys), (crossed(keys, blocks) if blocks else None)


_GROUPABLE = ("group on a bool column, a column with a domain, a bounded int or date column, a "
              "CASE with literal results, FLOOR(col / width) of a bounded int column, "
              "EXTRACT(part FROM col) or date_trunc('month', col) of a date or timestamp column, "
              "or an int, bool, text or date expression of such columns")


def _group_target(item: exp.Expression, select: exp.Select, scope: Scope) -> exp.Expression:
    """What a GROUP BY item groups on: an ordinal names a SELECT item, and a name that is not a
    policy column may name a SELECT alias (a policy column wins, as in DuckDB)."""
    outputs = select.expressions
    if isinstance(item, exp.Literal) and not item.is_string:
        position = int_literal(item, "GROUP BY position")
        if not 1 <= position <= len(outputs):
            raise QueryRefused(f"GROUP BY {position} refused: positions run from 1 to {len(outputs)}")
        target = outputs[position - 1]
        target = target.this if isinstance(target, exp.Alias) else target
        if target.find(exp.AggFunc):
            raise QueryRefused(f"GROUP BY {position} refused: item {position} is an aggregate; "
                               "group on a key (a public column or bucket)")
        return target
    if isinstance(item, exp.Column) and not item.table and not scope.has_column(item):
        named = [o.this for o in outputs if isinstance(o, exp.Alias) and o.alias.lower() == item.name.lower()]
        if len(named) == 1 and not named[0].find(exp.AggFunc):
            return named[0]
    return item


def _group_key(node: exp.Expression, scope: Scope, index: int,
               where: exp.Expression | None) -> GroupKey:
    """The key `node` groups on, with its public values (pruned by a public WHERE condition
    on a grouped column, see `pruned`)."""
    while isinstance(node, exp.Paren):
        node = node.this
    moved = moved_columns(node, scope, where, index)
    if moved is not None:  # a date or timestamp column moved by an INTERVAL (§32)
        inner, inner_scope, back = moved
        try:
            return back(_group_key(inner, inner_scope, index, where))
        except QueryRefused as refusal:
            raise renamed(refusal, scope, node) from None
    if isinstance(node, exp.Column) and scope.column(node).type in TIME_TYPES:
        return _time_column_key(scope.column(node), scope, where)
    if isinstance(node, exp.Column):
        column = scope.column(node)
        values = column.group_values
        if values is None and column.type == SqlType.INT and column.bounded:
            lo, hi = math.ceil(column.bounds[0]), math.floor(column.bounds[1])
            if hi - lo + 1 > MAX_GROUPS:
                raise QueryRefused(f"GROUP BY {column.name} would produce {hi - lo + 1} groups; "
                                   f"at most {MAX_GROUPS}")
            values = tuple(range(lo, hi + 1))
        if values is None:
            raise QueryRefused(f"GROUP BY {column.name} refused: the column has no public domain in "
                               f"the policy ({_GROUPABLE})")
        values = pruned(values, column, where, scope)
        return GroupKey(column.name, column.name, column.type, values,
                        exp.column(column.name, quoted=True), (column,))
    label = node.sql(dialect="duckdb")
    if isinstance(node, exp.Case):
        kind, values = _case_values(node, scope)
    elif isinstance(node, exp.Floor) and _is_width_bucket(node, scope):
        kind, values = _width_buckets(node, scope)
    elif isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)) or (
            isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.DATE):
        return _trunc_key(node, scope, index, where)
    elif node.find(exp.Extract, *_PART_NODES) and scope.scalar_type(node, "GROUP BY") == SqlType.INT:
        kind, values = SqlType.INT, _extract_values(node, scope, where)
    elif isinstance(node, exp.Div):
        raise QueryRefused(f"GROUP BY {short(node)} refused: `/` divides exactly; write "
                           f"FLOOR({short(node)}) for width buckets")
    else:
        kind, values = expression_keys(
            node, scope.scalar_type(node, "GROUP BY"), scope, scope.rewrite_scalar(node),
            lambda column: _key_range(column, scope, where, short(node)),
            lambda column: narrowed(column, where), MAX_GROUPS)
    checked = scope.scalar_type(node, "GROUP BY")
    if isinstance(node, exp.Case) and checked not in (kind, SqlType.NULL):
        raise QueryRefused(f"GROUP BY {short(node)} refused: its results must be literals of one type")
    columns = tuple(dict.fromkeys(scope.column(c) for c in node.find_all(exp.Column)))
    return GroupKey(f"__k{index}", label, kind, values, scope.rewrite_scalar(node), columns)


_PART_NODES = (exp.Year, exp.Quarter, exp.Month, exp.Day, exp.DayOfMonth, exp.DayOfWeek,
               exp.DayOfWeekIso, exp.DayOfYear, exp.Week, exp.WeekOfYear, exp.Hour, exp.Minute,
               exp.Second)


def _time_column_key(column: ColumnSpec, scope: Scope, where: exp.Expression | None) -> GroupKey:
    """GROUP BY a date column: every day in its bounds (narrowed by WHERE), as dates."""
    if column.type != SqlType.DATE:
        raise QueryRefused(f"GROUP BY {column.name} refused: a timestamp has too many values to "
                           f"group on; group on date_trunc('day', {column.name}), "
                           f"CAST({column.name} AS DATE) or EXTRACT(hour FROM {column.name})")
    declared(column, scope, f"GROUP BY {column.name}")
    first, last = narrowed(column, where)
    days = periods(first, last, "DAY", MAX_GROUPS)
    values = pruned(tuple(day.date() for day in days), column, where, scope)
    return GroupKey(column.name, column.name, SqlType.DATE, values, scope.rewrite_scalar(
        exp.column(column.name)), (column,))


def _trunc_key(node: exp.Expression, scope: Scope, index: int,
               where: exp.Expression | None) -> GroupKey:
    """GROUP BY date_trunc(unit, x) or CAST(x AS DATE): the start of every period meeting x's
    bounds (narrowed by WHERE on a column); dates when x is a date and the unit a day or longer
    (a cast to a date is its day)."""
    operand = scope.scalar_type(node.this, "GROUP BY")
    scope.scalar_type(node, "GROUP BY")
    unit = "DAY" if isinstance(node, exp.Cast) else trunc_unit(node)
    found = time_range(node.this, lambda column: _key_range(column, scope, where, short(node)))
    if found is None:
        raise QueryRefused(f"GROUP BY {short(node)} refused: its value is always NULL")
    starts = periods(moment(found[0]), moment(found[1]), unit, MAX_GROUPS)
    value = scope.rewrite_scalar(node)
    columns = tuple(dict.fromkeys(scope.column(c) for c in node.find_all(exp.Column)))
    label = node.sql(dialect="duckdb")
    if isinstance(node, exp.Cast) or (operand == SqlType.DATE and unit != "HOUR"):
        # DuckDB's date_trunc of a date is a timestamp: keys that are days are shown as dates.
        if not isinstance(node, exp.Cast):
            value = exp.TryCast(this=value, to=exp.DataType.build("DATE"))
        return GroupKey(f"__k{index}", label, SqlType.DATE, tuple(s.date() for s in starts), value, columns)
    return GroupKey(f"__k{index}", label, SqlType.TIMESTAMP, tuple(starts), value, columns)


def _extract_values(node: exp.Expression, scope: Scope, where: exp.Expression | None) -> tuple:
    """GROUP BY an integer expression over EXTRACT (e.g. EXTRACT(month FROM day)): every whole
    number in its range, a year's from the bounds of the column (narrowed by WHERE). A part
    of a day of a column whose narrowed bounds span at most a year has the values it takes on
    those days (WHERE day BETWEEN March and May: months 3 to 5)."""
    inner = node.expression if isinstance(node, exp.Extract) else node.this
    if isinstance(inner, exp.Column) and scope.column(inner).type in TIME_TYPES:
        first, last = narrowed(scope.column(inner), where)
        values = part_values(time_part(node), first, last)
        if values is not None:
            return values
    found = value_range(node, lambda column: _key_range(column, scope, where, short(node)))
    if found is None:
        raise QueryRefused(f"GROUP BY {short(node)} refused: its value is always NULL")
    lo, hi = math.ceil(found[0]), math.floor(found[1])
    if hi - lo + 1 > MAX_GROUPS:
        raise QueryRefused(f"GROUP BY {short(node)} would produce {hi - lo + 1} groups; "
                           f"at most {MAX_GROUPS}")
    return tuple(range(lo, hi + 1))


def _key_range(node: exp.Column, scope: Scope, where: exp.Expression | None, what: str) -> Range:
    """The range of a column inside a group key: a date or timestamp column's declared bounds
    narrowed by WHERE; a number's bounds."""
    column = scope.column(node)
    if column.type not in TIME_TYPES:
        if column.type == SqlType.BOOL:
            return 0.0, 1.0
        if not column.numeric or not column.bounded:
            raise QueryRefused(f"GROUP BY {what} refused: declare lower and upper for "
                               f"{scope.table.name}.{column.name}")
        lo, hi = column.bounds
        return float(lo), float(hi)
    declared(column, scope, f"GROUP BY {what}")
    first, last = narrowed(column, where)
    return seconds(first), seconds(last)


def _case_values(node: exp.Case, scope: Scope) -> tuple[SqlType, tuple]:
    """A CASE bucket's keys: its literal results (text, whole numbers or booleans), in order."""
    results = [branch.args["true"] for branch in node.args.get("ifs") or []]
    if node.args.get("default") is not None:
        results.append(node.args["default"])
    values: list = []
    for result in results:
        while isinstance(result, exp.Paren):
            result = result.this
        if isinstance(result, exp.Null):
            continue
        if isinstance(result, exp.Boolean):
            value: object = bool(result.this)
        elif isinstance(result, exp.Literal) and result.is_string:
            value = result.this
        elif isinstance(result, exp.Literal) and scope.scalar_type(result, "GROUP BY") == SqlType.INT:
            value = int_literal(result, "CASE result")
        else:
            raise QueryRefused(f"GROUP BY {short(node)} refused: each CASE result must be a text, "
                               f"whole number or boolean literal, not {short(result)}, so that "
                               "the groups follow from the query")
        if value not in values:
            values.append(value)
    kinds = {SqlType.BOOL if isinstance(v, bool) else SqlType.INT if isinstance(v, int) else SqlType.STR
             for v in values}
    if len(kinds) != 1:
        raise QueryRefused(f"GROUP BY {short(node)} refused: its results must be literals of one type")
    return kinds.pop(), tuple(values)


def _is_width_bucket(node: exp.Floor, scope: Scope) -> bool:
    """Whether `node` is FLOOR(col / w) of an int column and a number w (other FLOORs are
    computed keys)."""
    quotient = node.this
    while isinstance(quotient, exp.Paren):
        quotient = quotient.this
    return isinstance(quotient, exp.Div) and isinstance(quotient.this, exp.Column) \
        and isinstance(quotient.expression, exp.Literal) and not quotient.expression.is_string \
        and scope.column(quotient.this).type == SqlType.INT


def _width_buckets(node: exp.Floor, scope: Scope) -> tuple[SqlType, tuple]:
    """FLOOR(col / w) of a bounded int column and a positive literal w: the whole numbers
    from FLOOR(lower / w) to FLOOR(upper / w)."""
    quotient = node.this
    while isinstance(quotient, exp.Paren):
        quotient = quotient.this
    width = quotient.expression if isinstance(quotient, exp.Div) else None
    column = quotient.this if isinstance(quotient, exp.Div) else None
    if not isinstance(column, exp.Column) or not isinstance(width, exp.Literal) or width.is_string \
            or node.args.get("decimals") or node.args.get("to"):
        raise QueryRefused(f"GROUP BY {short(node)} refused: a width bucket is FLOOR(col / width) "
                           "with a positive number as the width")
    spec = scope.column(column)
    size = numeric_literal(width)
    if size <= 0 or spec.type != SqlType.INT or not spec.bounded:
        raise QueryRefused(f"GROUP BY {short(node)} refused: a width bucket needs a bounded int "
                           "column and a positive width")
    lo, hi = math.floor(spec.bounds[0] / size), math.floor(spec.bounds[1] / size)
    if hi - lo + 1 > MAX_GROUPS:
        raise QueryRefused(f"GROUP BY {short(node)} would produce {hi - lo + 1} groups; at most {MAX_GROUPS}")
    return SqlType.INT, tuple(range(lo, hi + 1))
