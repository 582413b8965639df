"""Bind a query's JOIN: the private table joined to one public table on its unique key.

`FROM private [LEFT] JOIN public ON private.col = public.key` is the one join accepted: the
key is unique in the data (checked when the data is opened, engine/execute.py), so each
private row matches at most one public row and every sensitivity is that of the private table
alone (docs/theory.md §16). Every other join is refused, naming what is accepted; a table the
policy does not declare is never joined.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from .errors import QueryRefused
from .plan import PublicJoin
from .policy import ColumnSpec, Policy, PublicTableSpec, TableSpec
from .scalars import check_args

ACCEPTED = "FROM <private table> [LEFT] JOIN <public table> ON <private>.<column> = <public>.<key>"
_JOIN_ARGS = {"this", "on", "side", "kind", "pivots"}


def bind_join(select: exp.Select, policy: Policy, table: TableSpec,
              aliases: set[str]) -> tuple[PublicJoin | None, set[str]]:
    """The query's join to a public table and the names that qualify its columns (the table's
    name and alias), or (None, empty) when the query has no JOIN."""
    joins = select.args.get("joins") or []
    if not joins:
        return None, set()
    if len(joins) > 1:
        raise QueryRefused(f"JOIN refused: {len(joins)} joins; join one public table ({ACCEPTED})")
    join = joins[0]
    target = join.this
    if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
        raise QueryRefused(f"JOIN refused: {type(target).__name__.upper()} is not a table ({ACCEPTED})")
    public = _public_table(target, policy)
    _check_kind(join)
    public_aliases = {public.name} | ({target.alias.lower()} if target.alias else set())
    if public_aliases & aliases:
        raise QueryRefused(f"JOIN refused: {target.alias or public.name} names both tables; give "
                           "each its own alias")
    on = join.args.get("on")
    while isinstance(on, exp.Paren):
        on = on.this
    if not isinstance(on, exp.EQ) or not all(isinstance(side, exp.Column)
                                             for side in (on.this, on.expression)):
        shown = on.sql(dialect="duckdb") if on is not None else "no ON condition"
        raise QueryRefused(f"JOIN refused: ON {shown} is not one equality of two columns ({ACCEPTED})")
    sides = [_side(column, table, public, aliases, public_aliases) for column in (on.this, on.expression)]
    if sorted(kind for kind, _ in sides) != ["private", "public"]:
        raise QueryRefused(f"JOIN refused: ON must compare a column of {table.name} with "
                           f"{public.name}.{public.key} ({ACCEPTED})")
    private = next(spec for kind, spec in sides if kind == "private")
    key = next(spec for kind, spec in sides if kind == "public")
    if key.name != public.key:
        raise QueryRefused(f"JOIN refused: {public.name}.{key.name} is not the table's declared "
                           f"unique key; join ON {table.name}.<column> = {public.name}.{public.key}")
    if private.type != key.type:
        raise QueryRefused(f"JOIN refused: {table.name}.{private.name} is {private.type} but "
                           f"{public.name}.{public.key} is {key.type}; join columns of one type")
    return PublicJoin(public, private, join.side == "LEFT"), public_aliases


def public_column(public: PublicTableSpec, name: str) -> ColumnSpec:
    """A public column as queries read it: named "<table>.<column>" so that it never clashes
    with a private column in the rows the rewritten query reads (engine/rewrite.py)."""
    return replace(public.columns[name], name=f"{public.name}.{name}")


def _public_table(target: exp.Table, policy: Policy) -> PublicTableSpec:
    if target.args.get("catalog") or target.args.get("db"):
        raise QueryRefused(f"JOIN refused: qualified table name {target.sql()}; name the table alone")
    check_args(target, "JOIN")
    alias = target.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise QueryRefused(f"JOIN refused: column aliases in {target.sql(dialect='duckdb')}; use "
                           "the table's own column names")
    name = target.name.lower()
    public = policy.public_tables.get(name)
    if public is not None:
        return public
    if name in policy.tables:
        raise QueryRefused(f"JOIN refused: {name} is private; a private table may only join a "
                           f"public table of the policy ({ACCEPTED})")
    tables = ", ".join(sorted(policy.public_tables)) or "none in the policy"
    raise QueryRefused(f"JOIN refused: unknown table {target.name!r} (public tables: {tables})")


def _check_kind(join: exp.Join) -> None:
    """Inner or LEFT [OUTER] with ON; every other kind, method or option is refused."""
    extra = sorted(key for key, value in join.args.items()
                   if key not in _JOIN_ARGS and value not in (None, [], False, ""))
    if join.method or extra:
        what = join.method or extra[0].upper()
        raise QueryRefused(f"JOIN refused: {what} is not supported ({ACCEPTED})")
    if join.side not in ("", "LEFT") or join.kind not in ("", "INNER", "OUTER") \
            or (join.kind == "OUTER" and join.side != "LEFT"):
        what = " ".join(part for part in (join.side, join.kind) if part)
        raise QueryRefused(f"JOIN refused: {what} JOIN is not supported; use JOIN or LEFT JOIN "
                           f"({ACCEPTED})")
    if join.args.get("on") is None:
        raise QueryRefused(f"JOIN refused: a join without ON (a comma or CROSS JOIN) pairs every "
                           f"row with every row ({ACCEPTED})")


def _side(column: exp.Column, table: TableSpec, public: PublicTableSpec, aliases: set[str],
          public_aliases: set[str]) -> tuple[str, ColumnSpec]:
    """Which table an ON column belongs to, and its policy column."""
    if column.args.get("db") or column.args.get("catalog"):
        raise QueryRefused(f"JOIN refused: qualified column {column.sql()}; use table.column at most")
    name, qualifier = column.name.lower(), column.table.lower()
    in_private = name in table.columns or name == table.privacy_unit
    if qualifier in public_aliases or (not qualifier and name in public.columns and not in_private):
        if name not in public.columns:
            raise QueryRefused(f"JOIN refused: unknown column {column.name!r} in table {public.name} "
                               f"(columns: {', '.join(sorted(public.columns))})")
        return "public", public.columns[name]
    if qualifier and qualifier not in aliases:
        raise QueryRefused(f"JOIN refused: unknown table qualifier {column.table!r} in {column.sql()}")
    if not qualifier and name in public.columns:
        raise QueryRefused(f"JOIN refused: column {column.name} is in both {table.name} and "
                           f"{public.name}; write {table.name}.{name} or {public.name}.{name}")
    if name == table.privacy_unit:
        raise QueryRefused(f"JOIN refused: {column.name} is the privacy unit; join on a policy column")
    if name not in table.columns:
        raise QueryRefused(f"JOIN refused: unknown column {column.name!r} in table {table.name} "
                           f"(columns: {', '.join(sorted(table.columns))})")
    return "private", table.columns[name]
