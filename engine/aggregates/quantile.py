"""MEDIAN, QUANTILE_CONT (PERCENTILE_CONT), MIN and MAX of a bounded operand, read from one noisy
histogram of its clamped values over equal bins of its public [lower, upper].

The bins come from the policy (the operand's bounds and `limits.quantile_bins`), never from the
data; every quantile of one operand reads the same histogram, so several cost no more than one.
The counts are made in one pass over the rows (each row's bin by arithmetic, checked against the
bin's own edges, then one COUNT grouped by it; engine/rewrite.py). Turning noisy counts into a quantile and its
interval is post-processing, total on any counts.
"""

from __future__ import annotations

import functools
import math
import struct
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from ..errors import QueryRefused
from ..sql_types import SqlType
from .base import Accuracy, Aggregate, Binder, Measured, Operand
from .sum import clamped

if TYPE_CHECKING:
    import pandas as pd

    from ..answer_table import NoisyCells

THRESHOLD_ALPHA = 0.05  # a bin counts towards the estimate when its noisy count beats the noise at this level
_LARGEST = float(2**62)  # noisy counts are read within +-2**62 (the noise's own saturation)


@dataclass(frozen=True)
class Grid:
    """`bins` equal bins of `width` from `lower`: an int operand's whole numbers sit at bin
    centres (one bin per value when its range has at most `bins` values), a float's range is
    cut into `bins`."""

    lower: float
    width: float
    bins: int

    @property
    def edges(self) -> np.ndarray:
        return self.lower + self.width * np.arange(self.bins + 1, dtype=float)

    @property
    def upper(self) -> float:
        return float(self.edges[-1])


def grid(operand: Operand, bins: int) -> Grid:
    """The bins of `operand` under a policy of `bins` quantile bins: a function of the policy."""
    lo, hi = operand.bounds
    if operand.type in (SqlType.INT, SqlType.BOOL):
        start, values = math.floor(lo), math.floor(hi) - math.floor(lo) + 1
        count = min(bins, values)
        return Grid(start - 0.5, values / count, count)
    return Grid(float(lo), (hi - lo) / bins if hi > lo else 1.0, bins)


class Histogram(Measured):
    """COUNT of the clamped values in each bin (not written by analysts): one unit's rows leave
    at most m bins and enter at most m, so the counts move by at most 2m in L1 over all bins and
    groups, grouped or not."""

    name = "HISTOGRAM"
    usage = "(part of MEDIAN, QUANTILE_CONT, MIN and MAX)"
    function = "COUNT"
    bound = frozenset({"count"})
    celled = True
    binned = True

    def __init__(self, bins: int) -> None:
        self.bins = bins

    def matches(self, node: exp.AggFunc) -> bool:
        return False

    def label(self, operand: Operand | None) -> str:
        cut = grid(_operand(operand), self.bins)
        return (f"HISTOGRAM({_operand(operand).name}: {cut.bins} bins of {cut.width:g} "
                f"from {cut.lower:g} to {cut.upper:g})")

    def cells(self, operand: Operand | None) -> int:
        return grid(_operand(operand), self.bins).bins

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> int:
        return 2 * rows_per_unit

    def row_value(self, operand: Operand | None) -> exp.Expr:
        """The clamped value as DOUBLE, once per row (a NaN is clamped to the upper bound)."""
        return exp.cast(clamped(_operand(operand)), "DOUBLE")

    def guess_sql(self, operand: Operand | None, row: exp.Expr) -> exp.Expr:
        """The bin arithmetic puts the row's clamped value `row` in: floor((v - lower) / width),
        at most bins-1, as DOUBLE (rounding can leave it one bin off near an edge). The clamped
        value is never below `lower` (its bounds' lower end, or half a whole number under it),
        so the floor is never below 0 and only its top is capped; NULL stays NULL."""
        cut = grid(_operand(operand), self.bins)
        last = _double(float(cut.bins - 1))
        floor = exp.Floor(this=exp.Div(this=_shifted(row, cut.lower), expression=_double(cut.width)))
        return exp.Case(ifs=[exp.If(this=exp.GT(this=floor, expression=last), true=last.copy())],
                        default=floor.copy())

    def bin_sql(self, operand: Operand | None, row: exp.Expr, guess: exp.Expr) -> exp.Expr:
        """The bin of the row's clamped value `row` (NULL for NULL): bin i holds edge_i <= v <
        edge_i+1 (the first bin has no lower test, the last no upper one), each edge computed as
        the grid computes it (lower + width * i in doubles). The `guess`, or a bin beside it,
        is taken only when the value passes that bin's own tests; a value that fails all three
        (possible only when rounding merges edges) is placed by a binary search over the literal
        edges. Either way a bin is returned only if it is the bin of the definition."""
        cut = grid(_operand(operand), self.bins)
        last = float(cut.bins - 1)

        def edge(i: exp.Expr) -> exp.Expr:
            scaled = exp.Mul(this=_double(cut.width), expression=exp.Paren(this=i))
            return exp.Paren(this=scaled if _zero(cut.lower) else exp.Add(
                this=_double(cut.lower), expression=scaled))

        def holds(i: exp.Expr) -> exp.Expr:  # v is in bin i (i within 0..bins-1)
            above = exp.or_(exp.EQ(this=i.copy(), expression=_double(0.0)),
                            exp.GTE(this=row.copy(), expression=edge(i.copy())), copy=False)
            below = exp.or_(exp.EQ(this=i.copy(), expression=_double(last)),
                            exp.LT(this=row.copy(), expression=edge(exp.Add(
                                this=i.copy(), expression=_double(1.0)))), copy=False)
            return exp.and_(exp.Paren(this=above), exp.Paren(this=below), copy=False)

        before = exp.Sub(this=guess.copy(), expression=_double(1.0))
        after = exp.Add(this=guess.copy(), expression=_double(1.0))
        if within_one(cut.lower, cut.width, cut.bins):  # the guess moved by at most one bin,
            # branch-free; a NULL value's guess is NULL, and so is everything computed from it
            down = exp.and_(exp.GT(this=guess.copy(), expression=_double(0.0)),
                            exp.LT(this=row.copy(), expression=edge(guess.copy())), copy=False)
            up = exp.and_(exp.LT(this=guess.copy(), expression=_double(last)),
                          exp.GTE(this=row.copy(), expression=edge(after.copy())), copy=False)
            return exp.Add(this=exp.Sub(this=guess.copy(), expression=exp.cast(
                exp.Paren(this=down), "DOUBLE")), expression=exp.cast(exp.Paren(this=up), "DOUBLE"))
        found = exp.Case(ifs=[
            exp.If(this=holds(guess), true=guess.copy()),
            exp.If(this=exp.and_(exp.GT(this=guess.copy(), expression=_double(0.0)),
                                 holds(before), copy=False), true=before.copy()),
            exp.If(this=exp.and_(exp.LT(this=guess.copy(), expression=_double(last)),
                                 holds(after), copy=False), true=after.copy()),
        ], default=self._search(cut, row))
        known = exp.Not(this=exp.Is(this=row.copy(), expression=exp.Null()))
        return exp.Case(ifs=[exp.If(this=known, true=found)])

    @staticmethod
    def _search(cut: Grid, row: exp.Expr) -> exp.Expr:
        """The bin by a binary search over the literal edges: the count of edges 1..bins-1 at
        most v, for any non-decreasing edges."""
        def search(first: int, last: int) -> exp.Expr:  # the bin among first..last
            if first == last:
                return _double(float(first))
            middle = (first + last + 1) // 2
            return exp.Case(ifs=[exp.If(this=exp.LT(this=row.copy(),
                                                    expression=_double(float(cut.edges[middle]))),
                                        true=search(first, middle - 1))],
                            default=search(middle, last))
        return search(0, cut.bins - 1)


@functools.lru_cache(maxsize=1024)
def within_one(lower: float, width: float, bins: int) -> bool:
    """Whether, for every double v, the bin guessed as floor((v - lower) / width) within
    0..bins-1 (`guess_sql`'s guess wherever v >= lower, as a clamped value always is) is at most
    one bin from v's bin by the definition (the count of the edges
    lower + width * i, i = 1..bins-1 in doubles, at most v); `bin_sql` then moves the guess by
    one comparison with each of its bin's edges, with no search. Both are non-decreasing step
    functions of v, so this holds exactly when the guess reaches each bin j + 1 no sooner than
    edge j and edge j + 1 no sooner than the guess reaches bin j: checked at the smallest double
    where the guess reaches each bin (a bisection over the doubles in order). A function of the
    policy's grid alone."""
    last = bins - 1
    edges = [lower + width * float(i) for i in range(bins)]

    def guess(v: float) -> float:  # as DuckDB computes it (FLOOR keeps an infinity)
        ratio = (v - lower) / width
        return min(max(math.floor(ratio) if math.isfinite(ratio) else ratio, 0.0), float(last))

    def first(j: int) -> float:  # the smallest double whose guess is at least j (1 <= j <= last)
        low, high = _order(-sys.float_info.max), _order(sys.float_info.max)
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if guess(_double_at(middle)) >= j else (middle + 1, high)
        return _double_at(low)

    reach = {j: first(j) for j in range(1, last + 1)}
    return all(reach[j + 1] >= edges[j] and edges[j + 1] >= reach[j] for j in range(1, last))


def _order(value: float) -> int:
    """The double's place among all doubles, as an integer (0.0 and -0.0 both at 0)."""
    (bits,) = struct.unpack("<q", struct.pack("<d", value))
    return bits if bits >= 0 else -(bits & 0x7FFFFFFFFFFFFFFF)


def _double_at(place: int) -> float:
    """The double at `place` (the inverse of `_order`)."""
    bits = place if place >= 0 else (-place) | -0x8000000000000000
    (value,) = struct.unpack("<d", struct.pack("<q", bits))
    return value


def _shifted(row: exp.Expr, lower: float) -> exp.Expr:
    """v - lower, written as v itself when lower is +0.0 (the same double for every v)."""
    if _zero(lower):
        return row.copy()
    return exp.Paren(this=exp.Sub(this=row.copy(), expression=_double(lower)))


def _zero(value: float) -> bool:
    """Whether `value` is +0.0: v - 0.0 and 0.0 + v equal v for every double v, so the
    arithmetic with it can be left out."""
    return value == 0.0 and math.copysign(1.0, value) > 0


def _double(value: float) -> exp.Expr:
    """A DOUBLE literal that reads back as exactly `value`."""
    return exp.Cast(this=exp.Literal.number(repr(float(value))),
                    to=exp.DataType(this=exp.DType.DOUBLE))


@functools.cache
def histogram(bins: int) -> Histogram:
    """The histogram measurement under a policy of `bins` quantile bins (one per bin count, so
    that quantiles of one operand share it)."""
    return Histogram(bins)


class Quantile(Aggregate):
    """A quantile q of the clamped values: `q` fixed (MEDIAN 0.5, MIN 0, MAX 1) or a literal
    argument (QUANTILE_CONT(expr, q))."""

    def __init__(self, name: str, usage: str, nodes: tuple[type[exp.Expression], ...],
                 q: float | None) -> None:
        self.name = self.function = name
        self.usage = usage
        self.nodes = nodes
        self.q = q

    def matches(self, node: exp.AggFunc) -> bool:
        return type(node) in self.nodes

    def for_call(self, node: exp.AggFunc) -> Aggregate:
        return self if self.q is not None else Quantile(self.name, self.usage, self.nodes, self._q(node))

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        q = self._q(node)
        extra = [key for key, value in node.args.items()
                 if value not in (None, [], False) and key not in ("this", "expression")]
        if extra or (self.q is not None and node.args.get("expression") is not None):
            raise QueryRefused(f"{node.sql(dialect='duckdb')} refused: {self.name} takes "
                               f"{'one argument' if self.q is not None else 'an expression and q'}: "
                               f"{self.usage}")
        operand = binder.operand(node, node.this, numeric=True)
        counts = binder.measurement(histogram(binder.quantile_bins), operand)
        return exp.column(value_column(counts.name, q), quoted=True)

    def _q(self, node: exp.AggFunc) -> float:
        """The call's q: this aggregate's own, or its second argument, a number literal in [0, 1]."""
        if self.q is not None:
            return self.q
        arg = node.args.get("expression")
        call = node.sql(dialect="duckdb")
        sign = -1.0 if isinstance(arg, exp.Neg) else 1.0
        arg = arg.this if isinstance(arg, exp.Neg) else arg
        if isinstance(arg, exp.Array):
            raise QueryRefused(f"{call} refused: a list of qs is a SELECT item of its own (one "
                               f"column per q); elsewhere write one {self.name}(expr, q) for each "
                               "(they read one noisy histogram, so several cost no more)")
        if not isinstance(arg, exp.Literal) or arg.is_string:
            raise QueryRefused(f"{call} refused: {self.name} takes a number literal q in [0, 1], "
                               f"e.g. {self.name}(income, 0.9)")
        q = sign * float(arg.this)
        if not 0 <= q <= 1:
            raise QueryRefused(f"{call} refused: q must be in [0, 1], got {q:g}; "
                               "MEDIAN(expr) is q = 0.5")
        return q

    def halfwidths(self, measurements: tuple[str, ...], operand: Operand | None,
                   frame: pd.DataFrame | NoisyCells, noise: Mapping[str, Accuracy],
                   alpha: float) -> np.ndarray:
        """The largest distance from the released value to the ends of the bins the quantile can
        be in when the noise of each of the 2·bins − 1 sums of the first or last j counts is
        within its accuracy at alpha / (2·bins − 1) (all at once with probability >= 1 - alpha,
        union bound); see `envelope`."""
        (counts_name,) = measurements
        counts, cut = _counts(frame, counts_name, _operand(operand))
        mechanism = noise[counts_name]
        q = self.q
        if q is None:
            raise TypeError("a quantile's interval needs its q: use for_call")
        value = values(frame, counts_name, _operand(operand), q, mechanism)
        share = alpha / (2 * cut.bins - 1)
        low, high = envelope(counts, cut, q, lambda terms: mechanism.sum_accuracy(terms, share))
        return np.maximum(value - low, high - value)


def value_column(counts: str, q: float) -> str:
    """The post-processing column holding quantile q read from the histogram `counts`."""
    return f"{counts}@{q!r}"


def parse_value_column(name: str) -> tuple[str, float] | None:
    """(histogram, q) of a `value_column` name, or None for any other column."""
    counts, mark, q = name.partition("@")
    return (counts, float(q)) if mark else None


def values(frame: pd.DataFrame | NoisyCells, counts_name: str, operand: Operand, q: float,
           noise: Accuracy) -> np.ndarray:
    """Quantile q per group, from the noisy counts in `frame` (see `estimate`)."""
    counts, cut = _counts(frame, counts_name, operand)
    return estimate(counts, cut, q, noise.accuracy(THRESHOLD_ALPHA / cut.bins),
                    operand.type in (SqlType.INT, SqlType.BOOL))


def estimate(counts: np.ndarray, cut: Grid, q: float, threshold: float,
             whole: bool = False) -> np.ndarray:
    """Quantile q of each row of noisy counts (groups x bins), linearly interpolated in its bin.

    Negative counts are read as 0. For MIN and MAX (q = 0 or 1), counts at most `threshold` (the
    noise bound at THRESHOLD_ALPHA for every bin at once) are read as 0 too, so that empty bins'
    noise does not pull them to the bounds: q = 0 is the lower edge of the first bin whose noisy
    count exceeds it, q = 1 the upper edge of the last (a row with no count above it uses its
    positive counts); with `whole` (an int operand) they are the smallest and the largest whole
    number in that bin. A row with no positive count (an empty group's noise can give that) gets
    the middle of the range. Total on any input."""
    raw = np.clip(np.nan_to_num(counts, nan=0.0, posinf=_LARGEST, neginf=0.0), 0.0, _LARGEST)
    kept = np.where(raw > threshold, raw, 0.0) if q in (0.0, 1.0) else raw
    used = np.where(kept.sum(axis=1, keepdims=True) > 0, kept, raw)
    total = used.sum(axis=1)
    cumulative = np.cumsum(used, axis=1)
    target = q * total
    reached = (cumulative >= target[:, None]) & (cumulative > 0)
    j = np.argmax(reached, axis=1)
    rows = np.arange(len(used))
    inside = used[rows, j]
    before = cumulative[rows, j] - inside
    fraction = np.clip(np.divide(target - before, inside, out=np.zeros_like(target), where=inside > 0), 0, 1)
    value = cut.edges[j] + fraction * cut.width
    if whole and q == 0.0:
        value = np.ceil(value)
    elif whole and q == 1.0:
        value = np.ceil(value) - 1
    if whole:  # the whole numbers of the range sit half a bin's edge inside it
        value = np.clip(value, cut.lower + 0.5, cut.upper - 0.5)
    return np.where(total > 0, value, (cut.lower + cut.upper) / 2)


def envelope(counts: np.ndarray, cut: Grid, q: float,
             spread: Callable[[int], float]) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the range [low, high] that holds the exact QUANTILE_CONT(q) of the clamped
    values whenever the noise of every sum of the first j counts, and of the last j, is within
    `spread(j)`.

    The exact value lies between the order statistics of ranks floor((n-1)q) + 1 and
    ceil((n-1)q) + 1 (n the rows counted). The exact count up to bin j, C_j, and after it, R_j,
    then lie in whole-number ranges >= 0 around the noisy ones, narrowed by C growing and R
    shrinking with j. The lower rank's bin is at least the first j where it could be reached (C
    at its most, R at its least), the higher rank's at most the first j where it surely is (C at
    its least, R at its most). `high` is the top of that bin, `low` the bottom of the first; no
    bin possible (no row need be counted) gives the whole range."""
    noisy = np.clip(np.nan_to_num(counts, nan=0.0, posinf=_LARGEST, neginf=-_LARGEST), -_LARGEST, _LARGEST)
    bins = noisy.shape[1]
    below = np.cumsum(noisy, axis=1)
    above = below[:, -1:] - below
    prefix = np.array([spread(j + 1) for j in range(bins)])
    suffix = np.array([spread(bins - 1 - j) if j < bins - 1 else 0.0 for j in range(bins)])
    below_low = np.maximum.accumulate(np.maximum(np.ceil(below - prefix), 0.0), axis=1)
    below_high = np.minimum.accumulate(np.maximum(np.floor(below + prefix), 0.0)[:, ::-1], axis=1)[:, ::-1]
    above_low = np.maximum.accumulate(np.maximum(np.ceil(above - suffix), 0.0)[:, ::-1], axis=1)[:, ::-1]
    above_high = np.minimum.accumulate(np.maximum(np.floor(above + suffix), 0.0), axis=1)
    possible = (below_high >= 1) & (below_high >= np.floor((below_high + above_low - 1) * q) + 1)
    certain = (below_low >= 1) & (below_low >= np.ceil((below_low + above_high - 1) * q) + 1)
    edges = cut.edges
    first = np.argmax(possible, axis=1)
    last = np.maximum(np.where(certain.any(axis=1), np.argmax(certain, axis=1), bins - 1), first)
    low = np.where(possible.any(axis=1), edges[first], cut.lower)
    high = np.where(possible.any(axis=1), edges[last + 1], cut.upper)
    return low, high


def _counts(frame: pd.DataFrame | NoisyCells, counts_name: str,
            operand: Operand) -> tuple[np.ndarray, Grid]:
    """The histogram's noisy counts in `frame` (a frame, or the noisy cells of an answer built
    without one; groups x bins) and its bins."""
    present = set(frame.columns)
    names: list[str] = []
    while f"{counts_name}_{len(names)}" in present:
        names.append(f"{counts_name}_{len(names)}")
    if not names:
        raise KeyError(f"no counts of {counts_name} in the noisy table")
    counts = np.empty((len(frame), len(names)))
    for j, name in enumerate(names):
        counts[:, j] = np.asarray(frame[name], dtype=np.float64)
    return counts, grid(operand, len(names))


def _operand(operand: Operand | None) -> Operand:
    if operand is None:
        raise TypeError("a quantile needs an operand")
    return operand


MEDIAN = Quantile("MEDIAN", "MEDIAN(expr)", (exp.Median,), 0.5)
QUANTILE_CONT = Quantile("QUANTILE_CONT", "QUANTILE_CONT(expr, q)", (exp.PercentileCont,), None)
MIN = Quantile("MIN", "MIN(expr) (the 0 quantile of a noisy histogram)", (exp.Min,), 0.0)
MAX = Quantile("MAX", "MAX(expr) (the 1 quantile of a noisy histogram)", (exp.Max,), 1.0)
