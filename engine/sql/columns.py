"""The columns a query reads: what its answer can depend on in the other individuals' records.

Column-scoped eta (docs/theory.md §11) calibrates a query by the eta of the columns it reads,
and the accountant composes with the eta of every column read so far. The set is a function of
the plan alone (the query text and the policy), never of the data.
"""

from __future__ import annotations

from sqlglot import exp

from ..plan import QueryPlan
from ..rewrite import rewrite
from ..stored_clamps import PREFIX


def columns_read(plan: QueryPlan) -> frozenset[str]:
    """Qualified names (`table.column`) of every policy column the exact query reads.

    That is the WHERE filter, the GROUP BY keys and each aggregate's argument: every policy
    column named anywhere in the query that runs (`rewrite(plan)`), so a new query form cannot
    read a column this misses; a column's stored clamped value (`__clamped_<column>`, §34)
    reads that column. A table with a privacy unit is read through its bounded copy,
    whose choice of rows hashes every policy column of a unit's rows (engine/rewrite.py), so
    such a query reads them all. A join to a parent table reads every parent column too: the
    one row kept per key is chosen by all of them (engine/rewrite.py), and a join of private
    tables reads every joined private table's columns. A public table's columns
    describe no individual and are never read in this sense. Each unit's presence and row count
    are read by every query; the declared etas account for them."""
    table = plan.table
    joined: frozenset[str] = frozenset()
    for other in plan.join.tables if plan.join is not None else ():
        if other.parent is not None:
            joined |= other.parent.qualified()
        elif other.private is not None:  # read through its bounded copy
            joined |= frozenset(f"{other.table.name}.{name}" for name in other.table.columns)
    if table.privacy_unit is not None:
        return joined | frozenset(f"{table.name}.{name}" for name in table.columns)
    named = {col.name.lower() for col in rewrite(plan).find_all(exp.Column)}
    named |= {name[len(PREFIX):] for name in named if name.startswith(PREFIX)}  # a stored clamp
    return joined | frozenset(f"{table.name}.{name}" for name in table.columns if name in named)
