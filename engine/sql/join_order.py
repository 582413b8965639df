"""A public table written first in FROM (`FROM catalogue c JOIN checkouts k ON ...`): the query
read with the first private table it joins in FROM's place and the public table in that join's.

With inner joins only, which table is written first changes no joined row: the joined rows are
those meeting every ON and WHERE term together, and engine/sql/join_tree.py builds the same
tree of edges from them whatever the order (docs/theory.md §30.7). A LEFT JOIN keeps the rows of
what is written before it, so a query with one keeps its order (and is refused as a query on a
public table is). Reads the query text and the policy only.
"""

from __future__ import annotations

from sqlglot import exp

from ..errors import QueryRefused
from ..policy import Policy


def private_first(select: exp.Select, policy: Policy) -> exp.Select:
    """`select` with the first private table it joins written first, when FROM names a public
    table and every join is inner or a comma; else `select` unchanged."""
    source = select.args.get("from_")
    joins = select.args.get("joins") or []
    first = source.this if source is not None else None
    if not joins or not isinstance(first, exp.Table) or first.name.lower() not in policy.public_tables:
        return select
    position = next((i for i, join in enumerate(joins) if isinstance(join.this, exp.Table)
                     and join.this.name.lower() in policy.tables), None)
    if position is None:
        return select
    if any(join.side or join.kind not in ("", "INNER") for join in joins):
        raise QueryRefused(f"table {first.name} is public and written first beside a join other "
                           "than JOIN ... ON or a comma: write the private table first (FROM "
                           f"<private table> LEFT JOIN {first.name} ON ...)")
    if position > 0 and joins[position].args.get("using"):
        raise QueryRefused(f"JOIN ... USING refused here: {first.name} is public and written first, "
                           "and USING names no table; write JOIN ... ON <a>.<column> = <b>.<column>")
    swapped = select.copy()
    new_joins = swapped.args["joins"]
    private = new_joins[position].this
    public = swapped.args["from_"].this
    swapped.args["from_"].set("this", private.copy())
    new_joins[position].set("this", public.copy())
    return swapped
