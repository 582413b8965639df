"""Rewrite a QueryPlan into the one query (a sqlglot tree) that computes its exact measurements.

The query reads the rows per-unit bounding keeps (the bounded copy of a table with a privacy
unit, made once per table by the backend, see engine/backends/bounding.py), filters, clamps
numeric columns to the policy bounds and joins the public domain so that every group appears,
empty or not. The SQL
is a function of the query text and the policy only, never of the data.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from sqlglot import exp

from .join import joined_column
from .plan import GroupKey, Join, QueryPlan, UnitJoin
from .policy import Policy, TableSpec


def rewrite(plan: QueryPlan) -> exp.Select:
    """Return the query (a sqlglot tree the backend renders) yielding one row per group: group
    keys, then each measurement.

    A table with a privacy unit is always read through its bounded copy (see
    engine/backends/bounding.py), whether or not any unit is over the bound, so that the SQL, and
    everything `explain` shows, cannot tell whether one is."""
    source = _bounded_rows(plan)
    keys = [exp.column(col.name, quoted=True) for col in plan.group_by]
    aggregates = (exp.alias_(sql, cell, quoted=True) for m in plan.measurements
                  for cell, sql in zip(m.cells, m.kind.cell_sql(m.operand, plan.table,
                                                                 exp.column(m.row, quoted=True)),
                                       strict=True))
    aggregated = exp.select(*keys, *aggregates).from_(source.subquery("rows", copy=False), copy=False)
    if keys:
        aggregated = aggregated.group_by(*keys, copy=False)
    values = [
        exp.alias_(exp.func("COALESCE", exp.column(cell, "agg", quoted=True), exp.Literal.number(0)),
                   cell, quoted=True)
        for m in plan.measurements for cell in m.cells
    ]
    if not plan.group_by:
        return exp.select(*values).from_(aggregated.subquery("agg", copy=False))
    domain = _domain(plan.group_by)
    on = exp.and_(*(
        exp.EQ(this=exp.column(col.name, "domain", quoted=True),
               expression=exp.column(col.name, "agg", quoted=True))
        for col in plan.group_by
    ))
    domain_keys = [exp.column(col.name, "domain", quoted=True) for col in plan.group_by]
    query = (
        exp.select(*(exp.alias_(k, k.name, quoted=True) for k in domain_keys), *values)
        .from_(domain, copy=False)
        .join(aggregated.subquery("agg", copy=False), on=on, join_type="left", copy=False)
        .order_by(*domain_keys, copy=False)
    )
    return query


BOUNDED_CATALOG = "dpsql_bounded"


def bounded_table_path(table: TableSpec) -> tuple[str, str, str]:
    """Where the bounded copy of `table` lives (on DuckDB a compressed in-memory catalog;
    other backends map this name to their own)."""
    return (BOUNDED_CATALOG, "main", table.name)


def bounded_table(table: TableSpec) -> exp.Table:
    """The bounded copy of `table` as a table reference."""
    catalog, schema, name = bounded_table_path(table)
    return exp.Table(this=exp.to_identifier(name, quoted=True), db=exp.to_identifier(schema),
                     catalog=exp.to_identifier(catalog))


def readable_tables(policy: Policy, types: Mapping[str, Mapping[str, str]]
                    ) -> dict[tuple[str, ...], list[tuple[str, str]]]:
    """Every table a rewritten query may read, with (column, data type) pairs from `types`
    (table -> column -> type): each policy table and, for one with a privacy unit, its bounded
    copy (the unit and the policy's columns), each public table the backend loads and each
    parent table's copy of one row per key. A backend's gate binds queries on them, empty."""
    tables: dict[tuple[str, ...], list[tuple[str, str]]] = {
        (name,): [(col, types[name][col]) for col in sorted(public.columns)]
        for name, public in policy.public_tables.items() if name in types}
    for name, parent in policy.parent_tables.items():
        if name in types:
            table = parent.one_per_key()
            tables[bounded_table_path(table)] = [(col, types[name][col])
                                                 for col in bounded_columns(table)]
    for name, table in policy.tables.items():
        if table.privacy_unit is None:
            tables[(name,)] = [(col, types[name][col]) for col in sorted(table.columns)]
            continue
        columns = [(col, types[name][col]) for col in bounded_columns(table)]
        tables[(name,)] = columns
        tables[bounded_table_path(table)] = columns
    return tables


def bounded_columns(table: TableSpec) -> list[str]:
    """The columns of the bounded copy: the privacy unit, then the policy's columns."""
    return [table.unit] + sorted(table.columns)


def _bounded_rows(plan: QueryPlan) -> exp.Select:
    """Filtered rows of the bounded copy (or of the table, when each row is an individual).

    Rows whose group key is outside the public domain form groups that the domain join
    leaves out; bounding happened before, on the whole table, so they cannot displace
    in-domain rows."""
    table = plan.table
    items: list[exp.Expr] = [
        key.value.copy() if isinstance(key.value, exp.Column) and key.value.name == key.name
        else exp.alias_(key.value.copy(), key.name, quoted=True) for key in plan.group_by]
    needed = {key.name for key in plan.group_by}
    for m in plan.measurements:
        for column in m.kind.columns(m.operand):
            if column.name not in needed:
                needed.add(column.name)
                items.append(exp.column(column.name, quoted=True))
    for m in plan.measurements:
        value = m.kind.row_value(m.operand)
        if value is not None:
            items.append(exp.alias_(value, m.row, quoted=True))
    if any(m.kind.reads_unit for m in plan.measurements):
        items.append(exp.column(table.unit, quoted=True))
    if not items:
        items.append(exp.Literal.number(1))
    source_table: exp.Expression = bounded_table(table) if table.privacy_unit is not None \
        else exp.to_table(table.name, quoted=True)
    if plan.join is not None:
        source_table = _joined(source_table, plan.join)
    rows = exp.select(*items).from_(source_table, copy=False)
    if plan.where is not None:
        rows = rows.where(plan.where.copy(), copy=False)
    return rows


def _joined(private: exp.Expression, join: Join) -> exp.Expression:
    """The private rows joined to the other table, its columns renamed "<table>.<column>".
    On a key: as many rows as the private side (a public key is unique, a parent is read
    through its copy of one row per key). On the unit: the other table's bounded copy, so a
    unit's at most m1 rows meet its at most m2 rows and no other unit's. Bounding, done
    before, bounds the rows either way."""
    other = join.other
    private = private.copy()
    private.set("alias", exp.TableAlias(this=exp.to_identifier("__private", quoted=True)))
    if isinstance(join, UnitJoin):
        source = bounded_table(join.other)
        left, right = join.other.unit, join.other.unit
    else:
        source = exp.to_table(other.name, quoted=True) if join.parent is None \
            else bounded_table(join.parent.one_per_key())
        left, right = join.on.name, join.other.key
    source.set("alias", exp.TableAlias(this=exp.to_identifier("__other", quoted=True)))
    columns = [exp.alias_(exp.column(spec.name, "__other", quoted=True),
                          joined_column(other, name).name, quoted=True)
               for name, spec in sorted(other.columns.items())]
    on = exp.EQ(this=exp.column(left, "__private", quoted=True),
                expression=exp.column(right, "__other", quoted=True))
    rows = (exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier("__private", quoted=True)),
                       *columns)
            .from_(private, copy=False)
            .join(source, on=on, join_type="left" if join.left else "inner", copy=False))
    return rows.subquery("__joined", copy=False)


def _domain(group_by: tuple[GroupKey, ...]) -> exp.Expression:
    """The public group keys as a VALUES table (cross product of every key's domain)."""
    tables = [
        exp.values([(_literal(v),) for v in col.keys], alias=f"d{i}", columns=[col.name])
        for i, col in enumerate(group_by)
    ]
    keys = [exp.alias_(exp.column(col.name, f"d{i}", quoted=True), col.name, quoted=True)
            for i, col in enumerate(group_by)]
    query = exp.select(*keys).from_(tables[0], copy=False)
    for table in tables[1:]:
        query = query.join(table, join_type="cross", copy=False)
    return query.subquery("domain", copy=False)


def _literal(value) -> exp.Expression:
    if isinstance(value, dt.datetime):
        return exp.TryCast(this=exp.Literal.string(value.isoformat(sep=" ")),
                           to=exp.DataType.build("TIMESTAMP"))
    if isinstance(value, dt.date):
        return exp.TryCast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("DATE"))
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    return exp.Literal.number(value)
