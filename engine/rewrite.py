"""Rewrite a QueryPlan into the one DuckDB query that computes its exact measurements.

The query filters, bounds each privacy unit to `max_rows_per_unit` rows (the kept rows are
chosen by a keyed hash, so the same query always keeps the same rows), clamps numeric columns
to the policy bounds and joins the public domain so that every group appears, empty or not.
"""

from __future__ import annotations

from sqlglot import exp

from .plan import Measurement, QueryPlan
from .policy import ColumnSpec

_HEAVY = "__heavy"


def rewrite(plan: QueryPlan, hash_key: str) -> str:
    """Return DuckDB SQL yielding one row per group: group keys, then each measurement."""
    source = _bounded_rows(plan, hash_key)
    keys = [exp.column(col.name, quoted=True) for col in plan.group_by]
    aggregated = exp.select(*keys, *(_aggregate(m, plan.table.privacy_unit) for m in plan.measurements)).from_(
        source.subquery("rows", copy=False), copy=False
    )
    if keys:
        aggregated = aggregated.group_by(*keys, copy=False)
    values = [
        exp.alias_(exp.func("COALESCE", exp.column(m.name, "agg", quoted=True), exp.Literal.number(0)),
                   m.name, quoted=True)
        for m in plan.measurements
    ]
    if not plan.group_by:
        return exp.select(*values).from_(aggregated.subquery("agg", copy=False)).sql("duckdb")
    domain = _domain(plan.group_by)
    on = exp.and_(*(
        exp.EQ(this=exp.column(col.name, "domain", quoted=True),
               expression=exp.column(col.name, "agg", quoted=True))
        for col in plan.group_by
    ))
    domain_keys = [exp.column(col.name, "domain", quoted=True) for col in plan.group_by]
    query = (
        exp.select(*(exp.alias_(k, k.name, quoted=True) for k in domain_keys), *values)
        .from_(domain)
        .join(aggregated.subquery("agg", copy=False), on=on, join_type="left")
        .order_by(*domain_keys)
    )
    return query.sql("duckdb")


def _bounded_rows(plan: QueryPlan, hash_key: str) -> exp.Query:
    """Filtered rows (with in-domain group keys), at most m per privacy unit."""
    table = plan.table
    needed: dict[str, ColumnSpec] = {col.name: col for col in plan.group_by}
    for m in plan.measurements:
        if m.column is not None:
            needed[m.column.name] = m.column
    items: list[exp.Expression] = [exp.column(name, quoted=True) for name in needed]
    if table.privacy_unit is not None:
        items.append(exp.column(table.privacy_unit, quoted=True))
    if not items:
        items.append(exp.Literal.number(1))
    conditions = [plan.where.copy()] if plan.where is not None else []
    for col in plan.group_by:
        values = [_literal(v) for v in col.group_values]
        conditions.append(exp.In(this=exp.column(col.name, quoted=True), expressions=values))
    rows = exp.select(*items).from_(exp.to_table(table.name, quoted=True))
    if conditions:
        rows = rows.where(exp.and_(*conditions), copy=False)
    if table.privacy_unit is None or _bounding_is_void(plan):
        return rows
    return _bounded(rows, table.name, table.privacy_unit, table.max_rows_per_unit, hash_key)


def _bounding_is_void(plan: QueryPlan) -> bool:
    """Ungrouped COUNT(DISTINCT unit) alone: every unit keeps >= 1 row, so bounding changes nothing."""
    return not plan.group_by and all(m.kind == "count_distinct" for m in plan.measurements)


def _bounded(rows: exp.Select, table: str, unit: str, limit: int, hash_key: str) -> exp.Query:
    """Keep every row of units with at most `limit` filtered rows; rank only the other units.

    Same rows as ranking every unit by HASH(rowid, key): a unit within the limit keeps all its
    rows either way. The per-unit count is one hash aggregate, materialised once; the window (a
    sort per unit) runs only on the rows of heavy units, which the skew keeps few. rowid breaks
    hash ties, so the choice is deterministic even then.
    """
    unit_col = exp.column(unit, quoted=True)
    heavy = (
        rows.select(unit_col.copy(), append=False)
        .group_by(unit_col.copy(), copy=False)
        .having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(limit)),
                copy=False)
    )
    on = exp.NullSafeEQ(this=exp.column(unit, table, quoted=True),
                        expression=exp.column(unit, _HEAVY, quoted=True))
    light = rows.join(exp.to_table(_HEAVY, quoted=True), on=on, join_type="ANTI")
    row_id = exp.column("rowid", table, quoted=False)
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[unit_col.copy()],
        order=exp.Order(expressions=[
            exp.Ordered(this=exp.func("HASH", row_id, exp.Literal.string(hash_key))),
            exp.Ordered(this=row_id.copy()),
        ]),
    )
    ranked = rows.join(exp.to_table(_HEAVY, quoted=True), on=on.copy(), join_type="SEMI").qualify(
        exp.LTE(this=rank, expression=exp.Literal.number(limit)), copy=False
    )
    return exp.union(light, ranked, distinct=False).with_(_HEAVY, as_=heavy, materialized=True)


def _aggregate(m: Measurement, unit: str | None) -> exp.Expression:
    if m.kind == "count_distinct":
        inner = exp.Count(this=exp.Distinct(expressions=[exp.column(unit, quoted=True)]))
    elif m.kind == "count":
        inner = exp.Count(this=exp.Star() if m.column is None
                          else exp.column(m.column.name, quoted=True))
    else:
        inner = exp.Sum(this=_clamped(m.column))
    return exp.alias_(inner, m.name, quoted=True)


def _clamped(column: ColumnSpec) -> exp.Expression:
    """CASE-based clamp: unlike GREATEST/LEAST it keeps NULL as NULL (skipped by SUM)."""
    value = exp.column(column.name, quoted=True)
    if column.type == "float":
        value = exp.cast(value, "DOUBLE")
    lo, hi = _literal(column.lower), _literal(column.upper)
    return (
        exp.Case()
        .when(exp.LT(this=value, expression=lo), lo)
        .when(exp.GT(this=value.copy(), expression=hi), hi.copy())
        .else_(value.copy())
    )


def _domain(group_by: tuple[ColumnSpec, ...]) -> exp.Expression:
    """The public group keys as a VALUES table (cross product of every key's domain)."""
    tables = [
        exp.values([(_literal(v),) for v in col.group_values], alias=f"d{i}", columns=[col.name])
        for i, col in enumerate(group_by)
    ]
    keys = [exp.alias_(exp.column(col.name, f"d{i}", quoted=True), col.name, quoted=True)
            for i, col in enumerate(group_by)]
    query = exp.select(*keys).from_(tables[0])
    for table in tables[1:]:
        query = query.join(table, join_type="cross")
    return query.subquery("domain")


def _literal(value) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    return exp.Literal.number(value)
