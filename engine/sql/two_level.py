"""Binding a two-level query (docs/theory.md §29): a CTE or FROM-subquery grouped by the privacy
unit (and public keys) whose rows an outer query aggregates, as GoogleSQL pre-aggregates per user.

The inner query is bound against the private table (read through its bounded copy) into a
`PerUnit`; the outer query is bound as an ordinary query on a table of the inner's columns, each
aggregate a column bounded by what its operand's bounds and the row bound allow, whose unit
gives at most min(m, product of the inner keys' sizes) rows. Everything here reads the query
text and the policy only."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import replace

from sqlglot import exp

from ..aggregates import Operand
from ..aggregates.per_unit import Inner, PerUnit, PerUnitKey, PerUnitValue, derived_bounds
from ..errors import QueryRefused
from ..plan import GroupKey, QueryPlan
from ..policy import ColumnSpec, Policy, TableSpec
from ..sql_types import TIME_TYPES, SqlType
from .calendar import normalize_times
from .domain_literals import check_domain_literals, coerce_literals
from .flatten import flatten
from .join_tree import bind_joins
from .keys import bind_group
from .nesting import Nested, per_unit_source
from .scalars import short
from .scope import PostScope, Scope

Build = Callable[[exp.Select, Policy, str, Mapping[str, frozenset[str]] | None], QueryPlan]
_INNER: dict[type[exp.Expression], Inner] = {
    exp.Count: Inner.COUNT, exp.Sum: Inner.SUM, exp.Avg: Inner.AVG, exp.Min: Inner.MIN, exp.Max: Inner.MAX}
_SELECTABLE = ("its SELECT may list the privacy unit, its GROUP BY keys and COUNT, COUNT(DISTINCT "
               "expr), SUM, AVG, MIN or MAX of its rows, each named with AS")
_CLAUSES = {"distinct": "DISTINCT", "order": "ORDER BY", "limit": "LIMIT",
            "offset": "OFFSET", "joins": "JOIN", "qualify": "QUALIFY", "windows": "WINDOW"}
_INSTEAD = {"joins": "a per-unit query reads one private table"}


def bind_two_level(select: exp.Select, policy: Policy, sql: str,
                   data_columns: Mapping[str, frozenset[str]] | None, build: Build) -> QueryPlan:
    """The plan of a query whose FROM reads a per-unit CTE or subquery (`per_unit_source`):
    the outer query's plan on the inner's rows, with `inner` the per-unit query."""
    nested = per_unit_source(select, policy)
    assert nested is not None
    per_unit, columns, unit = _bind_inner(nested, policy, data_columns or {})
    spec = TableSpec(nested.name, unit, per_unit.rows_per_unit, columns)
    outer_policy = replace(policy, tables={nested.name: spec}, public_tables={}, parent_tables={})
    outer = flatten(nested.outer, outer_policy)
    if per_unit_source(outer, outer_policy) is not None:
        raise QueryRefused(f"{nested.what} is read by another query grouped by the unit: one "
                           "per-unit level is supported")
    _check_float_keys(outer, per_unit, nested)
    plan = build(outer, outer_policy, sql, None)
    return replace(plan, table=per_unit.table, inner=per_unit,
                   flattened_sql="" if outer is nested.outer else outer.sql(dialect="duckdb"))


def _bind_inner(nested: Nested, policy: Policy, data_columns: Mapping[str, frozenset[str]]
                ) -> tuple[PerUnit, dict[str, ColumnSpec], str | None]:
    """The per-unit query bound to its private table, the outer query's columns (one per inner
    key and aggregate it selects) and the name it selects the unit by (None: not selected)."""
    what = nested.what
    inner = flatten(nested.inner, policy)
    normalized = normalize_times(inner)
    assert isinstance(normalized, exp.Select)
    inner = normalized
    for key, clause in _CLAUSES.items():
        if inner.args.get(key):
            instead = _INSTEAD.get(key, "a per-unit query groups one private table's rows by "
                                        "the unit and its keys")
            raise QueryRefused(f"{clause} in {what} refused: {instead}")
    table, aliases = _table(inner, policy, what)
    scope = Scope(table, aliases, data_columns.get(table.name, frozenset()))
    coerce_literals(inner, scope.spec_of)
    _, where = bind_joins(inner, table, aliases, [], scope)
    group = inner.args["group"]
    others = [item for item in group.expressions if not scope.is_unit(_target(item, inner))]
    grouping = inner.copy()
    grouping.set("group", exp.Group(expressions=[o.copy() for o in others]) if others else None)
    keys = bind_group(grouping, scope)
    check_domain_literals(inner, scope.spec_of)
    post = PostScope(scope, keys, policy.limits.quantile_bins)
    names: dict[int, str] = {}  # a key's index -> the outer column it is selected as
    values: list[PerUnitValue] = []
    columns: dict[str, ColumnSpec] = {}
    unit: str | None = None
    for item in inner.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        while isinstance(node, exp.Paren):
            node = node.this
        name = item.alias_or_name.lower()
        if name in columns or name == unit or (name == table.unit and not scope.is_unit(node)):
            raise QueryRefused(f"{what} names two columns {name}: give each its own name")
        if name.startswith("__"):
            raise QueryRefused(f"column name {name} in {what} refused: names starting with __ are "
                               "the engine's own")
        if isinstance(node, exp.Column) and node.is_star:
            raise QueryRefused(f"SELECT * in {what} refused: {_SELECTABLE}")
        if scope.is_unit(node):
            unit = name
        elif isinstance(node, (exp.AggFunc, exp.Filter)):
            assert isinstance(node, exp.Expression)
            if not isinstance(item, exp.Alias):
                raise QueryRefused(f"{short(node)} in {what} refused: name it, e.g. "
                                   f"{short(node)} AS n, to read it in the outer query")
            value = _value(node, name, post, table, what)
            values.append(value)
            columns[name] = ColumnSpec(name, value.type, value.lower, value.upper)
        else:
            index = _key_index(node, keys, scope)
            if index is None or index in names:
                raise QueryRefused(f"{short(node)} in {what} refused: {_SELECTABLE}")
            names[index] = name
            columns[name] = _key_column(name, keys[index])
    having = None
    if inner.args.get("having") is not None:
        named = {item.alias.lower(): item.this for item in inner.expressions
                 if isinstance(item, exp.Alias) and item.this.find(exp.AggFunc)}
        having, hidden = _having(inner.args["having"].this, keys, names, named, post, scope, what)
        values += hidden
    per_unit_keys = tuple(PerUnitKey(names.get(i, f"__k{i}"), k.value, k.keys) for i, k in enumerate(keys))
    return PerUnit(table, where, per_unit_keys, tuple(values), having), columns, unit


def _having(condition: exp.Expression, keys: tuple[GroupKey, ...], names: dict[int, str],
            named: dict[str, exp.Expression], post: PostScope, scope: Scope,
            what: str) -> tuple[exp.Expression, list[PerUnitValue]]:
    """The per-unit query's HAVING as a condition on its rows: each aggregate in it (or named by
    its SELECT alias, `named`) a per-unit value of its own (`__h<i>`, with its derived bounds),
    each key its column; type-checked and hardened. It keeps or drops a group on that group's
    own values, a unit's rows alone (§29)."""
    hidden: list[PerUnitValue] = []
    columns: dict[str, ColumnSpec] = {}

    def bound(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.AggFunc, exp.Filter)):
            value = _value(node, f"__h{len(hidden)}", post, scope.table, f"HAVING of {what}")
            hidden.append(value)
            columns[value.name] = ColumnSpec(value.name, value.type, value.lower, value.upper)
            return exp.column(value.name)
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in named \
                and not scope.has_column(node):
            return bound(named[node.name.lower()])
        if isinstance(node, exp.Column):
            index = _key_index(node, keys, scope)
            if index is None:
                raise QueryRefused(f"{short(node)} in the HAVING of {what} refused: it may read the "
                                   "query's GROUP BY keys (not the unit) and aggregates of its rows")
            name = names.get(index, f"__k{index}")
            columns[name] = _key_column(name, keys[index])
            return exp.column(name)
        copy = node.copy()
        for key, child in node.args.items():
            if isinstance(child, exp.Expression):
                copy.set(key, bound(child))
            elif isinstance(child, list):
                copy.set(key, [bound(c) if isinstance(c, exp.Expression) else c for c in child])
        return copy

    rewritten = bound(condition)
    rows = Scope(TableSpec("having", None, 1, columns), set())
    if rows.scalar_type(rewritten, "HAVING") not in (SqlType.BOOL, SqlType.NULL):
        raise QueryRefused(f"HAVING of {what} must be a condition (true/false), not a value")
    return rows.rewrite_scalar(rewritten), hidden


def _table(inner: exp.Select, policy: Policy, what: str) -> tuple[TableSpec, set[str]]:
    """The private table the per-unit query reads, and the names it is referred to by."""
    source = inner.args.get("from_")
    table = source.this if source is not None else None
    spec = policy.tables.get(table.name.lower()) if isinstance(table, exp.Table) \
        and isinstance(table.this, exp.Identifier) else None
    if not isinstance(table, exp.Table) or spec is None or spec.privacy_unit is None or spec.chain \
            or table.args.get("db") or table.args.get("catalog"):
        raise QueryRefused(f"{what} refused: a per-unit query reads one private table with a "
                           f"privacy unit of its own ({', '.join(sorted(policy.tables))})")
    aliases = {spec.name}
    if table.alias:
        aliases.add(table.alias.lower())
    return spec, aliases


def _target(item: exp.Expression, select: exp.Select) -> exp.Expression:
    """What a GROUP BY item of the inner query names (a position or alias: its SELECT item)."""
    outputs = select.expressions
    target = item
    if isinstance(item, exp.Literal) and not item.is_string and item.this.isdigit() \
            and 1 <= int(item.this) <= len(outputs):
        target = outputs[int(item.this) - 1]
    elif isinstance(item, exp.Column) and not item.table:
        named = [o for o in outputs if isinstance(o, exp.Alias) and o.alias.lower() == item.name.lower()]
        target = named[0] if len(named) == 1 else item
    return target.this if isinstance(target, exp.Alias) else target


def _value(node: exp.Expression, name: str, post: PostScope, table: TableSpec,
           what: str) -> PerUnitValue:
    """One aggregate of the per-unit query with the bounds every unit's value lies in."""
    kind = _INNER.get(type(node))
    distinct = node.this if isinstance(node.this, exp.Distinct) else None
    if kind == Inner.COUNT and distinct is not None and len(distinct.expressions) == 1:
        kind = Inner.COUNT_DISTINCT
    if kind is None or (distinct is not None and kind != Inner.COUNT_DISTINCT):
        raise QueryRefused(f"{short(node)} in {what} refused: {_SELECTABLE}")
    assert isinstance(node, exp.AggFunc)
    operand: Operand | None = None
    if kind == Inner.COUNT_DISTINCT:
        assert distinct is not None
        if post.is_unit(distinct.expressions[0]):
            raise QueryRefused(f"{short(node)} in {what} refused: it is 1 for every unit; count "
                               "the units with COUNT(*) in the outer query")
        operand = post.operand(node, distinct.expressions[0], numeric=False)
        kind_type = SqlType.INT
    elif kind == Inner.COUNT:
        if not isinstance(node.this, exp.Star) and not post.is_unit(node.this):
            operand = post.operand(node, node.this, numeric=False)
        kind_type = SqlType.INT
    else:
        operand = post.operand(node, node.this, numeric=True)
        integer = operand.type in (SqlType.INT, SqlType.BOOL) and kind != Inner.AVG
        kind_type = SqlType.INT if integer else SqlType.FLOAT
    lo, hi = derived_bounds(kind, operand, table.max_rows_per_unit)
    return PerUnitValue(name, kind, operand, kind_type, lo, hi)


def _key_index(node: exp.Expression, keys: tuple[GroupKey, ...], scope: Scope) -> int | None:
    """The inner GROUP BY key a SELECT item repeats, if any."""
    try:
        value = scope.rewrite_scalar(node)
    except QueryRefused:
        return None
    return next((i for i, k in enumerate(keys) if k.value == value
                 or (isinstance(node, exp.Column) and k.name == scope.column(node).name
                     and k.name == k.label)), None)


def _key_column(name: str, key: GroupKey) -> ColumnSpec:
    """The outer query's column of an inner key: its type and public values (a date's as its
    bounds, the days the outer query may group on)."""
    if key.type in TIME_TYPES:
        span = (_moment(min(key.keys)), _moment(max(key.keys))) if key.keys else None
        return ColumnSpec(name, key.type, span=span)
    if key.type == SqlType.BOOL:
        return ColumnSpec(name, key.type)
    if key.type in (SqlType.INT, SqlType.FLOAT) and key.keys:
        return ColumnSpec(name, key.type, min(key.keys), max(key.keys), domain=tuple(key.keys))
    return ColumnSpec(name, key.type, domain=tuple(key.keys))


def _moment(value: dt.date) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day)


def _check_float_keys(outer: exp.Select, per_unit: PerUnit, nested: Nested) -> None:
    """Refuse, naming it, an outer GROUP BY reading a float per-unit value (an AVG, or a SUM,
    MIN or MAX of a float column): it has no public set of values to group on."""
    group = outer.args.get("group")
    floats = {v.name: v for v in per_unit.values if v.type != SqlType.INT}
    for item in group.expressions if group is not None else ():
        for column in _target(item, outer).find_all(exp.Column):
            value = floats.get(column.name.lower())
            if value is not None:
                raise QueryRefused(f"GROUP BY {short(item)} refused: {value.name} is a per-unit "
                                   f"{value.kind} of float values in {nested.what}, with no public "
                                   "set of values to group on; group on an integer per-unit value "
                                   "(a COUNT, or a SUM, MIN or MAX of an int or bool column)")
