"""Bind a parsed SELECT to the policy: resolve names, type-check with the scalar whitelist
(engine/scalars.py), and build the QueryPlan (engine/plan.py)."""

from __future__ import annotations

import datetime as dt
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from ..aggregates import Aggregate, Measured, Operand, aggregate_of, supported
from ..aggregates.quantile import parse_value_column
from ..declared_models import SeriesPoints
from ..errors import QueryRefused, QueryTooLarge
from ..plan import GroupKey, Join, Measurement, OutputColumn, QueryPlan
from ..policy import TIME_TYPES, ColumnSpec, Limits, Policy, TableSpec
from .domain_literals import check_domain_literals
from .harden import as_double, harden
from .join import bind_join, joined_column
from .scalars import (
    MAX_LITERAL,
    Range,
    check_args,
    int_literal,
    moment,
    normalize_times,
    numeric_literal,
    part_values,
    periods,
    seconds,
    short,
    time_literal,
    time_part,
    time_range,
    trunc_unit,
    type_of,
    value_range,
)

MAX_GROUPS = 1_000_000
MAX_LIMIT = 1_000_000_000
_SELECT_ARGS = {"expressions", "from_", "joins", "where", "group", "having", "order", "limit", "offset"}


def build_plan(select: exp.Select, policy: Policy, sql: str,
               data_columns: Mapping[str, frozenset[str]] | None = None) -> QueryPlan:
    """Validate the SELECT against the policy and return its plan. `data_columns` (each table's
    column names in the data) lets a refusal say a column exists but is not in the policy."""
    normalized = normalize_times(select)
    assert isinstance(normalized, exp.Select)
    select = normalized
    for key, value in select.args.items():
        if key not in _SELECT_ARGS and value not in (None, [], False):
            if key == "distinct":
                raise QueryRefused("SELECT DISTINCT refused: aggregate queries return one row per group")
            raise QueryRefused(f"{key.upper()} clause refused: not supported")
    table, aliases = _bind_table(select, policy)
    join, joined_aliases = bind_join(select, policy, table, aliases)
    scope = _Scope(table, aliases, (data_columns or {}).get(table.name, frozenset()), join,
                   joined_aliases)
    where = None
    if select.args.get("where") is not None:
        condition = select.args["where"].this
        if scope.scalar_type(condition, "WHERE") not in ("bool", "null"):
            raise QueryRefused("WHERE must be a condition (true/false), not a value")
        where = scope.rewrite_scalar(condition)
    group_by = _bind_group(select, scope)
    post = _PostScope(scope, group_by, policy.limits.quantile_bins)
    outputs = _bind_outputs(select, post)
    check_domain_literals(select, scope.spec_of)
    if not any(out.measurements for out in outputs):
        raise QueryRefused(f"no aggregate in SELECT: use one of {supported()}")
    aliases_to_outputs = {out.name.lower(): out for out in outputs}
    having = None
    if select.args.get("having") is not None:
        having = post.rewrite(select.args["having"].this, "HAVING", aliases_to_outputs)
    order = _bind_order(select, post, aliases_to_outputs, len(outputs))
    limit = _bind_count(select.args.get("limit"), "LIMIT")
    offset = _bind_count(select.args.get("offset"), "OFFSET")
    plan = QueryPlan(sql, table, where, group_by, tuple(post.measurements.values()),
                     tuple(outputs), having, order, limit, offset, join=join)
    if plan.group_by and plan.group_count > MAX_GROUPS:
        raise QueryRefused(f"GROUP BY would produce {plan.group_count} groups; at most {MAX_GROUPS}")
    return plan


def check_size(plan: QueryPlan, limits: Limits) -> None:
    """Refuse, before the data is read, a query releasing more noisy values (groups x noisy
    aggregates) than the policy allows: noise, post-processing and memory grow with that
    count and run after the charge, so only a limit known from the plan can bound them."""
    groups = plan.group_count if plan.group_by else 1
    cells = sum(len(m.cells) for m in plan.measurements)
    values = groups * cells
    what = f"{cells} noisy aggregate(s)" if cells == len(plan.measurements) else \
        f"{cells} noisy values, a histogram's bins counting one each"
    if values > limits.max_noisy_values:
        raise QueryTooLarge(
            f"query refused: it would release {values} noisy values ({groups} group(s) x {what}), "
            "over the policy's limit of "
            f"{limits.max_noisy_values} (limits.max_noisy_values); nothing was charged",
            values, limits.max_noisy_values)


def _bind_table(select: exp.Select, policy: Policy) -> tuple[TableSpec, set[str]]:
    source = select.args.get("from_")
    if source is None:
        raise QueryRefused("SELECT without FROM refused: name the private table, e.g. FROM people")
    table = source.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        what = table.this if isinstance(table, exp.Table) else table
        name = what.name if isinstance(what, exp.Anonymous) else (
            what.sql_name() if isinstance(what, exp.Func) else type(what).__name__)
        raise QueryRefused(f"table function or file reader {name} refused: FROM must name a table")
    if table.args.get("catalog") or (table.text("db") and table.text("db").lower() != "main"):
        raise QueryRefused(f"qualified table name {table.sql()} refused: name the table alone")
    for key in ("sample", "pivots", "joins", "laterals", "hints", "version", "when", "changes"):
        if table.args.get(key):
            raise QueryRefused(f"{key.upper()} on the table refused: not supported")
    check_args(table, "FROM")
    alias = table.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise QueryRefused(f"column aliases in FROM {table.name} AS {alias.sql(dialect='duckdb')} "
                           "refused: not supported; use the table's own column names")
    if alias is not None:
        check_args(alias, "FROM")
    name = table.name.lower()
    spec = policy.tables.get(name)
    if name in policy.public_tables:
        raise QueryRefused(f"table {name} is public: it is not answered on its own (read it "
                           "directly, it is not protected); a private table may JOIN it on its key")
    parent = policy.parent_tables.get(name)
    if parent is not None:
        raise QueryRefused(f"table {name} is a parent table: its rows are shared by several "
                           f"individuals, not one's, so it is not answered on its own; join it "
                           f"from {parent.child} (FROM {parent.child} [LEFT] JOIN {name} ON "
                           f"{parent.child}.{parent.foreign_key} = {name}.{parent.key})")
    if spec is None:
        if any(mark in table.name for mark in "/\\:.*"):
            raise QueryRefused(f"file path or URL {table.name!r} refused in FROM: files are never "
                               f"read; name a table ({', '.join(sorted(policy.tables))})")
        raise QueryRefused(f"unknown table {table.name!r} (tables: {', '.join(sorted(policy.tables))})")
    aliases = {name}
    if table.alias:
        aliases.add(table.alias.lower())
    return spec, aliases


def _bind_group(select: exp.Select, scope: _Scope) -> tuple[GroupKey, ...]:
    group = select.args.get("group")
    if group is None:
        return ()
    for option in ("grouping_sets", "cube", "rollup", "all", "totals"):
        if group.args.get(option):
            raise QueryRefused(f"GROUP BY {option.upper()} refused: list public columns instead")
    where = select.args["where"].this if select.args.get("where") is not None else None
    keys: list[GroupKey] = []
    for item in group.expressions:
        key = _group_key(_group_target(item, select, scope), scope, len(keys), where)
        if all(key.value != other.value for other in keys):
            keys.append(key)
    return tuple(keys)


_GROUPABLE = ("group on a bool column, a column with a domain, a bounded int or date column, a "
              "CASE with literal results, FLOOR(col / width) of a bounded int column, "
              "EXTRACT(part FROM col) or date_trunc('month', col) of a date or timestamp column")


def _group_target(item: exp.Expression, select: exp.Select, scope: _Scope) -> exp.Expression:
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


def _group_key(node: exp.Expression, scope: _Scope, index: int,
               where: exp.Expression | None) -> GroupKey:
    """The key `node` groups on, with its public values (pruned by a public WHERE condition
    on a grouped column, see `_pruned`)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column) and scope.column(node).type in TIME_TYPES:
        return _time_column_key(scope.column(node), scope, where)
    if isinstance(node, exp.Column):
        column = scope.column(node)
        values = column.group_values
        if values is None and column.type == "int" and column.bounded:
            lo, hi = math.ceil(column.bounds[0]), math.floor(column.bounds[1])
            if hi - lo + 1 > MAX_GROUPS:
                raise QueryRefused(f"GROUP BY {column.name} would produce {hi - lo + 1} groups; "
                                   f"at most {MAX_GROUPS}")
            values = tuple(range(lo, hi + 1))
        if values is None:
            raise QueryRefused(f"GROUP BY {column.name} refused: the column has no public domain in "
                               f"the policy ({_GROUPABLE})")
        values = _pruned(values, column, where, scope)
        return GroupKey(column.name, column.name, column.type, values,
                        exp.column(column.name, quoted=True), (column,))
    label = node.sql(dialect="duckdb")
    if isinstance(node, exp.Case):
        kind, values = _case_values(node, scope)
    elif isinstance(node, exp.Floor):
        kind, values = _width_buckets(node, scope)
    elif isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)) or (
            isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.DATE):
        return _trunc_key(node, scope, index, where)
    elif node.find(exp.Extract, *_PART_NODES) and scope.scalar_type(node, "GROUP BY") == "int":
        kind, values = "int", _extract_values(node, scope, where)
    elif isinstance(node, exp.Div):
        raise QueryRefused(f"GROUP BY {short(node)} refused: `/` divides exactly; write "
                           f"FLOOR({short(node)}) for width buckets")
    else:
        raise QueryRefused(f"GROUP BY {short(node)} refused: {_GROUPABLE}")
    checked = scope.scalar_type(node, "GROUP BY")
    if isinstance(node, exp.Case) and checked not in (kind, "null"):
        raise QueryRefused(f"GROUP BY {short(node)} refused: its results must be literals of one type")
    columns = tuple(dict.fromkeys(scope.column(c) for c in node.find_all(exp.Column)))
    return GroupKey(f"__k{index}", label, kind, values, scope.rewrite_scalar(node), columns)


_PART_NODES = (exp.Year, exp.Quarter, exp.Month, exp.Day, exp.DayOfMonth, exp.DayOfWeek,
               exp.DayOfWeekIso, exp.DayOfYear, exp.Week, exp.WeekOfYear, exp.Hour, exp.Minute,
               exp.Second)


def _declared(column: ColumnSpec, scope: _Scope, what: str) -> tuple[dt.datetime, dt.datetime]:
    """A date or timestamp column's declared bounds, or a refusal saying to declare them."""
    if column.span is None:
        raise QueryRefused(f"{what} refused: its values follow from the bounds of "
                           f"{scope.table.name}.{column.name}, which the policy does not give; "
                           f"declare lower and upper for {scope.table.name}.{column.name}")
    return column.span


def _time_column_key(column: ColumnSpec, scope: _Scope, where: exp.Expression | None) -> GroupKey:
    """GROUP BY a date column: every day in its bounds (narrowed by WHERE), as dates."""
    if column.type != "date":
        raise QueryRefused(f"GROUP BY {column.name} refused: a timestamp has too many values to "
                           f"group on; group on date_trunc('day', {column.name}), "
                           f"CAST({column.name} AS DATE) or EXTRACT(hour FROM {column.name})")
    _declared(column, scope, f"GROUP BY {column.name}")
    first, last = _narrowed(column, where)
    days = periods(first, last, "DAY", MAX_GROUPS)
    values = _pruned(tuple(day.date() for day in days), column, where, scope)
    return GroupKey(column.name, column.name, "date", values, scope.rewrite_scalar(
        exp.column(column.name)), (column,))


def _trunc_key(node: exp.Expression, scope: _Scope, index: int,
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
    if isinstance(node, exp.Cast) or (operand == "date" and unit != "HOUR"):
        # DuckDB's date_trunc of a date is a timestamp: keys that are days are shown as dates.
        if not isinstance(node, exp.Cast):
            value = exp.TryCast(this=value, to=exp.DataType.build("DATE"))
        return GroupKey(f"__k{index}", label, "date", tuple(s.date() for s in starts), value, columns)
    return GroupKey(f"__k{index}", label, "timestamp", tuple(starts), value, columns)


def _extract_values(node: exp.Expression, scope: _Scope, where: exp.Expression | None) -> tuple:
    """GROUP BY an integer expression over EXTRACT (e.g. EXTRACT(month FROM day)): every whole
    number in its range, a year's from the bounds of the column (narrowed by WHERE). A part
    of a day of a column whose narrowed bounds span at most a year has the values it takes on
    those days (WHERE day BETWEEN March and May: months 3 to 5)."""
    inner = node.expression if isinstance(node, exp.Extract) else node.this
    if isinstance(inner, exp.Column) and scope.column(inner).type in TIME_TYPES:
        first, last = _narrowed(scope.column(inner), where)
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


def _key_range(node: exp.Column, scope: _Scope, where: exp.Expression | None, what: str) -> Range:
    """The range of a column inside a group key: a date or timestamp column's declared bounds
    narrowed by WHERE; a number's bounds."""
    column = scope.column(node)
    if column.type not in TIME_TYPES:
        if column.type == "bool":
            return 0.0, 1.0
        if not column.numeric or not column.bounded:
            raise QueryRefused(f"GROUP BY {what} refused: declare lower and upper for "
                               f"{scope.table.name}.{column.name}")
        lo, hi = column.bounds
        return float(lo), float(hi)
    _declared(column, scope, f"GROUP BY {what}")
    first, last = _narrowed(column, where)
    return seconds(first), seconds(last)


def _narrowed(column: ColumnSpec, where: exp.Expression | None) -> tuple[dt.datetime, dt.datetime]:
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
    if column.type == "date":  # a date compares as its midnight: the days within the interval
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
            and node.this.is_string and node.args["to"].this in _TIME_CASTS:
        return time_literal(node.this.this, _TIME_CASTS[node.args["to"].this])
    return None


_TIME_CASTS = {exp.DataType.Type.DATE: "date", exp.DataType.Type.TIMESTAMP: "timestamp",
               exp.DataType.Type.TIMESTAMPNTZ: "timestamp"}


def _case_values(node: exp.Case, scope: _Scope) -> tuple[str, tuple]:
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
        elif isinstance(result, exp.Literal) and scope.scalar_type(result, "GROUP BY") == "int":
            value = int_literal(result, "CASE result")
        else:
            raise QueryRefused(f"GROUP BY {short(node)} refused: each CASE result must be a text, "
                               f"whole number or boolean literal, not {short(result)}, so that "
                               "the groups follow from the query")
        if value not in values:
            values.append(value)
    kinds = {"bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "str" for v in values}
    if len(kinds) != 1:
        raise QueryRefused(f"GROUP BY {short(node)} refused: its results must be literals of one type")
    return kinds.pop(), tuple(values)


def _width_buckets(node: exp.Floor, scope: _Scope) -> tuple[str, tuple]:
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
    if size <= 0 or spec.type != "int" or not spec.bounded:
        raise QueryRefused(f"GROUP BY {short(node)} refused: a width bucket needs a bounded int "
                           "column and a positive width")
    lo, hi = math.floor(spec.bounds[0] / size), math.floor(spec.bounds[1] / size)
    if hi - lo + 1 > MAX_GROUPS:
        raise QueryRefused(f"GROUP BY {short(node)} would produce {hi - lo + 1} groups; at most {MAX_GROUPS}")
    return "int", tuple(range(lo, hi + 1))


def _pruned(values: tuple, column: ColumnSpec, where: exp.Expression | None, scope: _Scope) -> tuple:
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


def _holds(term: exp.Expression, column: ColumnSpec, value, scope: _Scope) -> bool:
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
                return node.this if column.type == "str" else None
            return numeric_literal(node) if column.type == "int" else None
        if isinstance(node, exp.Boolean) and column.type == "bool":
            return bool(node.this)
        return None

    if column.type == "bool":
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
        if literal is None or (kind not in (exp.EQ, exp.NEQ) and column.type != "int"):
            return True
        return _COMPARE[kind](value, literal)
    if isinstance(term, exp.In) and is_column(term.this) and not term.args.get("query"):
        literals = [constant(e) for e in term.expressions]
        return any(v is None for v in literals) or value in literals
    if isinstance(term, exp.Between) and is_column(term.this) and column.type == "int":
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


def _bind_outputs(select: exp.Select, post: _PostScope) -> list[OutputColumn]:
    outputs: list[OutputColumn] = []
    names: set[str] = set()
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star):
            raise QueryRefused("SELECT * refused: select aggregates such as COUNT(*) or SUM(col)")
        node = item.this if isinstance(item, exp.Alias) else item
        name = item.alias if isinstance(item, exp.Alias) else _display_name(node)
        post.requested.clear()
        post.bound.clear()
        expression = post.rewrite(node, "SELECT", {})
        aggregate = _single_aggregate(node)
        # One aggregate's measurements in the order it asked for them, which its interval
        # reads them in (AVG: SUM, COUNT); an expression's in the order they appear.
        used = tuple(dict.fromkeys(post.requested)) if aggregate is not None \
            else _measurements_in(expression, post)
        unique = name
        suffix = 2
        while unique.lower() in names:
            unique = f"{name}_{suffix}"
            suffix += 1
        names.add(unique.lower())
        # The operand the aggregate bound (with bounds when it needs them), not whichever its
        # shared measurements were first made with (COUNT(age) before AVG(age) has none).
        operand = post.bound[-1] if aggregate is not None and post.bound else None
        outputs.append(OutputColumn(unique, expression, aggregate, used, operand))
    return outputs


def _display_name(node: exp.Expression) -> str:
    """An output's name as the query wrote it (`SELECT Region` gives `Region`)."""
    if isinstance(node, exp.Column):
        return node.name
    return node.sql(dialect="duckdb")


def _single_aggregate(node: exp.Expression) -> Aggregate | None:
    """The aggregate when the output is exactly one aggregate call, else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Filter):
        node = node.this
    call = _within_group(node) if isinstance(node, exp.WithinGroup) else node
    if not isinstance(call, exp.AggFunc):
        return None
    aggregate = aggregate_of(call)
    return None if aggregate is None else aggregate.for_call(call)


def _measurements_in(expression: exp.Expression, post: _PostScope) -> tuple[str, ...]:
    """The measurements an expression reads: by name, or through a quantile read from a
    histogram's cells (`MEDIAN(age) + 1`)."""
    names = {m.name for m in post.measurements.values()}
    found = []
    for col in expression.find_all(exp.Column):
        read = parse_value_column(col.name)
        name = read[0] if read is not None else col.name
        if name in names:
            found.append(name)
    return tuple(dict.fromkeys(found))


def _bind_order(select: exp.Select, post: _PostScope, aliases: dict[str, OutputColumn],
                n_outputs: int) -> tuple[exp.Ordered, ...]:
    order = select.args.get("order")
    if order is None:
        return ()
    check_args(order, "ORDER BY")
    items = []
    for ordered in order.expressions:
        if not isinstance(ordered, exp.Ordered):
            raise QueryRefused(f"ORDER BY {short(ordered)} refused: not supported")
        check_args(ordered, "ORDER BY")
        key = ordered.this
        if isinstance(key, exp.Literal) and not key.is_string:
            position = int_literal(key, "ORDER BY position")
            if not 1 <= position <= n_outputs:
                raise QueryRefused(f"ORDER BY {position} refused: positions run from 1 to {n_outputs}")
            rewritten = list(aliases.values())[position - 1].expression.copy()
        else:
            rewritten = post.rewrite(key, "ORDER BY", aliases)
        items.append(exp.Ordered(this=rewritten, desc=bool(ordered.args.get("desc")),
                                 nulls_first=bool(ordered.args.get("nulls_first"))))
    return tuple(items)


def _bind_count(clause: exp.Expression | None, what: str) -> int | None:
    if clause is None:
        return None
    if isinstance(clause, exp.Fetch):
        raise QueryRefused("FETCH refused: not supported; write LIMIT n instead")
    if isinstance(clause, exp.Limit):
        options = clause.args.get("limit_options")
        if options is not None and options.args.get("percent"):
            raise QueryRefused(f"{what} with a percentage refused: not supported; write "
                               "LIMIT n with a whole number of rows")
        if options is not None and options.args.get("with_ties"):
            raise QueryRefused(f"{what} ... WITH TIES refused: not supported; write LIMIT n")
    if isinstance(clause, (exp.Limit, exp.Offset)):
        check_args(clause, what)
    value = clause.expression if isinstance(clause, (exp.Limit, exp.Offset)) else clause
    if not isinstance(value, exp.Literal) or value.is_string:
        raise QueryRefused(f"{what} refused: expected a whole number literal")
    number = int_literal(value, what)
    if not 0 <= number <= MAX_LIMIT:
        raise QueryRefused(f"{what} {number} refused: expected 0 to {MAX_LIMIT}")
    return number


class _Scope:
    """Name resolution and type checking for row-level (pre-aggregation) expressions."""

    def __init__(self, table: TableSpec, aliases: set[str], data_columns: frozenset[str] = frozenset(),
                 join: Join | None = None, joined_aliases: set[str] | None = None) -> None:
        self.table = table
        self.aliases = aliases
        self.data_columns = data_columns
        self.join = join
        self.joined_aliases = joined_aliases or set()

    def refers_to(self, node: exp.Expression, column: ColumnSpec) -> bool:
        """Whether `node` names the policy column `column` (of the private table or, joined, of
        the joined one: columns of one name in two tables are different columns)."""
        if not isinstance(node, exp.Column):
            return False
        try:
            return self.column(node) == column
        except QueryRefused:
            return False

    def has_column(self, node: exp.Column) -> bool:
        """Whether `node` names a policy column of the private or the joined table."""
        name = node.name.lower()
        return name in self.table.columns or (self.join is not None and name in self.join.other.columns)

    def spec_of(self, node: exp.Column) -> ColumnSpec | None:
        """The policy column `node` names, or None (an output alias, an unknown name)."""
        try:
            return self.column(node)
        except QueryRefused:
            return None

    def column(self, node: exp.Expression) -> ColumnSpec:
        if not isinstance(node, exp.Column):
            raise QueryRefused(
                f"{node.sql(dialect='duckdb')} refused here: expected a column name"
            )
        self._check_qualifier(node)
        name = node.name.lower()
        if self.join is not None and self._is_joined(node):
            other = self.join.other
            if isinstance(other, TableSpec) and name == other.privacy_unit:
                raise QueryRefused(f"column {node.sql(dialect='duckdb')} is the privacy unit of "
                                   f"{other.name}: it may only appear as COUNT(DISTINCT "
                                   f"{self.table.name}.{name})")
            if name not in other.columns:
                raise QueryRefused(f"unknown column {node.name!r} in table {other.name} "
                                   f"(columns: {', '.join(sorted(other.columns))})")
            return joined_column(other, name)
        if name == self.table.privacy_unit:
            raise QueryRefused(
                f"column {node.name} is the privacy unit: it may only appear as "
                f"COUNT(DISTINCT {node.name})"
            )
        spec = self.table.columns.get(name)
        if spec is None and name in self.data_columns:
            raise QueryRefused(
                f"column {node.name!r} exists in table {self.table.name} but is not in the policy; "
                f"policy columns: {', '.join(sorted(self.table.columns))}"
            )
        if spec is None:
            raise QueryRefused(
                f"unknown column {node.name!r} in table {self.table.name} "
                f"(columns: {', '.join(sorted(self.table.columns))})"
            )
        return spec

    def _check_qualifier(self, node: exp.Column) -> None:
        if node.args.get("catalog") or node.args.get("db"):
            raise QueryRefused(f"qualified column {node.sql()} refused: use table.column at most")
        if node.table and node.table.lower() not in self.aliases | self.joined_aliases:
            raise QueryRefused(f"unknown table qualifier {node.table!r} in {node.sql()}")

    def _is_joined(self, node: exp.Column) -> bool:
        """Whether a column reference names the joined table's column: qualified by its
        name or alias, or unqualified and not a column of the private table (a name both tables
        have must be qualified)."""
        if self.join is None:
            return False
        name, other = node.name.lower(), self.join.other
        if node.table:
            return node.table.lower() in self.joined_aliases
        in_private = name in self.table.columns or name == self.table.privacy_unit
        if in_private and name in other.columns:
            raise QueryRefused(f"column {node.name} is in both {self.table.name} and {other.name}: "
                               f"write {self.table.name}.{name} or {other.name}.{name}")
        return name in other.columns

    def is_unit(self, node: exp.Expression) -> bool:
        if not isinstance(node, exp.Column) or self.table.privacy_unit is None:
            return False
        self._check_qualifier(node)
        if self._is_joined(node):
            return False
        return node.name.lower() == self.table.privacy_unit

    def scalar_type(self, node: exp.Expression, where: str) -> str:
        """Type-check a row-level expression; return 'int', 'float', 'str', 'bool' or 'null'."""
        if isinstance(node, exp.AggFunc):
            raise QueryRefused(f"aggregate {node.sql(dialect='duckdb')} refused in {where}: "
                               "filter groups on aggregates with HAVING")
        return type_of(node, where, self._leaf_type, self.scalar_type)

    def _leaf_type(self, node: exp.Expression, where: str) -> str | None:
        if isinstance(node, exp.Column):
            if node.is_star:
                raise QueryRefused(f"* refused in {where}")
            return self.column(node).type
        return None

    def rewrite_scalar(self, node: exp.Expression) -> exp.Expression:
        """Copy a checked expression into the form executed: plain quoted names, fractional
        literals and arithmetic as DOUBLE, casts as TRY_CAST (see `_harden`), so that no
        overflow, decimal precision or bad cast can raise an error whose message or
        occurrence depends on the data."""
        return harden(self._bind_names(node.copy()))

    def _bind_names(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            column = self.column(node)
            if column.type in TIME_TYPES:
                return _guarded(column)
            return exp.column(column.name, quoted=True)
        if isinstance(node, exp.Literal) and not node.is_string and not _is_round_digits(node) \
                and not node.this.replace("_", "").isdigit():
            # DuckDB reads 1.5 as a DECIMAL, whose casts and arithmetic can overflow.
            return as_double(node)
        for key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                node.set(key, self._bind_names(child))
            elif isinstance(child, list):
                node.set(key, [self._bind_names(c) if isinstance(c, exp.Expression) else c
                               for c in child])
        return node


class _PostScope:
    """Expressions evaluated after noise: aggregates, group keys, literals and arithmetic."""

    def __init__(self, scope: _Scope, group_by: tuple[GroupKey, ...], quantile_bins: int) -> None:
        self.scope = scope
        self.group_by = group_by
        self.quantile_bins = quantile_bins
        self.measurements: dict[tuple[Measured, str | None], Measurement] = {}
        self.operands: dict[tuple[str, bool], Operand] = {}
        self.requested: list[str] = []  # measurements asked for, in order, by the output bound now
        self.bound: list[Operand] = []  # operands bound, in order, by the output bound now

    @property
    def table(self) -> TableSpec:
        return self.scope.table

    def is_unit(self, node: exp.Expression) -> bool:
        return self.scope.is_unit(node)

    def measurement(self, kind: Measured, operand: Operand | None) -> exp.Column:
        key = (kind, operand.name if operand else None)
        if key not in self.measurements:
            self.measurements[key] = Measurement(kind, operand, f"__m{len(self.measurements)}")
        self.requested.append(self.measurements[key].name)
        return exp.column(self.measurements[key].name, quoted=True)

    def rewrite(self, node: exp.Expression, where: str,
                aliases: dict[str, OutputColumn]) -> exp.Expression:
        """Check `node` and rewrite it over group keys and noisy measurement columns.

        The rewritten expression is type-checked like a row-level one (measurements are
        numbers, group keys have their column's type) and hardened, so evaluating it on
        noisy values can neither fail nor overflow."""
        rewritten = self._rewrite(node, where, aliases)
        type_of(rewritten, where, self._leaf_type, self._type)
        return harden(rewritten)

    def _type(self, node: exp.Expression, where: str) -> str:
        return type_of(node, where, self._leaf_type, self._type)

    def _leaf_type(self, node: exp.Expression, where: str) -> str | None:
        if not isinstance(node, exp.Column):
            return None
        key = next((col for col in self.group_by if col.name == node.name), None)
        return key.type if key is not None else "float"

    def _rewrite(self, node: exp.Expression, where: str,
                 aliases: dict[str, OutputColumn]) -> exp.Expression:
        if isinstance(node, exp.AggFunc):
            return self._aggregate(node, where)
        if isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc):
            return self._aggregate(_filtered(node), where)
        if isinstance(node, exp.WithinGroup):
            return self._aggregate(_within_group(node), where)
        key = self._key_of(node)
        if key is not None:
            return exp.column(key.name, quoted=True)
        if isinstance(node, exp.Column):
            if node.is_star:
                raise QueryRefused(f"* refused in {where}")
            name = node.name.lower()
            if not node.table and name in aliases and not self._is_group_key(name):
                return aliases[name].expression.copy()
            if self.scope.is_unit(node):
                raise QueryRefused(
                    f"column {node.name} is the privacy unit: it may only appear as "
                    f"COUNT(DISTINCT {node.name})"
                )
            spec = self.scope.column(node)
            if not self._is_group_key(spec.name):
                raise QueryRefused(
                    f"column {node.name} in {where} refused: a column outside an aggregate must "
                    "be in GROUP BY (and have a public domain)"
                )
            return exp.column(spec.name, quoted=True)
        if isinstance(node, exp.Interval):
            raise QueryRefused(f"INTERVAL refused in {where}: date arithmetic is not supported; use "
                               "EXTRACT(part FROM key), date_trunc('unit', key) or compare a date "
                               "key with DATE '...' literals")
        type_of(node, where, lambda n, w: "float" if isinstance(n, (exp.AggFunc, exp.Column))
                 else None, lambda n, w: "float", shallow=True)
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            node = exp.TryCast(this=node.this, to=node.args["to"])
        rewritten = node.copy()
        for child_key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                rewritten.set(child_key, self._argument(child, where, aliases))
            elif isinstance(child, list):
                rewritten.set(child_key, [
                    self._argument(c, where, aliases) if isinstance(c, exp.Expression) else c
                    for c in child
                ])
        return rewritten

    def _argument(self, node: exp.Expression, where: str,
                  aliases: dict[str, OutputColumn]) -> exp.Expression:
        """An argument of an operator or function after noise: a part name (EXTRACT's `month`)
        as written, a date or timestamp key guarded by the range of its public values (the form
        on which the gate accepts date functions, §17), anything else rewritten."""
        if isinstance(node, exp.Var):
            return node.copy()
        rewritten = self._rewrite(node, where, aliases)
        key = next((k for k in self.group_by if isinstance(rewritten, exp.Column)
                    and k.name == rewritten.name and k.type in TIME_TYPES and k.keys), None)
        if key is None:
            return rewritten
        return _guard(key.name, key.type, min(key.keys), max(key.keys))

    def _is_group_key(self, name: str) -> bool:
        return any(col.name == name for col in self.group_by)

    def _key_of(self, node: exp.Expression) -> GroupKey | None:
        """The expression GROUP BY key that `node` repeats (as SQL text), if any."""
        if isinstance(node, (exp.Column, exp.Literal, exp.AggFunc)):
            return None
        inner = node
        while isinstance(inner, exp.Paren):
            inner = inner.this
        text = inner.sql(dialect="duckdb")
        return next((key for key in self.group_by if key.name != key.label and key.label == text), None)

    def _aggregate(self, node: exp.AggFunc, where: str) -> exp.Expression:
        aggregate = aggregate_of(node)
        if aggregate is None:
            raise QueryRefused(
                f"aggregate {node.sql_name()} refused in {where}: supported aggregates are "
                f"{supported()}"
            )
        return aggregate.bind(node, self)

    def operand(self, node: exp.Expr, arg: exp.Expression, numeric: bool) -> Operand:
        registered = aggregate_of(node) if isinstance(node, exp.AggFunc) else None
        call = registered.name if registered is not None else node.key.upper()
        if isinstance(arg, exp.Distinct):
            raise QueryRefused(f"{node.sql(dialect='duckdb')} refused: DISTINCT is supported only "
                               "as COUNT(DISTINCT <privacy unit>)")
        if node.args.get("expressions"):
            raise QueryRefused(f"{node.sql(dialect='duckdb')} refused: {call} takes one argument")
        kind = self.scope.scalar_type(arg, f"the argument of {call}")
        columns = tuple(dict.fromkeys(self.scope.column(c) for c in arg.find_all(exp.Column)))
        bare = arg if isinstance(arg, exp.Column) else None
        name = columns[0].name if bare is not None else arg.sql(dialect="duckdb")
        key = (name, numeric)
        if key in self.operands:
            self.bound.append(self.operands[key])
            return self.operands[key]
        value = self.scope.rewrite_scalar(arg)
        if not numeric:
            found = Operand(name, kind, value, columns)
        elif kind == "bool":
            found = Operand(name, "bool", value, columns, 0, 1)
        elif kind == "null":
            raise QueryRefused(f"{call}({name}) refused: the argument is always NULL")
        elif kind in TIME_TYPES:
            raise QueryRefused(
                f"{call}({name}) refused: a {kind} is not a number; aggregate a number taken "
                f"from it, e.g. {call}(EXTRACT(year FROM {name})) or {call}(EXTRACT(month FROM "
                f"{name})), or count the rows with COUNT({name})")
        elif kind not in ("int", "float"):
            what = "column" if bare is not None else "argument"
            raise QueryRefused(f"{call}({name}) refused: the {what} is {kind}, not numeric "
                               f"(a condition counts as 0/1; or COUNT({name}))")
        elif bare is not None:
            self._column_range(call, name, bare)
            lo, hi = columns[0].bounds
            found = Operand(name, kind, value, columns, lo, hi)
        else:
            found = self._expression_operand(call, name, arg, kind, value, columns)
        self.operands[key] = found
        self.bound.append(found)
        return found

    def _expression_operand(self, call: str, name: str, arg: exp.Expression, kind: str,
                            value: exp.Expression, columns: tuple[ColumnSpec, ...]) -> Operand:
        """A numeric row expression, bounded by interval arithmetic over the policy's column
        bounds; its value is clamped to those bounds, so they hold whatever the data holds."""
        found = value_range(arg, lambda column: self._column_range(call, name, column))
        if found is None:
            raise QueryRefused(f"{call}({name}) refused: the argument is always NULL")
        lo, hi = found
        if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) > MAX_LITERAL:
            raise QueryRefused(
                f"{call}({name}) refused: its values may reach [{lo:g}, {hi:g}] under the policy's "
                f"bounds, beyond the {MAX_LITERAL:.0e} an aggregate's argument may reach")
        if kind == "int":  # an integer value clamped to integers keeps the discrete Laplace exact
            lo, hi = math.floor(lo), math.ceil(hi)
        return Operand(name, kind, value, columns, lo, hi)

    def _column_range(self, call: str, name: str, node: exp.Column) -> Range:
        """A column's public range in an aggregate's argument (a bool is 0 or 1), or a refusal
        naming the column and what would be accepted instead."""
        column = self.scope.column(node)
        if column.type == "bool":
            return 0.0, 1.0
        if column.type in TIME_TYPES:  # inside EXTRACT(year FROM ...): its declared bounds
            first, last = _declared(column, self.scope, f"{call}({name})")
            return seconds(first), seconds(last)
        if not column.numeric:
            raise QueryRefused(f"{call}({name}) refused: column {column.name} is {column.type}, not "
                               f"numeric; COUNT({name}) counts its non-NULL values")
        if not column.bounded:
            alternative = f"; or GROUP BY {column.name}" if column.group_values is not None else ""
            raise QueryRefused(
                f"{call}({name}) refused: the policy gives no lower/upper bounds for "
                f"{column.name}, so its sensitivity is unbounded; declare them in the policy "
                f"or use COUNT({name}){alternative}")
        lo, hi = column.bounds
        return float(lo), float(hi)


def _guarded(column: ColumnSpec) -> exp.Expression:
    """A date or timestamp column as queries read it: NULL outside the range it is read in
    (its declared bounds, else years 1 to 9999), so every date function and cast is total on
    it, EXTRACT and date_trunc stay within the ranges the plan derives, and a value outside the
    bounds is never counted in a group (docs/theory.md §17)."""
    first, last = column.period
    return _guard(column.name, column.type, first, last)


def _guard(name: str, kind: str, first: dt.date, last: dt.date) -> exp.Expression:
    """`CASE WHEN name BETWEEN first AND last THEN name END` for a date or timestamp column."""
    def text(value: dt.date) -> str:
        if kind == "date":
            return (value.date() if isinstance(value, dt.datetime) else value).isoformat()
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    kind_sql = "DATE" if kind == "date" else "TIMESTAMP"
    raw = exp.column(name, quoted=True)
    inside = exp.Between(this=raw, low=exp.TryCast(this=exp.Literal.string(text(first)),
                                                   to=exp.DataType.build(kind_sql)),
                         high=exp.TryCast(this=exp.Literal.string(text(last)),
                                          to=exp.DataType.build(kind_sql)))
    return exp.Case(ifs=[exp.If(this=inside, true=raw.copy())])


def _filtered(node: exp.Filter) -> exp.AggFunc:
    """AGG(x) FILTER (WHERE c) as AGG(CASE WHEN c THEN x END), COUNT(*) counting 1 per row: the
    same value, with the condition part of the argument (so bound and type-checked with it)."""
    call = node.this.copy()
    condition = node.expression.this if isinstance(node.expression, exp.Where) else node.expression
    if isinstance(call.this, exp.Distinct):
        raise QueryRefused(f"{short(node)} refused: FILTER is not supported on COUNT(DISTINCT ...); "
                           "put the condition in WHERE")
    value = exp.Literal.number(1) if isinstance(call.this, exp.Star) else call.this
    call.set("this", exp.Case(ifs=[exp.If(this=condition.copy(), true=value.copy())]))
    return call


def _within_group(node: exp.WithinGroup) -> exp.AggFunc:
    """PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x) as QUANTILE_CONT(x, q), DuckDB's own
    reading of it; anything else with WITHIN GROUP is refused naming that form."""
    call, order = node.this, node.expression
    items = order.expressions if isinstance(order, exp.Order) else []
    if not isinstance(call, exp.PercentileCont) or call.args.get("expression") is not None \
            or len(items) != 1 or not isinstance(items[0], exp.Ordered) or items[0].args.get("desc"):
        raise QueryRefused(f"{short(node)} refused: WITHIN GROUP is supported as "
                           "PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY expr), or write QUANTILE_CONT(expr, q)")
    return exp.PercentileCont(this=items[0].this.copy(), expression=call.this.copy())


def _is_round_digits(node: exp.Expression) -> bool:
    return isinstance(node.parent, exp.Round) and node.arg_key == "decimals"


def time_points(plan: QueryPlan, column: str, first: int, last: int) -> tuple[int, ...] | None:
    """The time points the released values of `plan` read, when each value reads one: the keys
    of a GROUP BY on the time column itself (pruned by WHERE), or the one value a top-level
    WHERE term pins it to. None otherwise: an answer over several time points together, or one
    joined to another table (not covered by a chain)."""
    if plan.join is not None:
        return None
    for key in plan.group_by:
        if key.columns and key.columns[0].name == column and key.name == column:
            return tuple(int(v) for v in key.keys)
    try:
        kept = _pruned(tuple(range(first, last + 1)), plan.table.columns[column], plan.where,
                       _Scope(plan.table, {plan.table.name}))
    except QueryRefused:
        return None
    return kept if len(kept) == 1 else None


def series_points(plan: QueryPlan, column: str, first: int, last: int) -> SeriesPoints | None:
    """The time points an answer whose values read several of them together may read: those a
    WHERE leaves possible (§11's pruning, from the text alone; every point when it prunes
    none). None for an answer joined to another table (not covered by a chain)."""
    if plan.join is not None:
        return None
    try:
        kept = _pruned(tuple(range(first, last + 1)), plan.table.columns[column], plan.where,
                       _Scope(plan.table, {plan.table.name}))
    except QueryRefused:
        return None
    return SeriesPoints(kept)
