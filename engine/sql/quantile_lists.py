"""QUANTILE_CONT(x, [q1, q2, ...]) and PERCENTILE_CONT([q1, ...]) WITHIN GROUP (ORDER BY x) as
one answer column per q: each is QUANTILE_CONT(x, q), and all read the one noisy histogram of x,
so the list costs what one quantile costs (docs/theory.md §26.2)."""

from __future__ import annotations

from sqlglot import exp

from ..errors import QueryRefused
from .scope import within_group

MAX_QUANTILES = 100  # qs in one list: each is an answer column


def expand_quantile_lists(select: exp.Select) -> exp.Select:
    """`select` with each SELECT item that is a quantile of a list of qs written as one item per
    q (named `QUANTILE_CONT(x, q)`, or `alias[q]` under an alias), and the ORDER BY and GROUP BY
    positions after it moved along (a position naming the list orders by each of its columns
    in turn). A list anywhere else stays as written, for binding to refuse."""
    items: list[exp.Expr] = []
    moved: dict[int, list[int]] = {}  # old 1-based position -> its new positions
    for position, item in enumerate(select.expressions, start=1):
        expanded = _expanded(item)
        moved[position] = list(range(len(items) + 1, len(items) + 1 + len(expanded)))
        items.extend(expanded)
    if len(items) == len(select.expressions):
        return select
    select = select.copy()
    select.set("expressions", items)
    order = select.args.get("order")
    if order is not None:
        order.set("expressions", [new for ordered in order.expressions
                                  for new in _moved_order(ordered, moved)])
    group = select.args.get("group")
    if group is not None:
        group.set("expressions", [_moved_position(key, moved) for key in group.expressions])
    return select


def _list_call(node: exp.Expr) -> tuple[exp.Expr, list[exp.Expr]] | None:
    """(x, [q...]) of QUANTILE_CONT(x, [q...]) or its WITHIN GROUP form, else None."""
    call: exp.Expr = node
    if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont) \
            and isinstance(node.this.this, exp.Array):
        call = within_group(node)
    if isinstance(call, exp.PercentileCont) and isinstance(call.args.get("expression"), exp.Array):
        return call.this, list(call.args["expression"].expressions)
    return None


def _expanded(item: exp.Expr) -> list[exp.Expr]:
    """The item, or one `QUANTILE_CONT(x, q)` item per q of a list."""
    alias = item.alias if isinstance(item, exp.Alias) else ""
    found = _list_call(item.this if isinstance(item, exp.Alias) else item)
    if found is None:
        return [item]
    value, qs = found
    if not qs or len(qs) > MAX_QUANTILES:
        raise QueryRefused(f"QUANTILE_CONT({value.sql(dialect='duckdb')}, [...]) refused: a list "
                           f"of 1 to {MAX_QUANTILES} qs in [0, 1] is accepted, got {len(qs)}",
                           count=len(qs), limit=MAX_QUANTILES)
    calls: list[exp.Expr] = [exp.PercentileCont(this=value.copy(), expression=q.copy()) for q in qs]
    if not alias:
        return calls
    return [exp.alias_(call, f"{alias}[{q.sql(dialect='duckdb')}]", quoted=True)
            for call, q in zip(calls, qs, strict=True)]


def _position(node: exp.Expression) -> int | None:
    return int(node.this) if isinstance(node, exp.Literal) and not node.is_string \
        and node.this.isdigit() else None


def _moved_order(ordered: exp.Ordered, moved: dict[int, list[int]]) -> list[exp.Ordered]:
    position = _position(ordered.this)
    if position is None or position not in moved:
        return [ordered]
    return [exp.Ordered(**{**ordered.args, "this": exp.Literal.number(new)})
            for new in moved[position]]


def _moved_position(key: exp.Expression, moved: dict[int, list[int]]) -> exp.Expression:
    position = _position(key)
    if position is None or position not in moved:
        return key
    return exp.Literal.number(moved[position][0])
