"""Binding an aggregate over released rows (docs/theory.md §33): `SELECT AVG(c) FROM (SELECT
state, COUNT(*) AS c FROM t GROUP BY state)`. The inner query is bound as the release (its
measurements, sensitivities and one charge); the outer SUM, AVG, MIN, MAX or COUNT(*) of its
columns replaces its outputs, computed after noise by post-processing. Text and policy only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import OutputColumn, QueryPlan
from ..policy import Policy
from ..released_aggregates import Over, OverReleased
from .flatten import flatten
from .released import released_source
from .scalars import short

Build = Callable[[exp.Select, Policy, str, Mapping[str, frozenset[str]] | None], QueryPlan]
_KINDS = {exp.Sum: Over.SUM, exp.Avg: Over.AVG, exp.Min: Over.MIN, exp.Max: Over.MAX,
          exp.Count: Over.COUNT}
_ASKED = "SUM, AVG, MIN or MAX of one of its noisy columns, or COUNT(*), each alone in a SELECT item"
_OUTER = {"where": "WHERE", "group": "GROUP BY", "having": "HAVING", "order": "ORDER BY",
          "limit": "LIMIT", "offset": "OFFSET", "distinct": "DISTINCT", "joins": "JOIN",
          "qualify": "QUALIFY", "windows": "WINDOW"}
_INNER = {"having": "HAVING", "order": "ORDER BY", "limit": "LIMIT", "offset": "OFFSET",
          "distinct": "DISTINCT"}


def bind_over_released(select: exp.Select, policy: Policy, sql: str,
                       data_columns: Mapping[str, frozenset[str]] | None, build: Build) -> QueryPlan:
    """The inner query's plan with the outer aggregates as its outputs (one row)."""
    found = released_source(select)
    assert found is not None
    body, name, rest, what = found
    for key, clause in _OUTER.items():
        if select.args.get(key):
            raise QueryRefused(f"{clause} in an aggregate over the released rows of {what} refused: "
                               f"it aggregates every released row with {_ASKED}")
    for key, clause in _INNER.items():
        if body.args.get(key):
            raise QueryRefused(f"{clause} in {what} refused before an aggregate over its released "
                               "rows: the aggregate reads every row (which rows a noisy HAVING "
                               "or LIMIT keeps would depend on the noise)")
    inner = body.copy()
    inner.set("with_", exp.With(expressions=[c.copy() for c in rest]) if rest else None)
    flat = flatten(inner, policy)
    plan = build(flat, policy, sql, data_columns)
    columns = {out.name.lower(): out for out in plan.outputs}
    rows = plan.group_count if plan.group_by else 1
    outputs: list[OutputColumn] = []
    for item in select.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        kind = _KINDS.get(type(node))
        if kind is None or isinstance(node.this, exp.Distinct) \
                or (kind == Over.COUNT and not isinstance(node.this, exp.Star)):
            raise QueryRefused(f"{short(node)} over the released rows of {what} refused: "
                               f"ask {_ASKED}")
        column = None
        if kind != Over.COUNT:
            column = _column(node.this, columns, name, what)
        aggregate = OverReleased(kind, column, rows)
        shown = item.alias if isinstance(item, exp.Alias) else node.sql(dialect="duckdb")
        if shown.lower() in {out.name.lower() for out in outputs}:
            raise QueryRefused(f"two columns are named {shown}: give each its own name with AS")
        outputs.append(OutputColumn(shown, aggregate.sql(), aggregate,
                                    () if column is None else column.measurements,
                                    None if column is None else column.operand))
    if not any(out.measurements for out in outputs):
        raise QueryRefused(f"COUNT(*) over the released rows of {what} is the number of its public "
                           f"keys ({rows}), nothing to release: ask it with {_ASKED}")
    return replace(plan, outputs=tuple(outputs), flattened_sql="")


def _column(node: exp.Expression, columns: Mapping[str, OutputColumn], name: str,
            what: str) -> OutputColumn:
    """The released column an outer aggregate reads: one noisy aggregate of the inner query."""
    if not isinstance(node, exp.Column) or node.is_star:
        raise QueryRefused(f"{short(node)} in an aggregate over the released rows of {what} "
                           "refused: aggregate one of its columns by name")
    if node.table and node.table.lower() != name:
        raise QueryRefused(f"unknown table qualifier {node.table!r} in {node.sql()}")
    column = columns.get(node.name.lower())
    if column is None:
        raise QueryRefused(f"column {node.name} is not a column of {what} (its columns: "
                           f"{', '.join(columns)})")
    if not column.measurements:
        raise QueryRefused(f"{node.name} is a key of {what}, public: aggregate one of its noisy "
                           "columns")
    if column.aggregate is None:
        raise QueryRefused(f"{node.name} of {what} is an expression of aggregates: aggregate a "
                           "column that is one aggregate (COUNT, SUM, AVG, ...)")
    return column
