"""A key set given as a public table's rows: GROUP BY columns of a joined public table released
as the distinct rows that table holds (read through the backend when the query is planned:
public data, the same for the whole connection), crossed with the other keys' public values
(docs/theory.md §32)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import GroupKey
from ..policy import ColumnSpec, PublicTableSpec
from ..sql_types import SqlType
from .join import Source
from .scope import Scope
from .where import pruned

# (public table, its column names, limit) -> its distinct rows of those columns holding no NULL,
# at most limit + 1 of them, in any order (a backend's `public_rows`).
PublicRows = Callable[[str, tuple[str, ...], int], tuple[tuple, ...]]

ROW_KEY_TYPES = (SqlType.STR, SqlType.INT, SqlType.BOOL, SqlType.DATE)


@dataclass(frozen=True)
class PublicColumn:
    """A GROUP BY column of a joined public table: the occurrence it is read from, its policy
    column as queries read it ("<table or alias>.<column>") and its name in the table."""

    source: Source
    spec: ColumnSpec
    column: str

    @property
    def listed(self) -> bool:
        """Whether the policy lists its values (a domain, a bool, a bounded int, a bounded date)."""
        spec = self.spec
        return spec.group_values is not None or (spec.type == SqlType.INT and spec.bounded) or (
            spec.type == SqlType.DATE and spec.span is not None)


def public_column(node: exp.Expression, scope: Scope) -> PublicColumn | None:
    """The joined public table's column a GROUP BY item names (a bare column), else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Column) or not scope.joined:
        return None
    spec = scope.spec_of(node)
    if spec is None:
        return None
    for source in scope.joined:
        if isinstance(source.table, PublicTableSpec):
            prefix, _, name = spec.name.partition(".")
            if prefix == source.shown and name in source.table.columns:
                return PublicColumn(source, spec, name)
    return None


def distinct_rows(table: str, columns: Sequence[str], limit: int) -> exp.Select:
    """The query a backend runs for `PublicRows`: the distinct rows of `columns` of the public
    `table` with no NULL, at most `limit + 1`."""
    names = [exp.column(name, quoted=True) for name in columns]
    query = exp.select(*names).distinct().from_(exp.to_table(table, quoted=True), copy=False)
    query = query.where(exp.and_(*(exp.Not(this=exp.Is(this=name.copy(), expression=exp.Null()))
                                   for name in names)), copy=False)
    return query.limit(limit + 1, copy=False)


def row_block(columns: Sequence[PublicColumn], scope: Scope, where: exp.Expression | None,
              read: PublicRows, max_groups: int) -> tuple[tuple, ...]:
    """The distinct rows of one public table occurrence's grouped columns: read from the table,
    each column's values kept to those the policy lists (when it does) and a WHERE leaves
    possible (`pruned`), sorted. Refused beyond `max_groups` rows or when none is left."""
    what = ", ".join(c.spec.name for c in columns)
    for column in columns:
        if column.spec.type not in ROW_KEY_TYPES:
            raise QueryRefused(f"GROUP BY {column.spec.name} refused: a key read from the public "
                               f"table's rows is text, an int, a bool or a date, not a "
                               f"{column.spec.type}")
    table = columns[0].source.table.name
    rows = read(table, tuple(c.column for c in columns), max_groups)
    if len(rows) > max_groups:
        raise QueryRefused(f"GROUP BY {what} would produce more than {max_groups} groups (the "
                           f"distinct rows of the public table {table}); at most {max_groups}")
    kept = list(rows)
    for index, column in enumerate(columns):
        values = tuple(sorted({row[index] for row in kept}))
        if column.listed:
            values = tuple(v for v in values if _is_listed(column.spec, v))
        allowed = set(pruned(values, column.spec, where, scope)) if values else set()
        kept = [row for row in kept if row[index] in allowed]
        if not kept:
            raise QueryRefused(f"GROUP BY {what} refused: the public table {table} holds no row "
                               "whose values the policy and the WHERE condition leave possible, "
                               "so there is no group to answer")
    return tuple(sorted(kept))


def _is_listed(spec: ColumnSpec, value: object) -> bool:
    """Whether the policy lists `value` for a column that lists values: in its domain, or in a
    bounded int or date column's declared range."""
    if spec.group_values is not None:
        return value in spec.group_values
    if spec.type == SqlType.DATE and spec.span is not None:
        first, last = spec.span
        return first.date() <= value <= last.date()  # type: ignore[operator]
    lo, hi = spec.bounds
    return lo <= value <= hi  # type: ignore[operator]


def crossed(keys: Sequence[GroupKey], blocks: Sequence[tuple[tuple[int, ...], tuple[tuple, ...]]]
            ) -> tuple[tuple, ...]:
    """The released key rows: the product of each public row block (its key positions and
    rows) with every other key's values, each row in the order of `keys`, sorted."""
    in_block = {position for positions, _ in blocks for position in positions}
    parts = list(blocks) + [((i,), tuple((v,) for v in key.keys)) for i, key in enumerate(keys)
                            if i not in in_block]
    rows = []
    for combination in itertools.product(*(rows for _, rows in parts)):
        row: list = [None] * len(keys)
        for (positions, _), values in zip(parts, combination, strict=True):
            for position, value in zip(positions, values, strict=True):
                row[position] = value
        rows.append(tuple(row))
    return tuple(sorted(rows))
