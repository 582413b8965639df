"""The item rows of a query that unnests a list column (docs/theory.md §31): each bounded row
once per item of its list, split at the declared separator and cut to the first max_items."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

# What DuckDB binds the item rows' SQL to, beyond the whitelist: each total on its argument
# types (the engine's gate accepts them only there), and the operator that unnests.
UNNEST_BOUND = {"str_split": ("VARCHAR", "VARCHAR"), "string_split": ("VARCHAR", "VARCHAR"),
                "list_slice": ("LIST", "BIGINT", "BIGINT")}
UNNEST_OPERATOR = "LOGICAL_UNNEST"
UNNEST_CLASS = "BOUND_UNNEST"


@dataclass(frozen=True)
class Unnested:
    """The list column a query reads as items: `item` names one item of `column`'s list in the
    query; a row gives at most `max_items` item rows (none for a NULL list)."""

    column: str  # the FROM table's list column (a policy column)
    item: str  # the item column's name in the plan (lower-cased; no policy column has it)
    separator: str
    max_items: int

    def rows(self, source: exp.Expression) -> exp.Subquery:
        """Every row of `source` (the bounded copy, or the table when each row is an individual)
        with one item each: `string_split`, the first `max_items` items kept, unnested."""
        split = exp.Split(this=exp.column(self.column, quoted=True),
                          expression=exp.Literal.string(self.separator))
        kept = exp.func("list_slice", split, exp.Literal.number(1), exp.Literal.number(self.max_items))
        query = exp.select(exp.Star(), exp.alias_(exp.Explode(this=kept), self.item, quoted=True))
        return query.from_(source, copy=False).subquery("__unnested", copy=False)
