"""The tables of a query's joins and the edges they may be joined on.

`join_sources` reads the FROM clause's joins (inner, LEFT, or commas with the conditions in
WHERE) into the tables they name: public tables (their key unique in the data, checked when the
data is opened), parent tables (read from their child, one row per key) and private tables of
the FROM table's privacy unit (each through its bounded copy); each at most once. `fanout`
says whether an equality of two columns joins one table to another so that each row of the
first meets a bounded number of rows of the second, and how many (docs/theory.md §25);
engine/sql/join_tree.py builds the tree of such edges that bounds a unit's joined rows.
`refusal` says, in one line, why a table could not be joined. A table the policy does not
declare is never joined.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import EdgeKind
from ..policy import ColumnSpec, LookupTable, ParentTableSpec, Policy, PublicTableSpec, TableSpec
from ..sql_types import SqlType
from .scalars import check_args

ACCEPTED = ("FROM <private table> [LEFT] JOIN <public table> ON <private>.<column> = <public>.<key>, "
            "FROM <child> [LEFT] JOIN <parent table> ON <child>.<foreign key> = <parent>.<key>, "
            "FROM <private a> [LEFT] JOIN <private b> ON a.<unit> = b.<unit> (one privacy unit), "
            "or along a declared chain ON <child>.<foreign key> = <referenced table>.<key>, "
            "any number of them (or comma joins with the equalities in WHERE), each table once (a "
            "public table again under an alias of its own)")
_JOIN_ARGS = {"this", "on", "side", "kind", "pivots"}
MAX_TABLES = 16  # tables one query may join, so the join tree's search stays small

Table = LookupTable | TableSpec


@dataclass(frozen=True)
class Source:
    """A table the query joins after its FROM table, as written: the names that qualify its
    columns (its name and alias), LEFT or not, and its ON (None for a comma join)."""

    table: Table
    names: frozenset[str]
    left: bool
    on: exp.Expression | None
    label: str = ""  # what its columns are named after: the table's name, or its alias when
    # the query joins the table more than once (a public table under two aliases)

    @property
    def shown(self) -> str:
        """The name its columns are read under ("<label>.<column>")."""
        return self.label or self.table.name


def join_sources(select: exp.Select, policy: Policy, table: TableSpec,
                 aliases: set[str]) -> list[Source]:
    """The tables the query joins, in the order written; refusing any join kind but inner,
    LEFT and comma, a table that is not the policy's, a table joined twice and names that
    would name two tables."""
    joins = select.args.get("joins") or []
    if len(joins) + 1 > MAX_TABLES:
        raise QueryRefused(f"JOIN refused: {len(joins) + 1} tables; at most {MAX_TABLES} in one query")
    sources: list[Source] = []
    taken = set(aliases)
    commas = [j for j in joins if _is_comma(j)]
    repeated = _repeated(joins)
    for join in joins:
        target = join.this
        if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
            raise QueryRefused(f"JOIN refused: {type(target).__name__.upper()} is not a table ({ACCEPTED})")
        other = _joined_table(target, policy, table)
        if join.args.get("using"):
            _using_as_on(join, other, target, [(table, aliases), *((s.table, s.names) for s in sources)])
        _check_kind(join)
        if join.side == "LEFT" and commas:
            raise QueryRefused("JOIN refused: LEFT JOIN beside comma joins; write every join as "
                               f"[LEFT] JOIN ... ON ({ACCEPTED})")
        label = ""
        if other.name in repeated:
            label = _repeat_label(other, target)
        names = frozenset({label} if label else
                          {other.name} | ({target.alias.lower()} if target.alias else set()))
        if names & taken:
            raise QueryRefused(f"JOIN refused: {target.alias or other.name} names both tables; give "
                               "each its own alias")
        taken |= names
        sources.append(Source(other, names, join.side == "LEFT", join.args.get("on"), label))
    named = {table.name} | {s.table.name for s in sources}
    for source in sources:
        parent = source.table
        if isinstance(parent, ParentTableSpec) and parent.child not in named:
            raise QueryRefused(f"JOIN refused: {parent.name} is the parent table of {parent.child}, "
                               f"not of {table.name}; join it FROM {parent.child} JOIN "
                               f"{parent.name} ON {parent.child}.{parent.foreign_key} = "
                               f"{parent.name}.{parent.key}")
    return sources


def _using_as_on(join: exp.Join, other: Table, target: exp.Table,
                 before: list[tuple[Table, frozenset[str] | set[str]]]) -> None:
    """`JOIN t USING (c, ...)` as `JOIN t ON <earlier>.c = t.c AND ...` (in place), each c
    compared with the one table before t that may be joined on it (a privacy unit, a key, a
    column); the same rows as USING, whose merged column equals the earlier table's. Refused
    when no earlier table or several have the column (docs/theory.md §30.6)."""
    mine = target.alias or other.name
    terms: list[exp.Expression] = []
    for column in join.args["using"]:
        name = column.name.lower()
        if name not in join_columns(other):
            raise QueryRefused(f"JOIN refused: USING ({name}): {other.name} has no column {name} "
                               "to join on; write JOIN ... ON <a>.<column> = <b>.<column>")
        owners = [(spec, names) for spec, names in before if name in join_columns(spec)]
        if len(owners) != 1:
            which = "no table" if not owners else \
                " and ".join(spec.name for spec, _ in owners)
            raise QueryRefused(f"JOIN refused: USING ({name}) joins {other.name} to {which} before "
                               f"it; USING compares it with exactly one: write JOIN ... ON "
                               f"<a>.{name} = {mine}.{name}")
        spec, names = owners[0]
        qualifier = spec.name if spec.name in names else sorted(names)[0]
        terms.append(exp.EQ(this=exp.column(name, qualifier), expression=exp.column(name, mine)))
    on = terms[0]
    for term in terms[1:]:
        on = exp.And(this=on, expression=term)
    join.set("using", None)
    join.set("on", on)


def _repeated(joins: list[exp.Join]) -> set[str]:
    """The tables the query joins more than once (by name, lower-cased)."""
    seen: set[str] = set()
    again: set[str] = set()
    for join in joins:
        if isinstance(join.this, exp.Table):
            name = join.this.name.lower()
            (again if name in seen else seen).add(name)
    return again


def _repeat_label(other: Table, target: exp.Table) -> str:
    """The alias a table joined more than once is named by: a public table only (its key is
    unique in the data, so each copy meets at most one row per row, docs/theory.md §30.3), each
    copy under an alias of its own."""
    if not isinstance(other, PublicTableSpec):
        raise QueryRefused(f"JOIN refused: {other.name} is joined twice; only a public table may be "
                           f"joined more than once, each under its own alias (a self-join of a "
                           f"private or parent table is not supported; {ACCEPTED})")
    if not target.alias:
        raise QueryRefused(f"JOIN refused: {other.name} is joined more than once; give each its own "
                           f"alias ({other.name} AS n1, {other.name} AS n2)")
    return target.alias.lower()


def joined_column(lookup: Table, name: str, label: str = "") -> ColumnSpec:
    """A joined table's column as queries read it: named "<table>.<column>" (or "<alias>.<column>"
    for a table joined more than once) so that it never clashes with a column of another table in
    the rows the rewritten query reads."""
    return replace(lookup.columns[name], name=f"{label or lookup.name}.{name}")


def join_columns(table: Table) -> frozenset[str]:
    """The columns an equality may join `table` on: its policy columns (a public or parent
    table's key is one, and so is each key of a chain, listed or not) and its privacy unit,
    when a column of its own (a chained table's is derived, in its bounded copy only)."""
    unit = {table.privacy_unit} if isinstance(table, TableSpec) and table.privacy_unit \
        and not table.chain else set()
    return frozenset(table.columns) | unit


def column_type(table: Table, name: str) -> SqlType | None:
    """A join column's declared type (None for a privacy unit, which has none)."""
    spec = table.columns.get(name)
    return spec.type if spec is not None else None


def fanout(parent: Table, p_col: str, child: Table, c_col: str) -> tuple[EdgeKind, int] | None:
    """How `parent.p_col = child.c_col` joins `child` below `parent`: the edge's kind and the
    most rows of `child` one row of `parent` meets, or None when the equality is no such edge."""
    types = column_type(parent, p_col), column_type(child, c_col)
    if None not in types and types[0] != types[1]:
        return None
    if isinstance(parent, TableSpec) and p_col == parent.privacy_unit and not isinstance(child, TableSpec):
        return None  # the unit is read only in COUNT(DISTINCT) and in joins on the unit
    if isinstance(child, PublicTableSpec):
        return (EdgeKind.KEY, 1) if c_col == child.key else None
    if isinstance(child, ParentTableSpec):
        ok = isinstance(parent, TableSpec) and parent.name == child.child \
            and p_col == child.foreign_key and c_col == child.key
        return (EdgeKind.KEY, 1) if ok else None
    if not isinstance(parent, TableSpec):
        return None
    unit = child.privacy_unit
    if unit is not None and parent.privacy_unit == unit and p_col == c_col == unit:
        return EdgeKind.UNIT, child.max_rows_per_unit
    up, down = parent.through, child.through
    if up is not None and (up.column, up.table, up.key) == (p_col, child.name, c_col):
        # A key unique in the data, or the unit of the table holding it (m rows per unit).
        return EdgeKind.CHAIN, child.max_rows_per_unit if c_col == unit and not child.chain else 1
    if down is not None and (down.column, down.table, down.key) == (c_col, parent.name, p_col):
        return EdgeKind.CHILD, child.max_rows_per_unit  # every row referencing one row is of its unit
    return None


def refusal(table: Table, other: Table, col: str, other_col: str, main: TableSpec) -> str:
    """Why `other.other_col = table.col` does not join `table` (the later of the two), in the
    words of the form it comes nearest to."""
    if not isinstance(table, TableSpec) and isinstance(other, TableSpec) and other_col == other.privacy_unit:
        return f"JOIN refused: {other_col} is the privacy unit; join on a policy column ({ACCEPTED})"
    if isinstance(table, PublicTableSpec):
        if col != table.key:
            return (f"JOIN refused: {table.name}.{col} is not the table's declared unique key; "
                    f"join ON {other.name}.<column> = {table.name}.{table.key}")
        return _typed(other, other_col, table, col) or \
            f"JOIN refused: {table.name} is joined to {other.name}, which is itself joined on no key"
    if isinstance(table, ParentTableSpec):
        wanted = f"join ON {table.child}.{table.foreign_key} = {table.name}.{table.key}"
        if col != table.key:
            return f"JOIN refused: {table.name}.{col} is not the table's declared key; {wanted}"
        if other.name != table.child or other_col != table.foreign_key:
            return (f"JOIN refused: {other.name}.{other_col} is not the foreign key of parent "
                    f"table {table.name}; {wanted}")
        return _typed(other, other_col, table, col) or f"JOIN refused: {wanted}"
    unit = main.privacy_unit
    if not isinstance(other, TableSpec):
        return (f"JOIN refused: private table {table.name} is joined to {other.name}, not a "
                f"private table; a private table joins another only on their privacy unit or along "
                f"a declared chain ({ACCEPTED})")
    for child, parent in ((table, other), (other, table)):
        link = child.through
        if link is not None and link.table == parent.name:
            shown = f"join ON {child.name}.{link.column} = {parent.name}.{link.key}"
            return f"JOIN refused: {child.name} joins {parent.name} along its chain only; {shown}"
    return (f"JOIN refused: two private tables join only on their privacy unit, each qualified "
            f"by its table (join ON {other.name}.{unit} = {table.name}.{unit}), or along a "
            f"declared chain (<child>.<foreign key> = <referenced>.<key>)")


def _typed(other: Table, other_col: str, table: Table, col: str) -> str | None:
    kinds = column_type(other, other_col), column_type(table, col)
    if None not in kinds and kinds[0] != kinds[1]:
        return (f"JOIN refused: {other.name}.{other_col} is {kinds[0]} but {table.name}.{col} "
                f"is {kinds[1]}; join columns of one type")
    return None


def _is_comma(join: exp.Join) -> bool:
    return not join.side and not join.kind and not join.method and join.args.get("on") is None \
        and not join.args.get("using")


def _joined_table(target: exp.Table, policy: Policy, table: TableSpec) -> Table:
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


def _check_kind(join: exp.Join) -> None:
    """Inner or LEFT [OUTER] with ON, or a comma; every other kind, method or option is refused."""
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
    if join.args.get("on") is None and (join.side or join.kind):
        raise QueryRefused(f"JOIN refused: a join without ON pairs every row with every row "
                           f"({ACCEPTED})")
