"""Bind a query's JOIN: the private table joined to one public table or to its parent table
on the key.

`FROM private [LEFT] JOIN public ON private.col = public.key` joins a public table whose key
is unique in the data (checked when the data is opened, engine/backends/duckdb_execute.py);
`FROM child [LEFT] JOIN parent ON child.foreign_key = parent.key` joins the parent table the
policy declares for the child, of which the query reads one row per key (engine/rewrite.py).
Either way each private row matches at most one row and every sensitivity is that of the
private table alone. `FROM a [LEFT] JOIN b ON a.unit = b.unit` joins two private tables that
declare the same privacy unit, each read through its bounded copy, so one unit has at most
m1 · m2 joined rows and every sensitivity is §8's with m = m1 · m2 (docs/theory.md §16).
Every other join is refused, naming what is accepted; a table the policy does not declare is
never joined.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import Join, KeyJoin, UnitJoin
from ..policy import ColumnSpec, LookupTable, ParentTableSpec, Policy, TableSpec
from .scalars import check_args

ACCEPTED = ("FROM <private table> [LEFT] JOIN <public table> ON <private>.<column> = <public>.<key>, "
            "FROM <child> [LEFT] JOIN <parent table> ON <child>.<foreign key> = <parent>.<key>, "
            "or FROM <private a> [LEFT] JOIN <private b> ON a.<unit> = b.<unit> (one privacy unit)")
_JOIN_ARGS = {"this", "on", "side", "kind", "pivots"}


def bind_join(select: exp.Select, policy: Policy, table: TableSpec,
              aliases: set[str]) -> tuple[Join | None, set[str]]:
    """The query's join to a public, parent or private table and the names that qualify its
    columns (the table's name and alias), or (None, empty) when the query has no JOIN."""
    joins = select.args.get("joins") or []
    if not joins:
        return None, set()
    if len(joins) > 1:
        raise QueryRefused(f"JOIN refused: {len(joins)} joins; join one table ({ACCEPTED})")
    join = joins[0]
    target = join.this
    if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
        raise QueryRefused(f"JOIN refused: {type(target).__name__.upper()} is not a table ({ACCEPTED})")
    other = _joined_table(target, policy, table)
    _check_kind(join)
    joined_aliases = {other.name} | ({target.alias.lower()} if target.alias else set())
    if joined_aliases & aliases:
        raise QueryRefused(f"JOIN refused: {target.alias or other.name} names both tables; give "
                           "each its own alias")
    on = join.args.get("on")
    while isinstance(on, exp.Paren):
        on = on.this
    if not isinstance(on, exp.EQ) or not all(isinstance(side, exp.Column)
                                             for side in (on.this, on.expression)):
        shown = on.sql(dialect="duckdb") if on is not None else "no ON condition"
        raise QueryRefused(f"JOIN refused: ON {shown} is not one equality of two columns ({ACCEPTED})")
    if isinstance(other, TableSpec):
        _check_unit_sides(on, table, other, aliases, joined_aliases)
        return UnitJoin(other, join.side == "LEFT"), joined_aliases
    sides = [_side(column, table, other, aliases, joined_aliases) for column in (on.this, on.expression)]
    if sorted(kind for kind, _ in sides) != ["joined", "private"]:
        raise QueryRefused(f"JOIN refused: ON must compare a column of {table.name} with "
                           f"{other.name}.{other.key} ({ACCEPTED})")
    private = next(spec for kind, spec in sides if kind == "private")
    key = next(spec for kind, spec in sides if kind == "joined")
    if key.name != other.key:
        unique = "" if isinstance(other, ParentTableSpec) else "unique "
        raise QueryRefused(f"JOIN refused: {other.name}.{key.name} is not the table's declared "
                           f"{unique}key; join ON {table.name}.{_foreign(other)} = {other.name}.{other.key}")
    if isinstance(other, ParentTableSpec) and private.name != other.foreign_key:
        raise QueryRefused(f"JOIN refused: {table.name}.{private.name} is not the foreign key of "
                           f"parent table {other.name}; join ON {table.name}.{other.foreign_key} "
                           f"= {other.name}.{other.key}")
    if private.type != key.type:
        raise QueryRefused(f"JOIN refused: {table.name}.{private.name} is {private.type} but "
                           f"{other.name}.{other.key} is {key.type}; join columns of one type")
    return KeyJoin(other, private, join.side == "LEFT"), joined_aliases


def joined_column(lookup: LookupTable | TableSpec, name: str) -> ColumnSpec:
    """A joined table's column as queries read it: named "<table>.<column>" so that it never
    clashes with a private column in the rows the rewritten query reads (engine/rewrite.py)."""
    return replace(lookup.columns[name], name=f"{lookup.name}.{name}")


def _foreign(lookup: LookupTable) -> str:
    return lookup.foreign_key if isinstance(lookup, ParentTableSpec) else "<column>"


def _joined_table(target: exp.Table, policy: Policy, table: TableSpec) -> LookupTable | TableSpec:
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
    parent = policy.parent_tables.get(name)
    if parent is not None and parent.child != table.name:
        raise QueryRefused(f"JOIN refused: {name} is the parent table of {parent.child}, not of "
                           f"{table.name}; join it FROM {parent.child} JOIN {name} ON "
                           f"{parent.child}.{parent.foreign_key} = {name}.{parent.key}")
    if parent is not None:
        return parent
    private = policy.tables.get(name)
    if private is not None:
        return _unit_partner(private, table)
    tables = ", ".join(sorted([*policy.public_tables, *policy.parent_tables])) or "none in the policy"
    raise QueryRefused(f"JOIN refused: unknown table {target.name!r} (tables it may join: {tables})")


def _unit_partner(other: TableSpec, table: TableSpec) -> TableSpec:
    """`other` when the two private tables may join on their privacy unit: two tables, each
    with a privacy unit, the same column."""
    accepted = f"two private tables join only ON a.<unit> = b.<unit> ({ACCEPTED})"
    if other.name == table.name:
        raise QueryRefused(f"JOIN refused: {other.name} joined to itself; a self-join is not "
                           f"supported ({accepted})")
    for spec in (table, other):
        if spec.privacy_unit is None:
            raise QueryRefused(f"JOIN refused: {spec.name} has no privacy unit (each row is an "
                               f"individual), so nothing says which of its rows are whose; "
                               f"{accepted}")
    if table.privacy_unit != other.privacy_unit:
        raise QueryRefused(f"JOIN refused: {table.name}'s privacy unit is {table.privacy_unit} "
                           f"but {other.name}'s is {other.privacy_unit}; {accepted}")
    return other


def _check_unit_sides(on: exp.EQ, table: TableSpec, other: TableSpec, aliases: set[str],
                      joined_aliases: set[str]) -> None:
    """ON must equal the two tables' privacy units, each qualified by its table or alias."""
    unit = table.unit
    wanted = f"join ON {table.name}.{unit} = {other.name}.{unit}"
    owners = []
    for column in (on.this, on.expression):
        if column.args.get("db") or column.args.get("catalog"):
            raise QueryRefused(f"JOIN refused: qualified column {column.sql()}; use table.column at most")
        qualifier = column.table.lower()
        if column.name.lower() != unit or not qualifier:
            raise QueryRefused(f"JOIN refused: two private tables join only on their privacy unit, "
                               f"each qualified by its table ({wanted})")
        if qualifier not in aliases | joined_aliases:
            raise QueryRefused(f"JOIN refused: unknown table qualifier {column.table!r} in {column.sql()}")
        owners.append(qualifier in joined_aliases)
    if sorted(owners) != [False, True]:
        raise QueryRefused(f"JOIN refused: ON must compare the unit of {table.name} with that of "
                           f"{other.name} ({wanted})")


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


def _side(column: exp.Column, table: TableSpec, other: LookupTable, aliases: set[str],
          joined_aliases: set[str]) -> tuple[str, ColumnSpec]:
    """Which table an ON column belongs to, and its policy column."""
    if column.args.get("db") or column.args.get("catalog"):
        raise QueryRefused(f"JOIN refused: qualified column {column.sql()}; use table.column at most")
    name, qualifier = column.name.lower(), column.table.lower()
    in_private = name in table.columns or name == table.privacy_unit
    if qualifier in joined_aliases or (not qualifier and name in other.columns and not in_private):
        if name not in other.columns:
            raise QueryRefused(f"JOIN refused: unknown column {column.name!r} in table {other.name} "
                               f"(columns: {', '.join(sorted(other.columns))})")
        return "joined", other.columns[name]
    if qualifier and qualifier not in aliases:
        raise QueryRefused(f"JOIN refused: unknown table qualifier {column.table!r} in {column.sql()}")
    if not qualifier and name in other.columns:
        raise QueryRefused(f"JOIN refused: column {column.name} is in both {table.name} and "
                           f"{other.name}; write {table.name}.{name} or {other.name}.{name}")
    if name == table.privacy_unit:
        raise QueryRefused(f"JOIN refused: {column.name} is the privacy unit; join on a policy column")
    if name not in table.columns:
        raise QueryRefused(f"JOIN refused: unknown column {column.name!r} in table {table.name} "
                           f"(columns: {', '.join(sorted(table.columns))})")
    return "private", table.columns[name]
