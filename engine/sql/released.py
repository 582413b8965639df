"""An outer query over a released table (docs/theory.md §29): a filter, order, limit or computed
columns of the rows of an aggregating CTE or FROM-subquery that does not group by the unit. That
is post-processing of what the inner query releases, so it is merged into the inner query as its
HAVING, ORDER BY, LIMIT and SELECT over the same noisy values, charged once. Text only."""

from __future__ import annotations

from sqlglot import exp

from ..errors import QueryRefused
from ..policy import Policy
from .nesting import per_unit_source


def merge_released(select: exp.Select, policy: Policy) -> exp.Select | None:
    """The one query equal to `select` reading the released rows of an aggregating CTE or
    FROM-subquery, or None when `select` is not of that form (or groups by a privacy unit)."""
    found = released_source(select)
    if found is None or per_unit_source(select, policy) is not None:
        return None
    inner, name, rest, what = found
    if any(item.find(exp.AggFunc) for item in select.expressions) or select.args.get("group") \
            or select.args.get("having"):
        return None  # an aggregate of released values (`over_released`, §33)
    for key in ("joins", "distinct", "qualify", "windows"):
        if select.args.get(key):
            raise QueryRefused(f"{key.upper()} over the released rows of {what} refused: "
                               "filter, order and compute columns of its rows")
    for key in ("order", "limit", "offset", "distinct"):
        if inner.args.get(key):
            raise QueryRefused(f"{key.upper()} in {what} refused: order and limit the released rows "
                               "in the outer query")
    outputs = {item.alias_or_name.lower(): (item.this if isinstance(item, exp.Alias) else item)
               for item in inner.expressions}

    def released(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.is_star:
            if node.table and node.table.lower() != name:
                raise QueryRefused(f"unknown table qualifier {node.table!r} in {node.sql()}")
            target = outputs.get(node.name.lower())
            if target is None:
                raise QueryRefused(f"column {node.name} is not a column of {what} (its columns: "
                                   f"{', '.join(outputs)})")
            atomic = isinstance(target, (exp.Column, exp.Func, exp.Literal, exp.Paren, exp.Boolean, exp.Null))
            return target.copy() if atomic else exp.paren(target.copy())
        copy = node.copy()
        for key, child in node.args.items():
            if isinstance(child, exp.Expression):
                copy.set(key, released(child))
            elif isinstance(child, list):
                copy.set(key, [released(c) if isinstance(c, exp.Expression) else c for c in child])
        return copy

    items: list[exp.Expr] = []
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star):
            items += [i.copy() for i in inner.expressions]
            continue
        node = item.this if isinstance(item, exp.Alias) else item
        items.append(exp.alias_(released(node), item.alias_or_name, quoted=True))
    merged = inner.copy()
    merged.set("expressions", items)
    where = select.args.get("where")
    if where is not None:
        condition = released(where.this)
        having = inner.args.get("having")
        merged.set("having", exp.Having(this=condition if having is None else
                                         exp.and_(having.this.copy(), condition)))
    if select.args.get("order") is not None:
        merged.set("order", exp.Order(expressions=[released(o) for o in select.args["order"].expressions]))
    for key in ("limit", "offset"):
        if select.args.get(key) is not None:
            merged.set(key, select.args[key].copy())
    merged.set("with_", exp.With(expressions=[c.copy() for c in rest]) if rest else None)
    return merged


def over_released(select: exp.Select, policy: Policy) -> bool:
    """Whether `select` aggregates the rows of an aggregating CTE or FROM-subquery that does not
    group by a privacy unit (a released table): engine/sql/over_released.py binds it (§33)."""
    return released_source(select) is not None and per_unit_source(select, policy) is None \
        and any(item.find(exp.AggFunc) for item in select.expressions)


def released_source(select: exp.Select
                     ) -> tuple[exp.Select, str, list[exp.Expression], str] | None:
    """The aggregating body `select` reads in FROM (a subquery, or a CTE by name), the name it is
    read by, the other CTEs and how refusals name it; None otherwise."""
    source = select.args.get("from_")
    if source is None:
        return None
    with_ = select.args.get("with_")
    ctes = list(with_.expressions) if with_ is not None else []
    table = source.this
    if isinstance(table, exp.Subquery):
        body, name, what = table.this, (table.alias or "").lower(), "subquery in FROM"
        rest = ctes
    elif isinstance(table, exp.Table) and not table.args.get("db"):
        match = [c for c in ctes if c.alias_or_name.lower() == table.name.lower()]
        if len(match) != 1:
            return None
        body, what = match[0].this, f"CTE {match[0].alias_or_name}"
        name = (table.alias or table.name).lower()
        rest = [c for c in ctes if c is not match[0]]
        if any(other.find(exp.Table) is not None and any(
                t.name.lower() == table.name.lower() for t in other.find_all(exp.Table)) for other in rest):
            return None
    else:
        return None
    while isinstance(body, exp.Subquery):
        body = body.this
    if not isinstance(body, exp.Select) or not (
            body.args.get("group") or any(i.find(exp.AggFunc) for i in body.expressions)):
        return None
    return body, name, rest, what
