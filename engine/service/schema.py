"""The public description of what may be asked: the policy's tables, columns, bounds, domains
and budget, and the SQL the engine accepts. Nothing in it comes from the data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict

from ..aggregates import supported
from ..policy import ColumnSpec, Policy
from ..sql.scalars import SCALARS
from ..sql_types import SqlType

SQL_SHAPE = ("one SELECT over one private table of the policy, possibly through CTEs and FROM-"
             "subqueries that filter, rename or compute its columns and joined to one public table "
             "on its key, to its parent table on its foreign key or to another private table on "
             "their common privacy unit: aggregates (listed) over a WHERE of whitelisted functions "
             "and operators on the listed columns (a list column's items through UNNEST(string_split("
             "col, separator)) AS g(item)), GROUP BY columns with a public domain, HAVING, "
             "ORDER BY and LIMIT on the noisy values; no other joins, no subqueries elsewhere, no "
             "window functions or raw columns")


def _columns(columns: Mapping[str, ColumnSpec]) -> dict:
    return {c.name: {"type": c.type.value, **_bounds(c),
                     "domain": None if c.domain is None else list(c.domain), **_list(c)}
            for c in columns.values()}


def _list(column: ColumnSpec) -> dict:
    """A list column's separator, items read per row and items' domain (docs/theory.md §31)."""
    listed = column.item_list
    if listed is None:
        return {}
    return {"list": {"separator": listed.separator, "max_items": listed.max_items,
                     "domain": None if listed.domain is None else list(listed.domain)}}


def public_schema(policy: Policy) -> dict:
    """The policy as an analyst may see it (JSON-ready)."""
    tables = {}
    for name, table in policy.tables.items():
        tables[name] = {"privacy_unit": table.privacy_unit,
                        "max_rows_per_unit": table.max_rows_per_unit, "columns": _columns(table.columns)}
    public = {name: {"key": table.key, "columns": _columns(table.columns)}
              for name, table in policy.public_tables.items()}
    parents = {name: {"key": table.key, "child": table.child, "foreign_key": table.foreign_key,
                      "columns": _columns(table.columns)}
               for name, table in policy.parent_tables.items()}
    return {"budget": policy.budget_epsilon, "k": policy.k, "eta": policy.eta, "mode": policy.mode,
            "limits": asdict(policy.limits), "tables": tables, "public_tables": public,
            "parent_tables": parents, "sql": SQL_SHAPE,
            "aggregates": supported(), "functions": sorted({s.name for s in SCALARS})}


def _bounds(column: ColumnSpec) -> dict:
    """A column's lower and upper bounds: numbers, or ISO text for a date or timestamp."""
    if column.span is None:
        return {"lower": column.lower, "upper": column.upper}
    if column.type == SqlType.DATE:
        return {"lower": column.span[0].date().isoformat(), "upper": column.span[1].date().isoformat()}
    return {"lower": column.span[0].isoformat(sep=" "), "upper": column.span[1].isoformat(sep=" ")}
