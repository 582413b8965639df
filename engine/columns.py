"""The columns a query reads: what its answer can depend on in the other individuals' records.

Column-scoped eta (docs/theory.md §11) calibrates a query by the eta of the columns it reads,
and the accountant composes with the eta of every column read so far. The set is a function of
the plan alone (the query text and the policy), never of the data.
"""

from __future__ import annotations

from sqlglot import exp

from .plan import QueryPlan


def columns_read(plan: QueryPlan) -> frozenset[str]:
    """Qualified names (`table.column`) of every policy column the exact query reads.

    That is the WHERE filter, the GROUP BY keys and each aggregate's argument. A table with a
    privacy unit is read through its bounded copy, whose choice of rows hashes every policy
    column of a unit's rows (engine/rewrite.py), so such a query reads them all. Each unit's
    presence and row count are read by every query; the declared etas account for them."""
    table = plan.table
    if table.privacy_unit is not None:
        return frozenset(f"{table.name}.{name}" for name in table.columns)
    names = {col.name for col in plan.group_by}
    for m in plan.measurements:
        names.update(col.name for col in m.kind.columns(m.column))
    if plan.where is not None:
        names.update(col.name.lower() for col in plan.where.find_all(exp.Column))
    unknown = names - set(table.columns)
    if unknown:  # a plan only refers to policy columns; anything else is a bug, so fail closed
        raise ValueError(f"plan of {table.name} reads columns outside the policy: {sorted(unknown)}")
    return frozenset(f"{table.name}.{name}" for name in names)
