"""SELECT DISTINCT over released rows: the noisy answer's rows de-duplicated after the noise, a
post-processing step of what was released, so its cost and sensitivity are the query's without
it (docs/theory.md §26.1)."""

from __future__ import annotations

from sqlglot import exp

from ..errors import QueryRefused


def released_distinct(select: exp.Select) -> bool:
    """Whether the answer's rows are de-duplicated: `SELECT DISTINCT`; `DISTINCT ON (...)`, which
    keeps one row per value chosen by an order, is refused in one line."""
    distinct = select.args.get("distinct")
    if distinct is None:
        return False
    if distinct.args.get("on") is not None:
        on = ", ".join(e.sql(dialect="duckdb") for e in distinct.args["on"].expressions)
        raise QueryRefused(f"SELECT DISTINCT ON ({on}) refused: write SELECT DISTINCT (released "
                           "rows equal in every value and interval shown once)")
    return True
