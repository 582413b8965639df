"""UNNEST of a list column (docs/theory.md §31): `FROM t, UNNEST(string_split(col, ';')) AS
g(item)`, `CROSS JOIN UNNEST(...) AS item` or `SELECT UNNEST(string_split(col, ';')) AS item FROM
t` (in a CTE, a FROM-subquery or the query itself) read as the query over `t` with a column `item`,
one row per item of a bounded row's list, at most the policy's `max_items` of them.

The query is rewritten to read `item` as a column of the table, bound as any query on a table
that has that column (its public values the list's declared domain, its rows per unit m times
max_items), and the plan then reads the real table's bounded copy with its items unnested
(`Unnested.rows`). Every other UNNEST is refused in one line naming the accepted forms. Reads
the query text and the policy only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import QueryPlan
from ..policy import ColumnSpec, Policy, TableSpec
from ..sql_types import SqlType
from ..unnest_rows import Unnested
from .flatten import flatten
from .nesting import per_unit_source
from .scalars import short

_MARK = "dpsql_unnest"  # marks the UNNEST node so that its copy is found in the copied query
Build = Callable[[exp.Select, Policy, str, Mapping[str, frozenset[str]] | None], QueryPlan]
ACCEPTED = ("FROM <table>, UNNEST(string_split(<list column>, '<separator>')) AS g(item) (or "
            "CROSS JOIN UNNEST(...) AS item), or SELECT UNNEST(string_split(<list column>, "
            "'<separator>')) AS item FROM <table> (in a CTE, a FROM-subquery or grouped by item)")


@dataclass(frozen=True)
class Found:
    """A query's one UNNEST read as a column: the query reading `item` as a column of its
    table, the policy in which that table has the column, and how the rows are unnested."""

    select: exp.Select
    policy: Policy
    table: TableSpec  # the policy's own table
    unnest: Unnested


def holds_unnest(select: exp.Expression) -> bool:
    """Whether the query text unnests anything (UNNEST, written as a table or a SELECT item)."""
    return select.find(exp.Unnest, exp.Explode) is not None


def bind_unnest(select: exp.Select, policy: Policy, sql: str,
                data_columns: Mapping[str, frozenset[str]] | None, build: Build) -> QueryPlan:
    """The plan of a query that unnests a list column: bound with the item as a column, then
    reading the real table's bounded rows unnested (docs/theory.md §31)."""
    found = read_unnest(select, policy)
    if per_unit_source(found.select, found.policy) is not None:
        raise QueryRefused("UNNEST in a two-level query refused: aggregate the items in one query "
                           f"({ACCEPTED})")
    flat = flatten(found.select, found.policy)
    plan = build(flat, found.policy, sql, data_columns)
    if plan.join is not None or plan.table.name != found.table.name:
        raise QueryRefused(f"UNNEST with a JOIN refused: the items are read from one table ({ACCEPTED})")
    return replace(plan, table=found.table, unnest=found.unnest,
                   flattened_sql=flat.sql(dialect="duckdb"))


def read_unnest(select: exp.Select, policy: Policy) -> Found:
    """The query with its one UNNEST read as a column of its table, or QueryRefused naming what
    is accepted."""
    found = [node for node in select.walk() if isinstance(node, (exp.Unnest, exp.Explode))]
    if len(found) > 1:
        raise QueryRefused(f"{len(found)} UNNESTs refused: a query unnests one list column "
                           f"({ACCEPTED})")
    node = found[0]
    parent = node.parent
    holder = parent.parent if parent is not None else None
    joined = isinstance(node, exp.Unnest) and isinstance(parent, exp.Join) \
        and isinstance(holder, exp.Select)
    if not joined and not (isinstance(node, exp.Explode) and isinstance(parent, exp.Alias)
                           and isinstance(holder, exp.Select) and parent in holder.expressions):
        where = "UNNEST" if isinstance(node, exp.Unnest) else f"UNNEST({short(node.this)})"
        raise QueryRefused(f"{where} refused here: UNNEST is read only as a table in FROM or as "
                           f"a SELECT item ({ACCEPTED})")
    assert isinstance(holder, exp.Select) and parent is not None
    table, alias = _table(holder, policy)
    column = _list_column(node, table, alias)
    if isinstance(node, exp.Unnest):
        assert isinstance(parent, exp.Join)
        item = _joined_item(node, parent, holder)
    else:
        assert isinstance(node, exp.Explode) and isinstance(parent, exp.Alias)
        item = _selected_item(node, parent, holder)
    listed = column.item_list
    assert listed is not None
    if item.startswith("__"):
        raise QueryRefused(f"UNNEST(...) AS {item} refused: names starting with __ are the engine's own")
    if item in table.columns or item == table.privacy_unit:
        raise QueryRefused(f"UNNEST(...) AS {item} refused: {table.name} already has a column "
                           f"{item}; name the item otherwise")
    if table.chain:
        raise QueryRefused(f"UNNEST on {table.name} refused: its privacy unit is reached through "
                           "foreign keys, which UNNEST does not support yet")
    spec = ColumnSpec(item, SqlType.STR, domain=listed.domain)
    virtual = replace(table, columns={**table.columns, item: spec})
    rewritten = _read_as_column(select, node, item)
    return Found(rewritten, replace(policy, tables={**policy.tables, table.name: virtual}), table,
                 Unnested(column.name, item, listed.separator, listed.max_items))


def _joined_item(node: exp.Unnest, join: exp.Join, body: exp.Select) -> str:
    """The item's name of `FROM t, UNNEST(...) AS g(item)` or `CROSS JOIN UNNEST(...) AS item`;
    QueryRefused for another join or alias."""
    kind = (join.args.get("kind") or "").upper()
    on = join.args.get("on")
    if join.args.get("side") or join.args.get("using") or kind not in ("", "CROSS", "INNER") \
            or (on is not None and on != exp.true()) or len(body.args.get("joins") or []) != 1:
        raise QueryRefused(f"this join of UNNEST refused: it is joined to its one table by a comma "
                           f"or CROSS JOIN ({ACCEPTED})")
    if node.args.get("offset"):
        raise QueryRefused(f"UNNEST ... WITH OFFSET or ORDINALITY refused: an item's position is "
                           f"not read ({ACCEPTED})")
    alias = node.args.get("alias")
    columns = (alias.args.get("columns") or []) if alias is not None else []
    if alias is None or len(columns) > 1 or not (columns or alias.name):
        raise QueryRefused(f"UNNEST without a name for its item refused: write UNNEST(...) AS "
                           f"g(item) ({ACCEPTED})")
    return (columns[0].name if columns else alias.name).lower()


def _selected_item(node: exp.Explode, alias: exp.Alias, body: exp.Select) -> str:
    """The item's name of `SELECT UNNEST(...) AS item FROM t`; QueryRefused for options or a
    join beside it."""
    if node.expressions:
        raise QueryRefused(f"UNNEST with {short(node.expressions[0])} refused: a list column's "
                           f"items are unnested as they are ({ACCEPTED})")
    if body.args.get("joins"):
        raise QueryRefused(f"UNNEST with a JOIN refused: the items are read from one table ({ACCEPTED})")
    return alias.alias.lower()


def _table(body: exp.Select, policy: Policy) -> tuple[TableSpec, str]:
    """The private table whose rows are unnested (named in the same FROM) and its alias."""
    source = body.args.get("from_")
    table = source.this if source is not None else None
    spec = policy.tables.get(table.name.lower()) if isinstance(table, exp.Table) \
        and isinstance(table.this, exp.Identifier) and not table.args.get("catalog") else None
    if spec is None:
        raise QueryRefused(f"UNNEST refused: it reads a list column of the private table in the "
                           f"same FROM ({', '.join(sorted(policy.tables))}), not a CTE or "
                           f"subquery ({ACCEPTED})")
    assert isinstance(table, exp.Table)
    return spec, (table.alias or table.name).lower()


def _list_column(node: exp.Unnest | exp.Explode, table: TableSpec, alias: str) -> ColumnSpec:
    """The list column UNNEST splits, at its declared separator; QueryRefused otherwise."""
    lists = ", ".join(f"{c.name} (separator {c.item_list.separator!r})"
                      for c in table.columns.values() if c.item_list is not None) or "none"
    args = node.expressions if isinstance(node, exp.Unnest) else [node.this]
    split = args[0] if len(args) == 1 else None
    if not isinstance(split, exp.Split) or not isinstance(split.this, exp.Column):
        what = ", ".join(short(a) for a in args)
        raise QueryRefused(f"UNNEST refused: UNNEST({what}) reads no list column; write "
                           f"UNNEST(string_split(<column>, '<separator>')) with a list column of "
                           f"{table.name} ({lists})")
    ref = split.this
    column = table.columns.get(ref.name.lower())
    if ref.table and ref.table.lower() not in (alias, table.name) or column is None \
            or column.item_list is None:
        raise QueryRefused(f"string_split({short(ref)}, ...) in UNNEST refused: {short(ref)} is no "
                           f"list column of {table.name} in the policy; its list columns: {lists}")
    separator = split.expression
    if not isinstance(separator, exp.Literal) or not separator.is_string \
            or separator.this != column.item_list.separator:
        raise QueryRefused(f"string_split({column.name}, {short(separator)}) refused: the policy "
                           f"splits {column.name} at {column.item_list.separator!r}")
    return column


def _read_as_column(select: exp.Select, node: exp.Unnest | exp.Explode, item: str) -> exp.Select:
    """A copy of `select` in which the UNNEST is the table's column `item`: the join removed and
    its item's references made plain, or the SELECT item `UNNEST(...) AS item` made `item`."""
    node.meta[_MARK] = True
    copy = select.copy()
    del node.meta[_MARK]
    target = next(n for n in copy.walk() if n.meta.get(_MARK))
    if isinstance(target, exp.Explode):
        target.replace(exp.column(item))
        return copy
    join = target.parent
    body = join.parent if join is not None else None
    assert isinstance(join, exp.Join) and isinstance(body, exp.Select)
    names = {item}
    alias = target.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        names.add(alias.name.lower())
    body.set("joins", None)
    for column in list(body.find_all(exp.Column)):
        if column.find_ancestor(exp.Select) is not body or column.name.lower() != item:
            continue
        if not column.table or column.table.lower() in names:
            column.replace(exp.column(item))
    return copy
