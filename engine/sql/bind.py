"""Bind a parsed SELECT to the policy as a QueryPlan (engine/plan.py): the table, WHERE, group
keys (keys.py), outputs, HAVING, ORDER BY and LIMIT, names resolved and type-checked in
scope.py; the size limit; the time points an answer reads."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from ...calibration.declared import SeriesPoints
from ..aggregates import Aggregate, aggregate_of, supported
from ..aggregates.quantile import parse_value_column
from ..errors import QueryRefused, QueryTooLarge
from ..plan import OutputColumn, QueryPlan
from ..policy import Limits, Policy, TableSpec
from .calendar import normalize_times
from .domain_literals import check_domain_literals, coerce_literals
from .join import join_sources
from .join_order import private_first
from .join_tree import bind_joins
from .keys import MAX_GROUPS, bind_group_rows
from .link_columns import check_link_columns
from .nesting import per_unit_source
from .over_released import bind_over_released
from .public_keys import PublicRows
from .quantile_lists import expand_quantile_lists
from .released import over_released
from .released_distinct import released_distinct
from .scalars import check_args, int_literal, short
from .scope import PostScope, Scope, within_group
from .shifted_columns import move_shifts
from .two_level import bind_two_level
from .unnest import bind_unnest, holds_unnest
from .where import pruned

MAX_LIMIT = 1_000_000_000
_SELECT_ARGS = {"expressions", "from_", "joins", "where", "group", "having", "order", "limit", "offset",
                "distinct"}


def build_plan(select: exp.Select, policy: Policy, sql: str,
               data_columns: Mapping[str, frozenset[str]] | None = None,
               public_rows: PublicRows | None = None) -> QueryPlan:
    """Validate the SELECT against the policy and return its plan. `data_columns` (each table's
    column names in the data) lets a refusal say a column exists but is not in the policy;
    `public_rows` reads a public table's distinct rows for a key set given by them (§32)."""
    if holds_unnest(select):
        return bind_unnest(select, policy, sql, data_columns, build_plan)
    if per_unit_source(select, policy) is not None:
        return bind_two_level(select, policy, sql, data_columns, build_plan)
    if over_released(select, policy):
        return bind_over_released(select, policy, sql, data_columns, build_plan)
    normalized = normalize_times(select)
    assert isinstance(normalized, exp.Select)
    select = expand_quantile_lists(normalized)
    for key, value in select.args.items():
        if key not in _SELECT_ARGS and value not in (None, [], False):
            raise QueryRefused(f"{key.upper()} clause refused: not supported")
    select = private_first(select, policy)
    table, aliases = _bind_table(select, policy)
    sources = join_sources(select, policy, table, aliases)
    scope = Scope(table, aliases, (data_columns or {}).get(table.name, frozenset()), sources)
    move_shifts(select, scope.spec_of)
    coerce_literals(select, scope.spec_of)
    check_link_columns(select, scope)
    join, where = bind_joins(select, table, aliases, sources, scope)
    group_by, key_rows = bind_group_rows(select, scope, public_rows)
    post = PostScope(scope, group_by, policy.limits.quantile_bins)
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
                     tuple(outputs), having, order, limit, offset, join=join,
                     distinct=released_distinct(select), key_rows=key_rows)
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
    schema = table.text("db").lower()
    if table.args.get("catalog") or (schema and schema not in ("main", policy.schema)):
        alone = "name the table alone" if policy.schema is None else \
            f"name the table alone or as {policy.schema}.{table.name} (the policy's schema)"
        raise QueryRefused(f"qualified table name {table.sql()} refused: {alone}")
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


def _bind_outputs(select: exp.Select, post: PostScope) -> list[OutputColumn]:
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
    call = within_group(node) if isinstance(node, exp.WithinGroup) else node
    if not isinstance(call, exp.AggFunc):
        return None
    aggregate = aggregate_of(call)
    return None if aggregate is None else aggregate.for_call(call)


def _measurements_in(expression: exp.Expression, post: PostScope) -> tuple[str, ...]:
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


def _bind_order(select: exp.Select, post: PostScope, aliases: dict[str, OutputColumn],
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
        kept = pruned(tuple(range(first, last + 1)), plan.table.columns[column], plan.where,
                       Scope(plan.table, {plan.table.name}))
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
        kept = pruned(tuple(range(first, last + 1)), plan.table.columns[column], plan.where,
                       Scope(plan.table, {plan.table.name}))
    except QueryRefused:
        return None
    return SeriesPoints(kept)
