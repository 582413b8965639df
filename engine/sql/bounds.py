"""Interval arithmetic for bounds: the public range of a type-checked numeric row expression
(`value_range`) or of a date or timestamp one (`time_range`, in seconds), from the policy's
column bounds and the literals, through every whitelisted scalar that keeps a bound; a refusal
naming what is unbounded otherwise."""

from __future__ import annotations

import math
from collections.abc import Callable

from sqlglot import exp

from ..errors import QueryRefused
from ..sql_types import SqlType
from .calendar import (
    PART_FUNCTIONS,
    PARTS,
    TRUNCS,
    moment,
    seconds,
    time_literal,
    time_part,
    trunc_unit,
    truncate,
)
from .scalars import CAST_TYPES, int_literal, numeric_literal, short

Range = tuple[float, float]
RangeLeaf = Callable[[exp.Column], Range]  # a column's public range (or a refusal naming it)
_PREDICATES = (exp.Predicate, exp.Connector, exp.Not, exp.Boolean, exp.In, exp.Between, exp.Is,
               exp.Like, exp.ILike)


def value_range(node: exp.Expression, leaf: RangeLeaf) -> Range | None:
    """Public bounds of a type-checked numeric row expression by interval arithmetic: each
    column's range comes from `leaf` (the policy's bounds; a condition is 0 or 1), literals are
    their value. None when the expression is always NULL. Refused, naming what is unbounded,
    when no bound follows from the policy (text made a number, division by a range holding 0)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return leaf(node)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        value = numeric_literal(node)
        return value, value
    if isinstance(node, _PREDICATES):
        return 0.0, 1.0
    rule = _RANGES.get(type(node))
    if rule is None:
        raise QueryRefused(
            f"{short(node)} refused in an aggregate: no bound follows from the policy for "
            f"{node.key.upper()}; bounds follow through bounded columns, conditions (0/1), "
            "literals, arithmetic, ABS, SQRT, ROUND, FLOOR, CEIL, LEAST, GREATEST, COALESCE, CASE, "
            "numeric CAST and EXTRACT")
    return rule(node, lambda child: value_range(child, leaf))


def _needed(found: Range | None, node: exp.Expression) -> Range:
    if found is None:
        raise QueryRefused(f"{short(node)} refused in an aggregate: an operand is always NULL")
    return found


def _hull(ranges: list[Range | None]) -> Range | None:
    present = [r for r in ranges if r is not None]
    if not present:
        return None
    return min(r[0] for r in present), max(r[1] for r in present)


def _corners(low: Range, high: Range, op: Callable[[float, float], float]) -> Range:
    values = [op(a, b) for a in low for b in high]
    return min(values), max(values)


def _nonzero(node: exp.Expression, divisor: Range) -> Range:
    if divisor[0] <= 0 <= divisor[1]:
        raise QueryRefused(
            f"{short(node)} refused in an aggregate: the divisor {short(node.expression)} can be 0 "
            f"(its public range is [{divisor[0]:g}, {divisor[1]:g}]), so the quotient has no "
            "bound; divide the aggregate instead, e.g. SUM(x) / 10")
    return divisor


def _arith(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range:
    a, b = _needed(child(node.this), node), _needed(child(node.expression), node)
    if isinstance(node, exp.Add):
        return a[0] + b[0], a[1] + b[1]
    if isinstance(node, exp.Sub):
        return a[0] - b[1], a[1] - b[0]
    if isinstance(node, exp.Mul):
        return _corners(a, b, lambda x, y: x * y)
    if isinstance(node, exp.Mod):  # the sign of the dividend, below both |a| and |b|
        largest = min(max(abs(a[0]), abs(a[1])), max(abs(b[0]), abs(b[1])))
        return (0.0 if a[0] >= 0 else -largest), (0.0 if a[1] <= 0 else largest)
    quotient = _corners(a, _nonzero(node, b), lambda x, y: x / y)
    if isinstance(node, exp.IntDiv):  # DOUBLE operands (hardened) make DuckDB's // a plain /
        return math.floor(quotient[0]), math.ceil(quotient[1])
    return quotient


def _negate(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range:
    lo, hi = _needed(child(node.this), node)
    return -hi, -lo


def _abs(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range:
    lo, hi = _needed(child(node.this), node)
    return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))


def _sqrt_range(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range:
    """A negative argument gives NaN, which the clamp sends to the upper bound."""
    lo, hi = _needed(child(node.this), node)
    return math.sqrt(max(lo, 0.0)), math.sqrt(max(hi, 0.0))


def _rounded(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range:
    lo, hi = _needed(child(node.this), node)
    if isinstance(node, exp.Floor):
        return math.floor(lo), math.floor(hi)
    if isinstance(node, exp.Ceil):
        return math.ceil(lo), math.ceil(hi)
    digits = node.args.get("decimals")
    scale = 10.0 ** (int_literal(digits, "ROUND digits") if digits is not None else 0)
    return math.floor(lo * scale) / scale, math.ceil(hi * scale) / scale


def _extreme(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range | None:
    """LEAST/GREATEST and COALESCE: within the hull of the arguments. LEAST and GREATEST skip
    NULL arguments (LEAST(NULL, 100) is 100), so LEAST is at most the smallest upper bound of the
    arguments that are never NULL, and GREATEST at least the largest such lower bound."""
    arguments = [node.this, *node.expressions]
    ranges = [child(a) for a in arguments]
    hull = _hull(ranges)
    if hull is None or isinstance(node, exp.Coalesce):
        return hull
    present = [r for r, a in zip(ranges, arguments, strict=True) if r is not None and never_null(a)]
    if not present:
        return hull
    if isinstance(node, exp.Least):
        return hull[0], min(hull[1], min(r[1] for r in present))
    return max(hull[0], max(r[0] for r in present)), hull[1]


_KEEPS_NULLNESS = (exp.Paren, exp.Neg, exp.Abs, exp.Floor, exp.Ceil, exp.Round, exp.Add, exp.Sub,
                   exp.Mul)


def never_null(node: exp.Expression) -> bool:
    """Whether a row expression is never NULL on any data: a number literal, arithmetic (but
    division, which hardening makes NULL on a zero divisor) and rounding of such, COALESCE,
    LEAST or GREATEST with such an argument, a CASE whose results all are and which has an ELSE.
    Anything else (a column, a condition, a cast) may be NULL."""
    if isinstance(node, exp.Literal):
        return True
    if isinstance(node, (exp.Coalesce, exp.Least, exp.Greatest)):
        return any(never_null(a) for a in [node.this, *node.expressions])
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        return default is not None and never_null(default) and all(
            never_null(branch.args["true"]) for branch in node.args.get("ifs") or [])
    if isinstance(node, _KEEPS_NULLNESS):
        operands = [node.this] + ([node.expression] if isinstance(node, exp.Binary) else [])
        return all(never_null(o) for o in operands)
    return False


def _case_range(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range | None:
    results = [branch.args["true"] for branch in node.args.get("ifs") or []]
    if node.args.get("default") is not None:
        results.append(node.args["default"])
    return _hull([child(r) for r in results])


def _cast_range(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range | None:
    if CAST_TYPES.get(node.args["to"].this) == SqlType.BOOL:
        return 0.0, 1.0
    found = child(node.this)
    if found is None or CAST_TYPES.get(node.args["to"].this) == SqlType.FLOAT:
        return found
    return math.floor(found[0]), math.ceil(found[1])  # a cast to an integer rounds


_RANGES: dict[type[exp.Expression], Callable[[exp.Expression, Callable[[exp.Expression], Range | None]],
                                             Range | None]] = {
    **{kind: _arith for kind in (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)},
    exp.Neg: _negate, exp.Abs: _abs, exp.Sqrt: _sqrt_range, exp.Floor: _rounded, exp.Ceil: _rounded,
    exp.Round: _rounded,
    exp.Least: _extreme, exp.Greatest: _extreme, exp.Coalesce: _extreme, exp.Case: _case_range,
    exp.Cast: _cast_range, exp.TryCast: _cast_range,
}


def time_range(node: exp.Expression, leaf: RangeLeaf) -> Range | None:
    """Public bounds (as `seconds`) of a type-checked date or timestamp expression: a column's
    from `leaf` (the values it is read in), a literal's its value; a cast or date_trunc stays
    within its operand's bounds once truncated. None when it is always NULL."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return leaf(node)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, (exp.Cast, exp.TryCast)):
        operand = node.this
        while isinstance(operand, exp.Paren):
            operand = operand.this
        if isinstance(operand, exp.Literal) and operand.is_string:
            value = seconds(time_literal(operand.this, CAST_TYPES[node.args["to"].this]))
            return value, value
        return time_range(operand, leaf)
    if isinstance(node, TRUNCS):
        found = time_range(node.this, leaf)
        unit = trunc_unit(node)
        return None if found is None else \
            (seconds(truncate(moment(found[0]), unit)), seconds(truncate(moment(found[1]), unit)))
    if isinstance(node, exp.Case):
        results = [branch.args["true"] for branch in node.args.get("ifs") or []]
        if node.args.get("default") is not None:
            results.append(node.args["default"])
        return _hull([time_range(r, leaf) for r in results])
    if isinstance(node, (exp.Coalesce, exp.Least, exp.Greatest)):
        return _hull([time_range(c, leaf) for c in [node.this, *node.expressions]])
    raise QueryRefused(f"{short(node)} refused: no bound on its dates follows from the policy; "
                       "bounds follow through date and timestamp columns, literals, CAST, "
                       "date_trunc, CASE and COALESCE")


def _extract_range(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range | None:
    """EXTRACT's value range: fixed for every part but YEAR, whose range is the years of its
    argument's bounds (a refusal naming the column when it has none)."""
    fixed = PARTS[time_part(node)]
    if fixed is not None:
        return float(fixed[0]), float(fixed[1])
    argument = node.expression if isinstance(node, exp.Extract) else node.this
    found = time_range(argument, lambda column: _needed(child(column), column))
    if found is None:
        return None
    return float(moment(found[0]).year), float(moment(found[1]).year)




_RANGES[exp.Extract] = _extract_range
_RANGES.update({kind: _extract_range for kind in PART_FUNCTIONS})
