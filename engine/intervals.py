"""Intervals of answer columns computed from noisy values by an expression (`1 + AVG(age)`,
`COUNT(*) * 5`, `SUM(x) / COUNT(*)`, a CASE over a SUM), and what each column's statistic can be.

Interval arithmetic over the post-processing expression (docs/theory.md §8, "Intervals"): each
of the n noisy values it reads lies in its own interval at alpha / n, so all do at once with
probability >= 1 - alpha (union bound), and each operation maps the intervals of its operands
to one holding its result. Whatever cannot be bounded this way is said, never left bare.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlglot import exp

from .aggregates import quantile
from .aggregates.avg import Avg
from .aggregates.base import Accuracy, Measured, Operand
from .plan import OutputColumn, QueryPlan
from .plan_memo import per_plan
from .result import ExpectedError
from .sql_types import SqlType

if TYPE_CHECKING:
    import pandas as pd

Bounds = tuple[np.ndarray, np.ndarray]  # per group: the lowest and highest value
Leaf = Callable[[exp.Column], "Bounds | None"]


class NoInterval(Exception):
    """An expression whose interval cannot be computed; the message says why."""


@dataclass(frozen=True)
class Reading:
    """A noisy value an expression reads: its column in the noisy frame, the values its exact
    statistic can take, and its half-widths at a given alpha."""

    column: str
    possible: tuple[float, float]
    halfwidths: Callable[[pd.DataFrame, float], np.ndarray]


def readings(plan: QueryPlan, mechanisms: Mapping[str, Accuracy]) -> dict[str, Reading]:
    """The noisy values post-processing may read, by column: each one-cell measurement and each
    quantile read from a histogram."""
    found: dict[str, Reading] = {}
    for m in plan.measurements:
        if len(m.cells) == 1:
            found[m.cells[0]] = Reading(m.cells[0], m.kind.possible(m.operand),
                                        _noise_widths(mechanisms[m.name]))
    by_name = {m.name: m for m in plan.measurements}
    for column in _quantile_columns(plan):
        counts, q = quantile.parse_value_column(column) or ("", 0.0)
        operand = by_name[counts].operand
        if operand is not None:
            found[column] = Reading(column, (float(operand.bounds[0]), float(operand.bounds[1])),
                                    _quantile_widths(counts, operand, q, mechanisms))
    return found


def _noise_widths(noise: Accuracy) -> Callable[[pd.DataFrame, float], np.ndarray]:
    def widths(frame: pd.DataFrame, alpha: float) -> np.ndarray:
        return np.full(len(frame), noise.accuracy(alpha))
    return widths


def _quantile_widths(counts: str, operand: Operand, q: float, mechanisms: Mapping[str, Accuracy]
                     ) -> Callable[[pd.DataFrame, float], np.ndarray]:
    one = quantile.Quantile("QUANTILE_CONT", "", (), q)

    def widths(frame: pd.DataFrame, alpha: float) -> np.ndarray:
        return one.halfwidths((counts,), operand, frame, mechanisms, alpha)
    return widths


@per_plan
def _quantile_columns(plan: QueryPlan) -> frozenset[str]:
    """The quantile values the plan's outputs read from histograms (remembered per plan)."""
    return frozenset(column.name for out in plan.outputs
                     for column in out.expression.find_all(exp.Column)
                     if quantile.parse_value_column(column.name) is not None)


def reason(out: OutputColumn, plan: QueryPlan, known: Mapping[str, Reading]) -> str | None:
    """Why a noisy output column has no interval in some or all rows (a function of the plan
    alone), or None when it always has one (or is not noisy)."""
    if out.aggregate is not None or not out.measurements:
        return None
    blocked = _blocked(out, plan, known)
    if blocked is not None:
        return blocked
    leaf = _possible_leaf(plan, known)
    for node in out.expression.find_all(exp.Div, exp.IntDiv):
        divisor = evaluate(node.expression, leaf)
        if divisor is not None and divisor[0][0] <= 0 <= divisor[1][0]:
            return ("no interval in rows where the interval of the divisor "
                    f"{_written(node.expression, plan)} reaches 0")
    for log in out.expression.find_all(exp.Ln, exp.Log):
        argument = log.this if isinstance(log, exp.Ln) else log.expression
        bounds = evaluate(argument, leaf)
        if bounds is not None and bounds[0][0] <= 0:
            name = "LN" if isinstance(log, exp.Ln) else "LOG10"
            return (f"no interval in rows where the interval of {name}'s argument reaches 0 or "
                    "below (the logarithm is unbounded below there)")
    return None


def _written(node: exp.Expression, plan: QueryPlan) -> str:
    """`node` as the analyst wrote it: each measurement by its label (COUNT(*), SUM(x)), without
    the casts the rewrite added."""
    labels = {m.name: m.label for m in plan.measurements}
    shown = exp.Paren(this=node.copy())
    for cast in list(shown.find_all(exp.Cast, exp.TryCast)):
        cast.replace(cast.this)
    for column in list(shown.find_all(exp.Column)):
        if column.name in labels:
            column.replace(exp.Var(this=labels[column.name]))
    return shown.this.sql("duckdb")


def _blocked(out: OutputColumn, plan: QueryPlan, known: Mapping[str, Reading]) -> str | None:
    """Why an expression has no interval in any row, or None."""
    if isinstance(_unwrapped(out.expression), _CONDITIONS):
        return "no interval: a condition on noisy values is true or false, not a number"
    try:
        evaluate(out.expression, _possible_leaf(plan, known))
    except NoInterval as exc:
        return (f"no interval: {exc} has no interval rule (intervals follow through "
                "arithmetic, ABS, SQRT, ROUND, FLOOR, CEIL, LEAST, GREATEST, CASE, numeric CAST, "
                "LN, LOG10, EXP and PI)")
    return None


_CONDITIONS = (exp.Predicate, exp.Connector, exp.Not, exp.In, exp.Between, exp.Is, exp.Like)


def _unwrapped(node: exp.Expression) -> exp.Expression:
    while isinstance(node, (exp.Paren, exp.Cast, exp.TryCast)) and not (
            isinstance(node, (exp.Cast, exp.TryCast))
            and node.args["to"].this != exp.DataType.Type.BOOLEAN):
        node = node.this
    return node


def _possible_leaf(plan: QueryPlan, known: Mapping[str, Reading]) -> Leaf:
    """Each noisy value's interval as what its statistic can be; a key's as any value."""
    keys = {key.name: key.type for key in plan.group_by}

    def leaf(column: exp.Column) -> Bounds:
        if column.name in known:
            lo, hi = known[column.name].possible
            return np.array([lo]), np.array([hi])
        if keys.get(column.name) in (SqlType.INT, SqlType.BOOL):
            return np.array([-math.inf]), np.array([math.inf])
        if column.name in keys:
            raise NoInterval("a text or date key in arithmetic")
        raise NoInterval("a noisy value whose interval does not compose")
    return leaf


def possible(out: OutputColumn, plan: QueryPlan, known: Mapping[str, Reading]) -> tuple[float, float] | None:
    """What the exact value of a noisy output column can be on any data (a count >= 0, an AVG
    within its operand's bounds); None for a column that is not noisy."""
    if not out.measurements:
        return None
    if isinstance(out.aggregate, quantile.Quantile) and out.operand is not None:
        return float(out.operand.bounds[0]), float(out.operand.bounds[1])
    if out.aggregate is not None:
        return out.aggregate.possible(out.operand)
    try:
        found = evaluate(out.expression, _possible_leaf(plan, known))
    except NoInterval:
        return -math.inf, math.inf
    return (-math.inf, math.inf) if found is None else (float(found[0][0]), float(found[1][0]))


def halfwidths(out: OutputColumn, plan: QueryPlan, frame: pd.DataFrame, known: Mapping[str, Reading],
               alpha: float) -> np.ndarray:
    """Per group, the half-width around the released value of an interval holding the exact
    value with probability >= 1 - alpha; NaN where none can be computed (`reason` says why)."""
    rows = len(frame)
    if _blocked(out, plan, known) is not None:
        return np.full(rows, np.nan)
    read = sorted({c.name for c in out.expression.find_all(exp.Column) if c.name in known})
    share = alpha / max(len(read), 1)
    cells: dict[str, Bounds] = {}
    for name in read:
        noisy = np.asarray(frame[name], dtype=float)
        width = known[name].halfwidths(frame, share)
        cells[name] = _within(noisy - width, noisy + width, *known[name].possible)

    def point(column: exp.Column) -> Bounds | None:
        if column.name not in frame.columns:
            raise NoInterval(column.name)
        array = _point_values(frame[column.name])
        return array, array

    def ranged(column: exp.Column) -> Bounds | None:
        return cells[column.name] if column.name in cells else point(column)

    try:
        value, interval = evaluate(out.expression, point), evaluate(out.expression, ranged)
    except NoInterval:
        return np.full(rows, np.nan)
    if value is None or interval is None:
        return np.full(rows, np.nan)
    with np.errstate(invalid="ignore"):
        found = np.maximum(value[0] - interval[0], interval[1] - value[0])
    # Where the released value itself is not pinned down (a condition on a text key), or the
    # interval is unbounded (a divisor's interval reaching 0), there is none.
    exact = value[0] == value[1]
    return np.where(np.isfinite(found) & exact, np.maximum(found, 0.0), np.nan) * np.ones(rows)


def _within(low: np.ndarray, high: np.ndarray, least: float, most: float) -> Bounds:
    """An interval cut to what the statistic can be; one wholly outside is moved to the
    nearest end keeping its width (its noise), never shrunk to a point."""
    width = np.minimum(high - low, most - least)
    new_low = np.where(low > most, most - width, np.clip(low, least, most))
    new_high = np.where(high < least, least + width, np.clip(high, least, most))
    return new_low, new_high


def evaluate(node: exp.Expression, leaf: Leaf) -> Bounds | None:
    """The interval of a post-processing expression's value per group, the intervals of the
    columns it reads from `leaf`; None when it is always NULL; NoInterval when it has no rule."""
    if isinstance(node, exp.Column):
        return leaf(node)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        value = np.array([node.this if node.is_string else float(node.this)],
                         dtype=object if node.is_string else float)
        return value, value
    rule = _RULES.get(type(node))
    if rule is None:
        raise NoInterval("POWER" if isinstance(node, exp.Pow) else node.key.upper())
    try:
        found = rule(node, lambda child: evaluate(child, leaf))
    except TypeError:  # text in arithmetic
        raise NoInterval("text in arithmetic") from None
    if found is None:
        return None
    low, high = found
    if low.dtype == object:
        return low, high
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(low), -math.inf, low), np.where(np.isnan(high), math.inf, high)


Child = Callable[[exp.Expression], "Bounds | None"]


def _needed(found: Bounds | None) -> Bounds:
    if found is None:
        raise NoInterval("an always NULL operand")
    return found


def _paren(node: exp.Expression, child: Child) -> Bounds:
    return _needed(child(node.this))


def _neg(node: exp.Expression, child: Child) -> Bounds:
    low, high = _needed(child(node.this))
    return -high, -low


def _point_values(values) -> np.ndarray:
    """A column read as it is, one value per group: a number (a bool as 0/1), or text compared
    by = and IN; a noisy measurement read without a frame (`NoisyCells`) is a number."""
    if isinstance(values, np.ndarray):
        return values.astype(float)
    from pandas.api.types import is_numeric_dtype  # a frame's column (post-processing)

    return values.to_numpy(dtype=float if is_numeric_dtype(values) else object)


def _corners(a: Bounds, b: Bounds, op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Bounds:
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        values = np.stack(np.broadcast_arrays(*(op(x, y) for x in a for y in b)))
    unknown = np.isnan(values).any(axis=0)
    return (np.where(unknown, -math.inf, values.min(axis=0)),
            np.where(unknown, math.inf, values.max(axis=0)))


def _arith(node: exp.Expression, child: Child) -> Bounds:
    a, b = _needed(child(node.this)), _needed(child(node.expression))
    with np.errstate(invalid="ignore", over="ignore"):
        if isinstance(node, exp.Add):
            return a[0] + b[0], a[1] + b[1]
        if isinstance(node, exp.Sub):
            return a[0] - b[1], a[1] - b[0]
    if isinstance(node, exp.Mul):
        return _corners(a, b, np.multiply)
    zero = (b[0] <= 0) & (b[1] >= 0)
    low, high = _corners(a, b, np.divide)
    low, high = np.where(zero, -math.inf, low), np.where(zero, math.inf, high)
    if isinstance(node, exp.IntDiv):
        return np.floor(low), np.ceil(high)
    return low, high


def _abs(node: exp.Expression, child: Child) -> Bounds:
    low, high = _needed(child(node.this))
    crosses = (low <= 0) & (high >= 0)
    return np.where(crosses, 0.0, np.minimum(abs(low), abs(high))), np.maximum(abs(low), abs(high))


def _monotone(function: Callable[[np.ndarray], np.ndarray]) -> Callable[[exp.Expression, Child], Bounds]:
    def rule(node: exp.Expression, child: Child) -> Bounds:
        low, high = _needed(child(node.this))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return function(low), function(high)
    return rule


def _log10(node: exp.Expression, child: Child) -> Bounds:
    """LOG10(x), written LOG(10, x): increasing in x (binding accepts base 10 only)."""
    low, high = _needed(child(node.expression))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log10(low), np.log10(high)


def _pi(node: exp.Expression, child: Child) -> Bounds:
    return np.array([math.pi]), np.array([math.pi])


def _rounded(value: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Rounding half away from zero, as DuckDB's ROUND and casts to integers do (monotone)."""
    return np.sign(value) * np.floor(np.abs(value) * scale + 0.5) / scale


def _round(node: exp.Expression, child: Child) -> Bounds:
    low, high = _needed(child(node.this))
    digits = node.args.get("decimals")
    scale = 10.0 ** (int(digits.this) if isinstance(digits, exp.Literal) else 0)
    return _rounded(low, scale), _rounded(high, scale)


def _extreme(node: exp.Expression, child: Child) -> Bounds | None:
    """LEAST/GREATEST skip NULLs (noisy values never are). An argument wholly beyond a literal
    bound is moved to it keeping its width, so a clamp never shrinks an interval to a point."""
    found = [child(a) for a in [node.this, *node.expressions]]
    present = [f for f in found if f is not None]
    if not present:
        return None
    pick = np.minimum if isinstance(node, exp.Least) else np.maximum
    low, high = present[0]
    for other in present[1:]:
        low, high = pick(low, other[0]), pick(high, other[1])
    width = max(present, key=lambda f: float(np.max(f[1] - f[0], initial=0.0)))
    spread = width[1] - width[0]
    if isinstance(node, exp.Greatest):
        return low, np.maximum(high, low + np.where(high <= low, spread, 0.0))
    return np.minimum(low, high - np.where(high <= low, spread, 0.0)), high


def _cast(node: exp.Expression, child: Child) -> Bounds | None:
    found = child(node.this)
    to = node.args["to"].this
    if found is None or to in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT):
        return found
    if to in (exp.DataType.Type.INT, exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT,
              exp.DataType.Type.TINYINT):
        return _rounded(found[0]), _rounded(found[1])  # a cast to an integer rounds
    raise NoInterval(f"CAST to {node.args['to'].sql('duckdb')}")


def _truth(node: exp.Expression, child: Child) -> tuple[np.ndarray, np.ndarray]:
    """Where a condition is surely true and surely false (neither: it could be either)."""
    if isinstance(node, exp.Paren):
        return _truth(node.this, child)
    if isinstance(node, exp.Not):
        true, false = _truth(node.this, child)
        return false, true
    if isinstance(node, (exp.And, exp.Or)):
        (t1, f1), (t2, f2) = _truth(node.this, child), _truth(node.expression, child)
        return (t1 & t2, f1 | f2) if isinstance(node, exp.And) else (t1 | t2, f1 & f2)
    unknown = np.array([False])
    if isinstance(node, exp.In) and not node.args.get("query"):
        tests = [_truth(exp.EQ(this=node.this, expression=e), child) for e in node.expressions]
        if not tests:
            return unknown, unknown
        return (np.logical_or.reduce([t for t, _ in tests]),
                np.logical_and.reduce([f for _, f in tests]))
    if not isinstance(node, (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.NEQ)):
        try:  # a bool key or a number: true where surely not 0, false where surely 0
            value = _needed(child(node))
        except NoInterval:
            return unknown, unknown
        if value[0].dtype == object:
            return unknown, unknown
        return (value[0] > 0) | (value[1] < 0), (value[0] == 0) & (value[1] == 0)
    try:
        a, b = _needed(child(node.this)), _needed(child(node.expression))
    except NoInterval:
        return unknown, unknown
    if a[0].dtype == object or b[0].dtype == object:  # text: points compared by = only
        if not isinstance(node, (exp.EQ, exp.NEQ)) or a[0].dtype != b[0].dtype:
            return unknown, unknown
        same = np.asarray(a[0] == b[0], dtype=bool)
        return (same, ~same) if isinstance(node, exp.EQ) else (~same, same)
    if isinstance(node, (exp.EQ, exp.NEQ)):
        same = (a[0] == a[1]) & (b[0] == b[1]) & (a[0] == b[0])
        apart = (a[1] < b[0]) | (b[1] < a[0])
        return (same, apart) if isinstance(node, exp.EQ) else (apart, same)
    if isinstance(node, (exp.LT, exp.LTE)):
        a, b = b, a
    if isinstance(node, (exp.GT, exp.LT)):
        return a[0] > b[1], a[1] <= b[0]
    return a[0] >= b[1], a[1] < b[0]


def _case(node: exp.Expression, child: Child) -> Bounds | None:
    """The hull of the results of the branches that can be taken: a branch is skipped where
    its condition is surely false, and none after one that is surely true."""
    low: np.ndarray = np.array([math.inf])
    high: np.ndarray = np.array([-math.inf])
    open_ = np.array([True])
    branches = [(b.this, b.args["true"]) for b in node.args.get("ifs") or []]
    default = node.args.get("default")
    for condition, result in [*branches, (None, default)]:
        true, false = _truth(condition, child) if condition is not None \
            else (np.array([True]), np.array([False]))
        taken = open_ & ~false
        found = child(result) if result is not None else None
        if found is not None:
            low = np.where(taken, np.minimum(low, found[0]), low)
            high = np.where(taken, np.maximum(high, found[1]), high)
        open_ = open_ & ~true
    empty = low > high  # only NULL can be the result
    return np.where(empty, np.nan, low), np.where(empty, np.nan, high)


_RULES: dict[type[exp.Expression], Callable[[exp.Expression, Child], Bounds | None]] = {
    exp.Paren: _paren, exp.Neg: _neg, exp.Abs: _abs, exp.Round: _round,
    **{kind: _arith for kind in (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv)},
    exp.Sqrt: _monotone(lambda v: np.sqrt(np.maximum(v, 0.0))), exp.Floor: _monotone(np.floor),
    exp.Ceil: _monotone(np.ceil), exp.Least: _extreme, exp.Greatest: _extreme,
    # Increasing functions of released values (NaN below their domain reads as unbounded).
    exp.Ln: _monotone(np.log), exp.Exp: _monotone(np.exp), exp.Log: _log10, exp.Pi: _pi,
    exp.Cast: _cast, exp.TryCast: _cast, exp.Case: _case,
}


def expected_errors(plan: QueryPlan, mechanisms: Mapping[str, Accuracy],
                    alpha: float) -> tuple[ExpectedError, ...]:
    """Each noisy output's expected error at 1 - alpha before the data is read: a measurement's
    half-width, an AVG's formula in its group's rows and mean (`ExpectedError.at`, what
    `Avg.halfwidths` gives once the noisy count is well above its noise), else none."""
    labels = {m.name: m.label for m in plan.measurements}
    found = []
    for out in plan.outputs:
        if not out.measurements:
            continue
        function = _function(out, labels)
        if isinstance(out.aggregate, Measured) and len(out.measurements) == 1:
            found.append(ExpectedError(out.name, function,
                                       halfwidth=mechanisms[out.measurements[0]].accuracy(alpha)))
        elif isinstance(out.aggregate, Avg) and out.operand is not None:
            total, count = out.measurements
            lo, hi = out.operand.bounds
            found.append(ExpectedError(out.name, function,
                                       sum_error=mechanisms[total].accuracy(alpha / 2),
                                       count_error=mechanisms[count].accuracy(alpha / 2),
                                       widest=float(max(abs(lo), abs(hi)))))
        else:
            found.append(ExpectedError(out.name, function))
    return tuple(found)


def _function(out: OutputColumn, labels: Mapping[str, str]) -> str:
    """How an output's aggregate is named: its measurement's label, AVG(operand), or its SQL."""
    if isinstance(out.aggregate, Measured) and len(out.measurements) == 1:
        return labels[out.measurements[0]]
    if out.aggregate is not None and out.operand is not None:
        return out.aggregate.describe(out.operand)
    return out.name
