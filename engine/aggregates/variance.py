"""VAR_POP, VAR_SAMP (VARIANCE), STDDEV_POP, STDDEV_SAMP (STDDEV) of a bounded operand: from
noisy COUNT, SUM and SUM of squares of the clamped values, so they cost those three and no more."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ..policy import TableSpec
from .base import Accuracy, Aggregate, Binder, Measured, Operand
from .count import COUNT
from .sum import SUM, bounded_numeric, clamped

if TYPE_CHECKING:
    import pandas as pd


class SumOfSquares(Measured):
    """SUM of squared clamped values, a part of VAR and STDDEV (not written by analysts): each
    square lies in [0, max(lo², hi²)], so it moves by m·max(lo², hi²), or 2m·max(lo², hi²)
    across groups."""

    name = "SUM of squares"
    usage = "(part of VAR and STDDEV)"
    function = "SUM"
    bound = frozenset({"sum"})

    def matches(self, node: exp.AggFunc) -> bool:
        return False

    def label(self, operand: Operand | None) -> str:
        value = _operand(operand).name
        return f"SUM(({value}) * ({value}))"

    def integer(self, operand: Operand | None) -> bool:
        return False

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> float:
        lo, hi = _operand(operand).bounds
        return (2 if grouped else 1) * rows_per_unit * max(lo * lo, hi * hi)

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        return 0.0, math.inf

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        value = exp.cast(clamped(_operand(operand)), "DOUBLE")
        return exp.Sum(this=exp.Mul(this=value, expression=value.copy()))


SUM_OF_SQUARES = SumOfSquares()


class Variance(Aggregate):
    """The variance or standard deviation of the clamped values, population or sample."""

    def __init__(self, name: str, nodes: tuple[type[exp.Expression], ...], sample: bool,
                 deviation: bool) -> None:
        self.name = self.function = name
        self.usage = f"{name}(expr)"
        self.nodes = nodes
        self.sample = sample
        self.deviation = deviation

    def matches(self, node: exp.AggFunc) -> bool:
        return type(node) in self.nodes

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        operand = bounded_numeric(node, binder)
        sample, deviation = self.sample, self.deviation
        count = binder.measurement(COUNT, operand)
        total = binder.measurement(SUM, operand)
        squares = binder.measurement(SUM_OF_SQUARES, operand)
        n = _greatest(count, 1)
        mean = exp.Div(this=total, expression=n.copy())
        spread: exp.Expression = exp.Sub(this=exp.Div(this=squares, expression=n.copy()),
                                         expression=exp.Mul(this=mean, expression=mean.copy()))
        if sample:
            spread = exp.Div(this=exp.Mul(this=spread, expression=n.copy()),
                             expression=_greatest(exp.Sub(this=count.copy(),
                                                          expression=exp.Literal.number(1)), 1))
        bounded = exp.Least(this=_greatest(exp.paren(spread), 0),
                            expressions=[exp.Literal.number(_cap(operand, sample))], ignore_nulls=True)
        return exp.Sqrt(this=bounded) if deviation else bounded

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        cap = _cap(_operand(operand), self.sample)
        return 0.0, math.sqrt(cap) if self.deviation else cap

    def halfwidths(self, measurements: tuple[str, ...], operand: Operand | None,
                   frame: pd.DataFrame, noise: Mapping[str, Accuracy], alpha: float) -> np.ndarray:
        """The widest distance from the released value to the ends of the range of values the
        COUNT, SUM and SUM-of-squares intervals (each at alpha / 3, so all hold with probability
        >= 1 - alpha) allow, within [0, the largest variance values in [lo, hi] can have]; a
        group whose COUNT interval reaches below 2 gets that whole range."""
        n, s, q = (np.asarray(frame[name], dtype=float) for name in measurements)
        a_n, a_s, a_q = (noise[name].accuracy(alpha / 3) for name in measurements)
        sample, deviation = self.sample, self.deviation
        cap = _cap(_operand(operand), sample)
        ns = (np.maximum(n - a_n, 1.0), n + a_n)
        means = np.stack([(s + shift) / d for shift in (-a_s, a_s) for d in ns])
        ratios = np.stack([(q + shift) / d for shift in (-a_q, a_q) for d in ns])
        crosses = (means.min(axis=0) <= 0) & (means.max(axis=0) >= 0)
        low_square = np.where(crosses, 0.0, np.minimum(means.min(axis=0) ** 2, means.max(axis=0) ** 2))
        high_square = np.maximum(means.min(axis=0) ** 2, means.max(axis=0) ** 2)
        low, high = ratios.min(axis=0) - high_square, ratios.max(axis=0) - low_square
        if sample:
            factors = [d / np.maximum(d - 1, 1.0) for d in ns]
            low, high = low * np.minimum(*factors), high * np.maximum(*factors)
        usable = n - a_n >= 2
        low = np.where(usable, np.clip(low, 0, cap), 0.0)
        high = np.where(usable, np.clip(high, 0, cap), cap)
        estimate = np.clip((q / np.maximum(n, 1) - (s / np.maximum(n, 1)) ** 2), 0, None)
        if sample:
            estimate = estimate * np.maximum(n, 1) / np.maximum(n - 1, 1)
        estimate = np.clip(estimate, 0, cap)
        if deviation:
            low, high, estimate = np.sqrt(low), np.sqrt(high), np.sqrt(estimate)
        return np.maximum(estimate - low, high - estimate)



VAR_POP = Variance("VAR_POP", (exp.VariancePop,), sample=False, deviation=False)
VAR_SAMP = Variance("VAR_SAMP", (exp.Variance,), sample=True, deviation=False)  # also VARIANCE
STDDEV_POP = Variance("STDDEV_POP", (exp.StddevPop,), sample=False, deviation=True)
STDDEV_SAMP = Variance("STDDEV_SAMP", (exp.StddevSamp, exp.Stddev), sample=True, deviation=True)

# Spellings peers give different meanings, so no one answer is the one the analyst meant.
AMBIGUOUS = {
    "VAR": "VAR is the sample variance in SQL Server but the population variance in "
           "SmartNoise SQL; write VAR_SAMP (or VARIANCE) for the sample, VAR_POP for the population",
    "STD": "STD is the population deviation in MySQL and SmartNoise SQL but the sample deviation in "
           "Spark; write STDDEV_POP for the population, STDDEV_SAMP (or STDDEV) for the sample",
}


def _cap(operand: Operand, sample: bool) -> float:
    """The largest variance values in [lo, hi] can have: (hi − lo)² / 4 for the population,
    twice that for a sample of at least 2."""
    lo, hi = operand.bounds
    return (hi - lo) ** 2 / (2 if sample else 4)


def _greatest(node: exp.Expression, floor: float) -> exp.Greatest:
    return exp.Greatest(this=node, expressions=[exp.Literal.number(floor)], ignore_nulls=True)


def _operand(operand: Operand | None) -> Operand:
    if operand is None:
        raise TypeError("VAR and STDDEV need an operand")
    return operand
