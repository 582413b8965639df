"""The plan of a query: typed values that every later step reads.

A plan's expressions are sqlglot trees over the policy's columns (before aggregation) or over
group keys and measurement names (after noise). Binding (engine/binding.py) builds plans and
hardens their expressions into forms DuckDB evaluates without error (engine/gate.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp

from .policy import ColumnSpec, TableSpec


@dataclass(frozen=True)
class Measurement:
    """One exact aggregate that is released with noise: COUNT, SUM or COUNT(DISTINCT unit)."""

    kind: str  # "count" | "sum" | "count_distinct"
    column: ColumnSpec | None  # None for COUNT(*) and COUNT(DISTINCT unit)
    name: str  # internal column name in the executed query, e.g. "__m0"

    @property
    def integer(self) -> bool:
        """Whether the exact value is an integer (so the discrete Laplace applies)."""
        return self.kind != "sum" or self.summed.type == "int"

    @property
    def summed(self) -> ColumnSpec:
        """The column a SUM adds up (clamped to its bounds); other measurements have none."""
        if self.kind != "sum" or self.column is None:
            raise TypeError(f"{self.label} adds up no column")
        return self.column

    @property
    def label(self) -> str:
        if self.kind == "count_distinct":
            return "COUNT(DISTINCT unit)"
        inner = "*" if self.column is None else self.column.name
        return f"{self.kind.upper()}({inner})"


@dataclass(frozen=True)
class OutputColumn:
    """One column of the answer: its name and how to compute it from noisy values."""

    name: str
    expression: exp.Expression  # over group keys and measurement names
    function: str | None  # "COUNT", "SUM", "AVG" when the column is exactly one aggregate
    measurements: tuple[str, ...]  # names of the measurements it is computed from
    column: ColumnSpec | None = None  # the aggregated column, for AVG's bounds


@dataclass(frozen=True)
class QueryPlan:
    """Everything later steps need: the table, filter, groups, noisy measurements, outputs."""

    sql: str
    table: TableSpec
    where: exp.Expression | None
    group_by: tuple[ColumnSpec, ...]
    measurements: tuple[Measurement, ...]
    outputs: tuple[OutputColumn, ...]
    having: exp.Expression | None
    order: tuple[exp.Ordered, ...]
    limit: int | None
    offset: int | None

    @property
    def group_count(self) -> int:
        return math.prod(len(col.keys) for col in self.group_by)


