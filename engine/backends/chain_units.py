"""The unit of a chained table's rows (lineitem -> orders.o_orderkey -> o_custkey), derived by
joining up its chain, and the rows bounding keeps with it; with the open-time checks of a chain
(its columns exist with one kind of type on both sides, its referenced keys are unique).

A row's unit is the value of the last link's column (the order's `o_custkey`) reached by
following each foreign key to the one row holding its key; a row whose reference is NULL or
matches no row gets a NULL unit, which the keyed rule (engine/backends/bounding.py) keeps as a
unit of its own (docs/theory.md §24).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from sqlglot import exp

from ..errors import PolicyError
from ..policy import Policy, TableSpec, UnitLink
from .bounding import kept_rows, own_rows

SOURCE = "dpsql_chain_units"
"""The CTE holding a chained table's rows with their derived unit, which bounding reads."""

Locate = Callable[[str], exp.Table]
"""Where a backend reads a policy table by name (a DuckDB view, an attached catalog)."""


def holders(table: TableSpec) -> list[tuple[str, UnitLink]]:
    """Each link of the chain with the table whose column it is (the table itself first)."""
    names = [table.name, *(link.table for link in table.chain[:-1])]
    return list(zip(names, table.chain, strict=True))


def unit_column(table: TableSpec) -> tuple[str, str]:
    """(table, column) whose value is a chained table's unit: the last link's column."""
    return holders(table)[-1][0], table.chain[-1].column


def with_unit_type(table: TableSpec, types: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """`table`'s data types (table -> column -> type) with, for a chained table, its unit
    column typed as the column it is derived from, as its bounded copy holds it."""
    own = dict(types[table.name])
    if table.chain:
        holder, column = unit_column(table)
        own[table.unit] = types[holder][column]
    return own


def link_columns(policy: Policy, table: TableSpec) -> list[str]:
    """The columns of `table` its chain joins on and no policy column names: its own foreign
    key and the keys other tables' chains reference, as its chained source carries them."""
    names = ({table.through.column} if table.through else set()) | policy.referenced_keys(table.name)
    return sorted(names - set(table.columns) - {table.privacy_unit})


def chain_source(policy: Policy, table: TableSpec, locate: Locate) -> exp.Select:
    """`table`'s rows with their derived unit (named `table.unit`), policy columns and link
    columns, one row per row: every key joined is unique in the data (checked on opening)."""
    items: list[exp.Expression] = [exp.column(name, "t", quoted=True)
                                   for name in [*sorted(table.columns), *link_columns(policy, table)]]
    query = exp.select().from_(locate(table.name).as_("t"))
    side = "t"
    for i, (_, link) in enumerate(holders(table)[:-1]):
        alias = f"c{i + 1}"
        on = exp.EQ(this=exp.column(link.column, side, quoted=True),
                    expression=exp.column(link.key, alias, quoted=True))
        query = query.join(locate(link.table).as_(alias), on=on, join_type="left")
        side = alias
    unit = exp.alias_(exp.column(table.chain[-1].column, side, quoted=True), table.unit, quoted=True)
    return query.select(unit, *items)


def bounded_rows(policy: Policy, table: TableSpec, hash_key: str, locate: Locate,
                 unit_is_float: bool, columns: Collection[str] | None = None) -> exp.Expression:
    """The rows of `table` each unit keeps under the bound for a query reading the policy
    columns `columns` (None: every column; engine/backends/bounding.py, docs/theory.md §28), for
    a chained table over its rows with their derived unit; every row of a table without a
    privacy unit."""
    if table.privacy_unit is None:
        return own_rows(table, locate(table.name))
    if not table.chain:
        return kept_rows(table, hash_key, locate(table.name), unit_is_float, columns)
    rows = kept_rows(table, hash_key, exp.to_table(SOURCE, quoted=True), unit_is_float, columns)
    kept = exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("kept")))
    return exp.select("*").from_(kept).with_(SOURCE, as_=chain_source(policy, table, locate))


def check_chains(policy: Policy, columns: Callable[[str], Mapping[str, str]],
                 repeated: Callable[[exp.Select], int]) -> None:
    """Every link's two columns are in the data with one kind of type, and every key a chain
    references in a chained table is unique, so each row reaches at most one row and one unit.
    Read by whoever opens the data, before any query: `columns` gives a table's data types,
    `repeated` runs a count (`repeats`) on the backend."""
    for holder, table in policy.tables.items():
        link = table.through
        if link is not None:
            path = f"tables.{holder}.privacy_unit"
            mine, theirs = columns(holder), columns(link.table)
            if link.column not in mine:
                raise PolicyError(f"{path}.through: no column {link.column!r} in table {holder} "
                                  "of the data")
            if link.key not in theirs:
                raise PolicyError(f"{path}.references: no column {link.key!r} in table "
                                  f"{link.table} of the data")
            if _kind(mine[link.column]) != _kind(theirs[link.key]):
                raise PolicyError(f"{path}: {holder}.{link.column} is {mine[link.column]} but "
                                  f"{link.table}.{link.key} is {theirs[link.key]}; a foreign key "
                                  "and the key it references must hold one kind of value")
    for name in policy.tables:
        for key in sorted(policy.referenced_keys(name)):
            count = repeated(repeats(name, key))
            if count:
                raise PolicyError(f"tables.{name}: {name}.{key} is referenced by a chain but is not "
                                  f"unique in the data ({count} value(s) repeat); a referenced key "
                                  "must be unique, so that each row reaches one row and one "
                                  "privacy unit", repeated=count)


def repeats(table: str, key: str) -> exp.Select:
    """How many non-NULL values of `table`.`key` repeat (a table name the backend maps)."""
    column = exp.column(key, quoted=True)
    repeated = (exp.select(column.copy()).from_(exp.to_table(table, quoted=True))
                .where(exp.Not(this=exp.Is(this=column.copy(), expression=exp.Null())))
                .group_by(column.copy())
                .having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(1))))
    return exp.select(exp.Count(this=exp.Star())).from_(repeated.subquery("repeated"))


_INTEGERS = ("TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
             "UINTEGER", "UBIGINT", "UHUGEINT")
_FLOATS = ("FLOAT", "DOUBLE", "REAL", "DECIMAL")
_TEXT = ("VARCHAR", "STRING")


def _kind(data_type: str) -> str:
    """Integer, float, text or the type itself (DuckDB's or Spark's names): the kinds of value
    a key join compares as equal."""
    base = data_type.split("(")[0].upper()
    return "integer" if base in _INTEGERS else "float" if base in _FLOATS else \
        "text" if base in _TEXT else base
