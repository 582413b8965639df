"""SUM, AVG, MIN, MAX and COUNT(*) of a released table's rows (docs/theory.md §33): the outer
aggregate of `SELECT AVG(c) FROM (SELECT state, COUNT(*) AS c FROM t GROUP BY state)`, computed
after release from the noisy values, with the interval of the exact aggregate of the exact cells."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from .aggregates import Accuracy, Aggregate, Measured, Operand
from .noise import Mechanism
from .plan import OutputColumn
from .workload_intervals import sum_halfwidth

if TYPE_CHECKING:
    import pandas as pd


class Over(StrEnum):
    """An aggregate of released rows."""

    SUM = "SUM"
    AVG = "AVG"
    MIN = "MIN"
    MAX = "MAX"
    COUNT = "COUNT"


@dataclass(frozen=True)
class OverReleased(Aggregate):
    """`kind` of the released column `column` (None: COUNT(*)) over every one of the `rows`
    released rows (the public keys' product)."""

    kind: Over
    column: OutputColumn | None
    rows: int

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.kind.value

    def sql(self) -> exp.Expression:
        """The aggregate over the post-processing table's rows: a SUM of integer cells stays an
        integer, an AVG is the DOUBLE mean."""
        if self.column is None:
            return exp.Count(this=exp.Star())
        value = self.column.expression.copy()
        if self.kind in (Over.MIN, Over.MAX):
            return (exp.Min if self.kind == Over.MIN else exp.Max)(this=value)
        if self.kind == Over.SUM and self.integer:
            return exp.TryCast(this=exp.Sum(this=value), to=exp.DataType.build("BIGINT"))
        total = exp.Sum(this=exp.cast(value, "DOUBLE"))
        if self.kind == Over.SUM:
            return total
        return exp.Div(this=total, expression=exp.cast(exp.Count(this=exp.Star()), "DOUBLE"))

    @property
    def integer(self) -> bool:
        """Whether the column is one integer measurement's noisy value as it is."""
        if self._cell() is None:
            return False
        assert self.column is not None and isinstance(self.column.aggregate, Measured)
        return self.column.aggregate.integer(self.column.operand)

    def _cell(self) -> str | None:
        """The one noisy cell the column is, as released (COUNT(*), SUM(x)), else None."""
        column = self.column
        if column is None or not isinstance(column.aggregate, Measured) \
                or len(column.measurements) != 1 or not isinstance(column.expression, exp.Column):
            return None
        return column.measurements[0] if column.expression.name == column.measurements[0] else None

    def halfwidths(self, measurements: tuple[str, ...], operand: Operand | None,
                   frame: pd.DataFrame, noise: Mapping[str, Accuracy], alpha: float) -> np.ndarray:
        """Per row, the half-width of the one aggregated value (the same in every row; §33). A
        SUM or AVG of one measurement's cells as released: the exact law of the sum of their
        i.i.d. noises (`sum_halfwidth`); otherwise, with every cell's interval at alpha / rows
        (all hold at once with probability >= 1 - alpha, union bound), the sum of their
        half-widths (SUM; over the rows for AVG) or the largest (MIN, MAX); 0 for COUNT(*)."""
        rows = len(frame)
        if self.column is None or rows == 0:
            return np.zeros(rows)
        cell = self._cell()
        mechanism = noise.get(cell) if cell is not None else None
        if isinstance(mechanism, Mechanism) and self.kind in (Over.SUM, Over.AVG):
            width = sum_halfwidth(mechanism.mechanism, mechanism.scale, rows, alpha)
            return np.full(rows, width / rows if self.kind == Over.AVG else width)
        inner = self.column.aggregate
        assert inner is not None
        cells = inner.halfwidths(self.column.measurements, self.column.operand, frame, noise, alpha / rows)
        if self.kind == Over.SUM:
            width = float(np.sum(cells))
        elif self.kind == Over.AVG:
            width = float(np.sum(cells)) / rows
        else:
            width = float(np.max(cells))
        return np.full(rows, width)

    def describe(self, operand: Operand) -> str:
        return f"{self.kind}({'*' if self.column is None else self.column.name})"

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        """What the exact aggregate can be: `rows` for COUNT(*); the released column's range,
        times the rows for a SUM."""
        if self.column is None or self.column.aggregate is None:
            return float(self.rows), float(self.rows)
        lo, hi = self.column.aggregate.possible(self.column.operand)
        if self.kind == Over.SUM:
            return lo * self.rows, hi * self.rows
        return lo, hi
