"""AVG(expr): SUM(expr) / COUNT(expr) of noisy measurements, clamped to the operand's bounds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from .base import Accuracy, Aggregate, Binder, Operand
from .count import COUNT
from .sum import SUM, bounded_numeric

if TYPE_CHECKING:
    import pandas as pd


class Avg(Aggregate):
    """AVG: post-processing of a SUM and a COUNT, so it costs their noise and no more."""

    name = "AVG"
    usage = "AVG(expr)"
    function = "AVG"

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Avg) and not isinstance(node.this, exp.Distinct)

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        operand = bounded_numeric(node, binder)
        return clamped_mean(binder.measurement(SUM, operand), binder.measurement(COUNT, operand),
                            operand.bounds)

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        if operand is None:
            raise TypeError("AVG needs an operand")
        lo, hi = operand.bounds
        return float(lo), float(hi)

    def halfwidths(self, measurements: tuple[str, ...], operand: Operand | None,
                   frame: pd.DataFrame, noise: Mapping[str, Accuracy], alpha: float) -> np.ndarray:
        """The widest distance from the clamped mean to a corner of the box that the SUM and
        COUNT intervals (each at alpha / 2, so both hold with probability >= 1 - alpha by the
        union bound) allow, clamped to the operand's bounds. A box wholly outside the bounds
        (the noisy SUM beyond any SUM the count allows) is moved to the nearest bound keeping
        its width, so the interval never collapses to a point that reads as exact."""
        if operand is None:
            raise TypeError("AVG needs an operand")
        total_name, count_name = measurements
        total = np.asarray(frame[total_name], dtype=float)
        count = np.asarray(frame[count_name], dtype=float)
        a_total = noise[total_name].accuracy(alpha / 2)
        a_count = noise[count_name].accuracy(alpha / 2)
        lo, hi = (float(bound) for bound in operand.bounds)
        mean = np.clip(total / np.maximum(count, 1.0), lo, hi)
        positive = count - a_count > 0
        denominators = (np.where(positive, count - a_count, 1.0), count + a_count)
        corners = np.stack([(total + shift) / d for shift in (-a_total, a_total) for d in denominators])
        first, last = corners.min(axis=0), corners.max(axis=0)
        width = np.minimum(last - first, hi - lo)
        low = np.where(first > hi, hi - width, np.clip(first, lo, hi))
        high = np.where(last < lo, lo + width, np.clip(last, lo, hi))
        low, high = np.where(positive, low, lo), np.where(positive, high, hi)
        return np.maximum(mean - low, high - mean)


def greatest(node: exp.Expression, floor: float) -> exp.Greatest:
    """GREATEST(node, floor) as DuckDB's own GREATEST, which skips NULL arguments."""
    return exp.Greatest(this=node, expressions=[exp.Literal.number(floor)], ignore_nulls=True)


AVG = Avg()


def clamped_mean(total: exp.Expression, count: exp.Expression,
                 bounds: tuple[float, float]) -> exp.Expression:
    """The mean of noisy `total` over noisy `count` (at least 1), clamped to the operand's
    bounds: post-processing that keeps an AVG inside the values it averages."""
    lo, hi = bounds
    mean = exp.Div(this=total, expression=greatest(count, 1))
    return exp.Least(this=greatest(mean, lo), expressions=[exp.Literal.number(hi)],
                     ignore_nulls=True)
