"""Where a chain's key the owner did not list under `columns` may appear: in an equality of two
columns in an ON or in WHERE's top-level ANDs (a join along the chain), or as the one argument of
COUNT(DISTINCT ...). Anywhere else it is refused in one line saying how the owner lists it
(docs/theory.md §30). Reads the query text and the policy only."""

from __future__ import annotations

from sqlglot import exp

from ..errors import QueryRefused
from .scope import Scope


def check_link_columns(select: exp.Select, scope: Scope) -> None:
    """Refuse a link-only column read anywhere but a join condition or COUNT(DISTINCT)."""
    for column in select.find_all(exp.Column):
        spec = scope.spec_of(column)
        if spec is None or not spec.link_only or _in_join(column) or _counted(column):
            continue
        table, _, name = spec.name.rpartition(".")
        table = table or scope.table.name
        raise QueryRefused(f"column {column.sql(dialect='duckdb')} is a key of {table}'s chain that "
                           "the policy does not list under columns: it may appear only in a join "
                           f"(ON <a>.<key> = <b>.<key>) or in COUNT(DISTINCT {name}); the owner "
                           f"lists it under tables.{table}.columns to read it otherwise")


def _in_join(column: exp.Column) -> bool:
    """Whether `column` is one side of an equality of two columns that is a top-level AND term
    of an ON or of WHERE."""
    equality = column.parent
    if not isinstance(equality, exp.EQ) or not all(
            isinstance(side, exp.Column) for side in (equality.this, equality.expression)):
        return False
    node: exp.Expr | None = equality.parent
    while isinstance(node, (exp.And, exp.Paren)):
        node = node.parent
    return isinstance(node, (exp.Where, exp.Join))


def _counted(column: exp.Column) -> bool:
    """Whether `column` is the one argument of COUNT(DISTINCT ...)."""
    distinct = column.parent
    return isinstance(distinct, exp.Distinct) and len(distinct.expressions) == 1 \
        and isinstance(distinct.parent, exp.Count)
