"""Per-unit pre-aggregation (two-level queries, docs/theory.md §29): the inner query grouped by
the privacy unit (and public keys) whose rows an outer aggregate reads, each inner aggregate
clamped to bounds derived from its operand's bounds and the row bound m."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from enum import StrEnum

from sqlglot import exp

from ..policy import TableSpec
from ..sql_types import SqlType
from .base import Operand
from .sum import clamped

PER_UNIT_BOUND = frozenset({"min", "max"})  # DuckDB aggregates its SQL binds beyond the registry's


class Inner(StrEnum):
    """An aggregate the per-unit query may compute over one unit's rows in one group."""

    COUNT = "COUNT"
    COUNT_DISTINCT = "COUNT(DISTINCT)"
    SUM = "SUM"
    AVG = "AVG"
    MIN = "MIN"
    MAX = "MAX"


def derived_bounds(kind: Inner, operand: Operand | None, rows: int) -> tuple[float, float]:
    """The public range of an inner aggregate over at most `rows` rows of one unit whose values
    are clamped to the operand's [lo, hi]: COUNT and COUNT(DISTINCT) in [0, m], COUNT(DISTINCT)
    of a column with public values (a domain, a bool) in [0, min(m, their number)] (§33); SUM
    in [min(0, m·lo), max(0, m·hi)]; AVG, MIN and MAX in [lo, hi] (§29)."""
    if kind == Inner.COUNT_DISTINCT and operand is not None and isinstance(operand.value, exp.Column) \
            and len(operand.columns) == 1 and operand.columns[0].group_values is not None:
        return 0, min(rows, len(operand.columns[0].group_values))
    if kind in (Inner.COUNT, Inner.COUNT_DISTINCT):
        return 0, rows
    if operand is None:
        raise TypeError(f"{kind} needs an operand")
    lo, hi = operand.bounds
    if kind == Inner.SUM:
        return min(0, rows * lo), max(0, rows * hi)
    return lo, hi


@dataclass(frozen=True)
class PerUnitValue:
    """One aggregate of the per-unit query, as the outer query reads it: a column `name` whose
    value lies in [lower, upper] for every unit and group, whatever the data holds."""

    name: str  # the outer query's column (the inner alias, lower-cased)
    kind: Inner
    operand: Operand | None  # None: COUNT(*)
    type: SqlType  # INT or FLOAT
    lower: float
    upper: float

    def sql(self) -> exp.Expr:
        """The aggregate over one group's bounded rows, clamped to [lower, upper] (NULL kept)."""
        if self.kind == Inner.COUNT:
            value: exp.Expr = exp.Count(this=exp.Star() if self.operand is None
                                        else self.operand.value.copy())
        elif self.kind == Inner.COUNT_DISTINCT:
            assert self.operand is not None
            value = exp.Count(this=exp.Distinct(expressions=[self.operand.value.copy()]))
        else:
            assert self.operand is not None
            row = clamped(self.operand)
            if self.kind == Inner.SUM:
                value = exp.Sum(this=row)
            elif self.kind == Inner.AVG:
                value = exp.Div(this=exp.cast(exp.Sum(this=row), "DOUBLE"),
                                expression=exp.cast(exp.Count(this=row.copy()), "DOUBLE"))
                value = exp.Case(ifs=[exp.If(this=exp.GT(this=exp.Count(this=row.copy()),
                                                          expression=exp.Literal.number(0)),
                                             true=value)])
            else:
                value = (exp.Min if self.kind == Inner.MIN else exp.Max)(this=row)
        bounded = Operand(self.name, self.type, exp.paren(value), (), self.lower, self.upper)
        return clamped(bounded)


@dataclass(frozen=True)
class PerUnitKey:
    """A key the per-unit query groups by besides the unit: its row value and public values;
    rows whose key is another value (or NULL) are left out, as everywhere in dpsql."""

    name: str  # the outer query's column, or a hidden "__k<i>" for a key not selected
    value: exp.Expression  # the hardened row-level value over the table's columns
    keys: tuple  # its public values


@dataclass(frozen=True)
class PerUnit:
    """The inner query of a two-level aggregation: the private table read through its bounded
    copy, its WHERE, the unit (exposed as `table.unit`), its keys and its aggregates."""

    table: TableSpec
    where: exp.Expression | None
    keys: tuple[PerUnitKey, ...]
    values: tuple[PerUnitValue, ...]  # the selected aggregates, then those only HAVING reads
    having: exp.Expression | None = None  # over the keys' and values' names: which groups stay

    @property
    def rows_per_unit(self) -> int:
        """The most rows one unit gives the outer query: one per inner group, and a group holds
        at least one of the unit's at most m rows, so min(m, product of the keys' sizes) (§29)."""
        return min(self.table.max_rows_per_unit, math.prod(len(k.keys) for k in self.keys))

    def rows_for(self, summed: bool, operand: Operand | None) -> int:
        """The rows per unit a measurement's sensitivity counts: 1 for a SUM of an inner COUNT,
        COUNT(DISTINCT) or SUM column itself (a unit's values across its groups add up to one value within
        the column's bounds, as its rows are at most m, §29), else `rows_per_unit`."""
        if summed and operand is not None and isinstance(operand.value, exp.Column):
            value = next((v for v in self.values if v.name == operand.value.name), None)
            if value is not None and value.kind in (Inner.COUNT, Inner.COUNT_DISTINCT, Inner.SUM) \
                    and operand.bounds == (value.lower, value.upper):
                return 1
        return self.rows_per_unit

    def rows(self, source: exp.Expression) -> exp.Subquery:
        """The per-unit rows over `source` (the bounded copy): one per unit and key values that
        HAVING keeps, rows with a NULL unit left out (each such row is a unit of its own, §29)."""
        unit = exp.column(self.table.unit, quoted=True)
        items = [unit.copy(), *(exp.alias_(k.value.copy(), k.name, quoted=True) for k in self.keys),
                 *(exp.alias_(v.sql(), v.name, quoted=True) for v in self.values)]
        conditions: list[exp.Expression] = [exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null()))]
        if self.where is not None:
            conditions.append(exp.paren(self.where.copy()))
        conditions += [exp.In(this=k.value.copy(), expressions=[literal(v) for v in k.keys])
                       for k in self.keys]
        query = exp.select(*items).from_(source, copy=False).where(exp.and_(*conditions), copy=False)
        query = query.group_by(unit.copy(), *(k.value.copy() for k in self.keys), copy=False)
        if self.having is not None:
            query = exp.select(exp.Star()).from_(query.subquery("__groups", copy=False), copy=False) \
                .where(self.having.copy(), copy=False)
        return query.subquery("__per_unit", copy=False)


def literal(value: object) -> exp.Expression:
    """A public key value as a SQL literal (a date or timestamp as a TRY_CAST of its text)."""
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
