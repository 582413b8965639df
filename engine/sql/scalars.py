"""The scalar whitelist and its type rules: one table that binding, the gate and messages read.

Each allowed scalar function or operator is one `Scalar`: the sqlglot nodes it is written as,
the options each node may carry, and its type rule. Plan binding types expressions with it,
the gate derives its allow-list of DuckDB functions from it (engine/backends/duckdb_gate.py), and refusals list
its functions, so the three cannot disagree. Types are 'int', 'float', 'str', 'bool', 'date',
'timestamp' and 'null'.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlglot import exp

from ..errors import PolicyError, QueryRefused
from ..policy import TIME_TYPES, parse_time

MAX_LITERAL = 1e15

Typer = Callable[[exp.Expression], str]  # the type of a child expression
TypeRule = Callable[[exp.Expression, Typer], str]  # the type of a node, given its children's


@dataclass(frozen=True)
class Scalar:
    """One allowed scalar function or operator and how it is typed."""

    name: str  # as messages name it; functions by their SQL name ("ABS")
    nodes: Mapping[type[exp.Expression], frozenset[str]]  # sqlglot node -> options it may set
    rule: TypeRule
    function: bool  # listed among the allowed functions in messages (operators are not)


_BINARY = frozenset({"this", "expression"})
_ONE_ARG = frozenset({"this"})
_CAST_TYPES = {
    exp.DataType.Type.TINYINT: "int", exp.DataType.Type.SMALLINT: "int",
    exp.DataType.Type.INT: "int", exp.DataType.Type.BIGINT: "int",
    exp.DataType.Type.FLOAT: "float", exp.DataType.Type.DOUBLE: "float",
    exp.DataType.Type.VARCHAR: "str", exp.DataType.Type.TEXT: "str",
    exp.DataType.Type.BOOLEAN: "bool",
    exp.DataType.Type.DATE: "date", exp.DataType.Type.TIMESTAMP: "timestamp",
    exp.DataType.Type.TIMESTAMPNTZ: "timestamp",
}
# EXTRACT's parts (and the functions YEAR(x), MONTH(x), ... that mean the same), each with
# the range of its values; YEAR's follows from the bounds of its argument.
_PARTS: dict[str, tuple[int, int] | None] = {
    "YEAR": None, "QUARTER": (1, 4), "MONTH": (1, 12), "DAY": (1, 31), "DAYOFWEEK": (0, 6),
    "ISODOW": (1, 7), "DAYOFYEAR": (1, 366), "WEEK": (1, 53), "HOUR": (0, 23),
    "MINUTE": (0, 59), "SECOND": (0, 59)}
_PART_ALIASES = {"DOW": "DAYOFWEEK", "DOY": "DAYOFYEAR", "WEEKOFYEAR": "WEEK"}
_PART_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Year: "YEAR", exp.Quarter: "QUARTER", exp.Month: "MONTH", exp.Day: "DAY",
    exp.DayOfMonth: "DAY", exp.DayOfWeek: "DAYOFWEEK", exp.DayOfWeekIso: "ISODOW",
    exp.DayOfYear: "DAYOFYEAR", exp.Week: "WEEK", exp.WeekOfYear: "WEEK", exp.Hour: "HOUR",
    exp.Minute: "MINUTE", exp.Second: "SECOND"}
TRUNC_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR")
_TRUNCS = (exp.TimestampTrunc, exp.DateTrunc)


def _paren(node: exp.Expression, child: Typer) -> str:
    return child(node.this)


def _negation(node: exp.Expression, child: Typer) -> str:
    return numeric(child(node.this), node, "-")


def _arithmetic(node: exp.Expression, child: Typer) -> str:
    numeric(child(node.this), node, "arithmetic")
    numeric(child(node.expression), node, "arithmetic")
    return "float"


def _comparison(node: exp.Expression, child: Typer) -> str:
    common([child(node.this), child(node.expression)], node)
    return "bool"


def _logic(node: exp.Expression, child: Typer) -> str:
    boolean(child(node.this), node)
    boolean(child(node.expression), node)
    return "bool"


def _not(node: exp.Expression, child: Typer) -> str:
    boolean(child(node.this), node)
    return "bool"


def _in(node: exp.Expression, child: Typer) -> str:
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise QueryRefused("IN (subquery) refused: list literal values")
    if not node.expressions:
        raise QueryRefused(f"{short(node.this)} IN () refused: the list is empty; list one value "
                           f"or more, e.g. {short(node.this)} IN (1, 2)")
    common([child(node.this)] + [child(e) for e in node.expressions], node)
    return "bool"


def _between(node: exp.Expression, child: Typer) -> str:
    common([child(node.this), child(node.args["low"]), child(node.args["high"])], node)
    return "bool"


def _is(node: exp.Expression, child: Typer) -> str:
    operand = child(node.this)
    if not isinstance(node.expression, (exp.Null, exp.Boolean)):
        raise QueryRefused("IS is supported only as IS [NOT] NULL, TRUE or FALSE")
    if isinstance(node.expression, exp.Boolean) and operand not in ("bool", "null"):
        # DuckDB would cast the operand to BOOLEAN, which fails on some values.
        raise QueryRefused(f"IS {node.expression.sql()} on a {operand} value refused in "
                           f"{short(node)}: it applies to conditions (bool) only")
    return "bool"


def _like(node: exp.Expression, child: Typer) -> str:
    if node.args.get("escape"):
        raise QueryRefused("LIKE ... ESCAPE refused: not supported")
    text(child(node.this), node)
    text(child(node.expression), node)
    return "bool"


def _one_number(node: exp.Expression, child: Typer) -> str:
    name = node.key.upper()  # ABS, FLOOR or CEIL
    if node.args.get("decimals") or node.args.get("to"):
        raise QueryRefused(f"{name} takes one argument here")
    return numeric(child(node.this), node, name)


def _root(node: exp.Expression, child: Typer) -> str:
    numeric(child(node.this), node, "SQRT")
    return "float"


def _round(node: exp.Expression, child: Typer) -> str:
    decimals = node.args.get("decimals")
    if decimals is not None and (not isinstance(decimals, exp.Literal) or decimals.is_string):
        raise QueryRefused("ROUND's second argument must be a whole number literal")
    if decimals is not None and not -20 <= int_literal(decimals, "ROUND digits") <= 20:
        raise QueryRefused("ROUND's digits must be between -20 and 20")
    return numeric(child(node.this), node, "ROUND")


def _text(node: exp.Expression, child: Typer) -> str:
    return text(child(node.this), node)


def _trim(node: exp.Expression, child: Typer) -> str:
    if node.args.get("expression") or node.args.get("position"):
        raise QueryRefused("TRIM takes one argument here")
    return text(child(node.this), node)


def _length(node: exp.Expression, child: Typer) -> str:
    text(child(node.this), node)
    return "int"


def _substring(node: exp.Expression, child: Typer) -> str:
    text(child(node.this), node)
    for key in ("start", "length"):
        if node.args.get(key) is not None:
            numeric(child(node.args[key]), node, "SUBSTRING")
    return "str"


def _common_of_all(node: exp.Expression, child: Typer) -> str:
    return common([child(node.this)] + [child(e) for e in node.expressions], node)


def _case(node: exp.Expression, child: Typer) -> str:
    if node.this is not None:
        raise QueryRefused("CASE <value> WHEN refused: write CASE WHEN <condition> THEN ...")
    results = []
    for branch in node.args.get("ifs") or []:
        boolean(child(branch.this), branch)
        results.append(child(branch.args["true"]))
    if node.args.get("default") is not None:
        results.append(child(node.args["default"]))
    return common(results, node)


def _cast(node: exp.Expression, child: Typer) -> str:
    to = node.args["to"]
    target = _CAST_TYPES.get(to.this)
    if target is None or to.expressions:
        raise QueryRefused(
            f"CAST to {to.sql(dialect='duckdb')} refused: cast to INTEGER, BIGINT, DOUBLE, "
            "VARCHAR, BOOLEAN, DATE or TIMESTAMP"
        )
    operand = child(node.this)
    if target in ("int", "float") and operand == "str":
        _check_text_to_number(node.this)
    if target in TIME_TYPES:
        _check_to_time(node.this, operand, target)
    elif operand in TIME_TYPES and target != "str":
        raise QueryRefused(f"CAST of the {operand} {short(node.this)} to {target} refused: take a "
                           "number from it with EXTRACT(year|month|day|dow|hour FROM ...)")
    return target


def _check_to_time(operand: exp.Expression, kind: str, target: str) -> None:
    """A date or timestamp comes from a column, another date or timestamp, or an ISO literal
    (DATE '2024-01-01'): DuckDB also reads 'infinity', 'epoch' and years beyond 9999, and a
    cast of text read from the data would be NULL or not depending on the values."""
    while isinstance(operand, exp.Paren):
        operand = operand.this
    if kind in TIME_TYPES or kind == "null":
        return
    if isinstance(operand, exp.Literal) and operand.is_string:
        time_literal(operand.this, target)
        return
    raise QueryRefused(f"CAST of {short(operand)} ({kind}) to {target} refused: write a literal "
                       "such as DATE '2024-01-01' or TIMESTAMP '2024-01-01 08:00:00', or declare "
                       "the column as date or timestamp in the policy")


def time_literal(text_value: str, kind: str) -> dt.datetime:
    """The value of a DATE or TIMESTAMP literal (ISO, years 1 to 9999, no time zone)."""
    try:
        return parse_time(text_value, kind, f"{kind.upper()} literal")
    except PolicyError as exc:
        raise QueryRefused(str(exc)) from None


def time_part(node: exp.Expression) -> str:
    """The part an EXTRACT (or YEAR(x), MONTH(x), ...) takes, by its canonical name."""
    if not isinstance(node, exp.Extract):
        return _PART_FUNCTIONS[type(node)]
    part = node.this
    name = part.this if isinstance(part, exp.Literal) and part.is_string else \
        part.name if isinstance(part, exp.Var) else ""
    name = _PART_ALIASES.get(name.upper(), name.upper())
    if name not in _PARTS:
        raise QueryRefused(f"EXTRACT({part.sql(dialect='duckdb')} FROM ...) refused: the parts "
                           f"accepted are {', '.join(p.lower() for p in _PARTS)} (dow: 0 = "
                           "Sunday; isodow: 1 = Monday)")
    return name


def trunc_unit(node: exp.Expression) -> str:
    """The unit of a date_trunc: one of TRUNC_UNITS."""
    unit = node.args.get("unit")
    name = unit.name.upper() if isinstance(unit, (exp.Var, exp.Literal)) else ""
    if name not in TRUNC_UNITS:
        shown = unit.sql(dialect="duckdb") if unit is not None else "?"
        raise QueryRefused(f"date_trunc({shown}, ...) refused: the units accepted are "
                           f"{', '.join(repr(u.lower()) for u in TRUNC_UNITS)}")
    return name


def _extract(node: exp.Expression, child: Typer) -> str:
    time_part(node)
    operand = child(node.expression if isinstance(node, exp.Extract) else node.this)
    if operand not in TIME_TYPES and operand != "null":
        raise QueryRefused(f"{short(node)} refused: it takes a date or timestamp, not a {operand}")
    return "int"


def _trunc(node: exp.Expression, child: Typer) -> str:
    trunc_unit(node)
    operand = child(node.this)
    if operand not in TIME_TYPES and operand != "null":
        raise QueryRefused(f"{short(node)} refused: it takes a date or timestamp, not a {operand}")
    return "timestamp"


def _all(kinds: tuple[type[exp.Expression], ...], options: frozenset[str]) -> dict:
    return {kind: options for kind in kinds}


_FLOOR_OPTIONS = frozenset({"this", "decimals", "to"})
_LIST_OPTIONS = frozenset({"this", "expressions", "ignore_nulls"})

# The whitelist. Functions are listed in messages in this order.
SCALARS: tuple[Scalar, ...] = (
    Scalar("ABS", {exp.Abs: _ONE_ARG}, _one_number, True),
    Scalar("ROUND", {exp.Round: frozenset({"this", "decimals"})}, _round, True),
    Scalar("FLOOR", {exp.Floor: _FLOOR_OPTIONS}, _one_number, True),
    Scalar("CEIL", {exp.Ceil: _FLOOR_OPTIONS}, _one_number, True),
    Scalar("SQRT", {exp.Sqrt: _ONE_ARG}, _root, True),
    Scalar("LOWER", {exp.Lower: _ONE_ARG}, _text, True),
    Scalar("UPPER", {exp.Upper: _ONE_ARG}, _text, True),
    Scalar("TRIM", {exp.Trim: frozenset({"this", "expression", "position"})}, _trim, True),
    Scalar("LENGTH", {exp.Length: _ONE_ARG}, _length, True),
    Scalar("SUBSTRING", {exp.Substring: frozenset({"this", "start", "length"})}, _substring, True),
    Scalar("COALESCE", {exp.Coalesce: frozenset({"this", "expressions", "is_nvl", "is_null"})},
           _common_of_all, True),
    Scalar("LEAST", {exp.Least: _LIST_OPTIONS}, _common_of_all, True),
    Scalar("GREATEST", {exp.Greatest: _LIST_OPTIONS}, _common_of_all, True),
    Scalar("CAST", {exp.Cast: frozenset({"this", "to"}),
                    exp.TryCast: frozenset({"this", "to", "safe"})}, _cast, True),
    Scalar("CASE", {exp.Case: frozenset({"this", "ifs", "default"})}, _case, True),
    Scalar("EXTRACT", {exp.Extract: _BINARY, **_all(tuple(_PART_FUNCTIONS), _ONE_ARG)}, _extract,
           True),
    Scalar("DATE_TRUNC", _all(_TRUNCS, frozenset({"this", "unit"})), _trunc, True),
    Scalar("( )", {exp.Paren: _ONE_ARG}, _paren, False),
    Scalar("unary -", {exp.Neg: _ONE_ARG}, _negation, False),
    Scalar("arithmetic", _all((exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv), _BINARY),
           _arithmetic, False),
    Scalar("comparison", _all((exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                               exp.NullSafeNEQ), _BINARY), _comparison, False),
    Scalar("AND/OR", _all((exp.And, exp.Or), _BINARY), _logic, False),
    Scalar("NOT", {exp.Not: _ONE_ARG}, _not, False),
    Scalar("IN", {exp.In: frozenset({"this", "expressions", "query", "unnest", "field"})}, _in, False),
    Scalar("BETWEEN", {exp.Between: frozenset({"this", "low", "high"})}, _between, False),
    Scalar("IS", {exp.Is: _BINARY}, _is, False),
    Scalar("LIKE", _all((exp.Like, exp.ILike), _BINARY | {"negate", "escape"}), _like, False),
)
SCALAR_FUNCTIONS = ", ".join(s.name for s in SCALARS if s.function)

_BY_NODE: dict[type[exp.Expression], Scalar] = {kind: s for s in SCALARS for kind in s.nodes}
# Operators whose subclasses (sqlglot dialect variants) carry the same two operands.
_BINARY_NODES = tuple(kind for s in SCALARS if s.rule in (_arithmetic, _comparison, _logic)
                      for kind in s.nodes)
# Options of the other constructs a query may contain (clauses, aggregates, names, literals).
_OPTIONS: dict[type[exp.Expression], frozenset[str]] = {
    **{kind: options for s in SCALARS for kind, options in s.nodes.items()},
    exp.Column: frozenset({"this", "table", "db", "catalog"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Boolean: _ONE_ARG,
    exp.DataType: frozenset({"this", "expressions", "nested", "kind"}),
    exp.If: frozenset({"this", "true", "false"}),
    exp.Count: frozenset({"this", "expressions", "big_int"}),
    exp.Sum: frozenset({"this", "expressions"}), exp.Avg: frozenset({"this", "expressions"}),
    exp.Distinct: frozenset({"expressions"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Order: frozenset({"expressions"}),
    exp.Limit: frozenset({"expression", "limit_options"}), exp.Offset: frozenset({"expression"}),
    exp.Table: frozenset({"this", "alias", "db", "catalog"}),
    exp.TableAlias: frozenset({"this", "columns"}),
}
# Parts of a whitelisted construct that are not scalars themselves (a CASE branch is an If).
_STRUCTURAL = (exp.DataType, exp.Ordered)


def scalar_of(node: exp.Expression) -> Scalar | None:
    """The whitelist entry `node` is an instance of, or None."""
    for kind in type(node).__mro__:
        found = _BY_NODE.get(kind)
        if found is not None:
            return found
    return None


def type_of(node: exp.Expression, where: str, leaf: Callable[[exp.Expression, str], str | None],
            recurse: Callable[[exp.Expression, str], str], shallow: bool = False) -> str:
    """Type-check one whitelisted scalar construct; children are typed by `recurse`, names by
    `leaf`. With `shallow`, only the construct itself is checked (children are checked elsewhere)."""
    if node is None:  # e.g. FLOOR(--1): `--` starts a comment, which ends the arguments
        raise QueryRefused(f"a function in {where} is missing its argument (note that -- starts "
                           "a comment in SQL: write - -1 or -(-1))")
    check_args(node, where)
    leaf_type = leaf(node, where)
    if leaf_type is not None:
        return leaf_type
    if isinstance(node, exp.Literal):
        if node.is_string:
            return "str"
        value = numeric_literal(node)
        return "int" if float(value).is_integer() and "." not in node.this and "e" not in \
            node.this.lower() else "float"
    if isinstance(node, exp.Boolean):
        return "bool"
    if isinstance(node, exp.Null):
        return "null"
    if shallow:
        check_known(node, where)
        return "float"
    scalar = scalar_of(node)
    if scalar is None:
        raise QueryRefused(f"{construct_name(node)} refused in {where}")
    return scalar.rule(node, lambda n: recurse(n, where))


def check_args(node: exp.Expression, where: str) -> None:
    """Refuse a construct carrying an option the engine would silently ignore (e.g. BETWEEN
    SYMMETRIC, LENGTH of bytes): only options that are implemented exactly may be set.
    Constructs outside the whitelist are left to `check_known`, which names them."""
    allowed = _OPTIONS.get(type(node))
    if allowed is None and isinstance(node, _BINARY_NODES):
        allowed = _BINARY
    if allowed is None:
        return
    extra = sorted(k for k, v in node.args.items() if k not in allowed and v not in (None, [], False))
    if extra:
        raise QueryRefused(f"{short(node)} in {where} refused: the option {extra[0]!r} of "
                           f"{node.key.upper()} is not supported")


def check_known(node: exp.Expression, where: str) -> None:
    """Refuse any construct outside the whitelist, naming it."""
    if isinstance(node, exp.If) and isinstance(node.parent, exp.Case):
        return
    if scalar_of(node) is None and not isinstance(node, _STRUCTURAL):
        raise QueryRefused(f"{construct_name(node)} refused in {where}")


def construct_name(node: exp.Expression) -> str:
    """How a refusal names a construct, with the whitelist when it is a function."""
    if isinstance(node, exp.Anonymous):
        return (f"function {node.name}() (not in the whitelist: {SCALAR_FUNCTIONS}; file readers, "
                "table functions and catalog functions are never allowed)")
    if isinstance(node, exp.Func):
        return f"function {node.sql_name()}() (allowed: {SCALAR_FUNCTIONS})"
    return f"construct {node.key.upper()} ({node.sql(dialect='duckdb')[:60]})"


def int_literal(node: exp.Expression, what: str) -> int:
    """A whole-number literal's value, or a refusal naming `what`."""
    try:
        return int(node.this)
    except ValueError:
        raise QueryRefused(f"{what} {node.this} refused: expected a whole number") from None


def numeric_literal(node: exp.Literal) -> float:
    """A numeric literal's value: finite and at most MAX_LITERAL in magnitude."""
    try:
        value = float(node.this)
    except ValueError:
        raise QueryRefused(f"numeric literal {node.this!r} refused: not a number") from None
    if not math.isfinite(value) or abs(value) > MAX_LITERAL:
        raise QueryRefused(
            f"numeric literal {node.this} refused: literals must be finite with magnitude "
            f"at most {MAX_LITERAL:.0e}"
        )
    return value


_PLAIN_NUMBER = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")


def _check_text_to_number(operand: exp.Expression) -> None:
    """Text cast to a number may not smuggle in NaN, infinity or a huge value: it is allowed
    on a column (data, not the analyst's constant) or on a string literal that is a plain
    decimal number within the literal bounds. DuckDB also reads hexadecimal, 'inf', 'nan' and
    underscores, and an expression (CASE, COALESCE, ...) can yield any literal text, so every
    other operand is refused."""
    while isinstance(operand, exp.Paren):
        operand = operand.this
    if isinstance(operand, exp.Column):
        return
    if isinstance(operand, exp.Literal) and operand.is_string:
        if _PLAIN_NUMBER.fullmatch(operand.this) is None:
            raise QueryRefused(f"CAST of {short(operand)} to a number refused: text literals "
                               "cast to numbers must be plain decimal numbers; write the number "
                               "as a literal")
        if abs(float(operand.this)) > MAX_LITERAL:
            raise QueryRefused(f"CAST of {short(operand)} to a number refused: magnitudes "
                               f"above {MAX_LITERAL:.0e} are not accepted")
        return
    raise QueryRefused(f"CAST of the text expression {short(operand)} to a number refused: "
                       "cast a text column or a plain numeric literal instead")


def numeric(kind: str, node: exp.Expression, what: str) -> str:
    """`kind` if it is a number type ('float' for NULL), else a refusal."""
    if kind not in ("int", "float", "null"):
        raise QueryRefused(f"{what} needs numbers but got a {kind} in {short(node)}")
    return "float" if kind == "null" else kind


def boolean(kind: str, node: exp.Expression) -> None:
    """Refuse unless `kind` is a condition's type."""
    if kind not in ("bool", "null"):
        raise QueryRefused(f"expected a condition but got a {kind} in {short(node)}")


def text(kind: str, node: exp.Expression) -> str:
    """'str', or a refusal unless `kind` is text."""
    if kind not in ("str", "null"):
        raise QueryRefused(f"expected text but got {_KIND_NAMES.get(kind, kind)} in {short(node)}")
    return "str"


# How messages name a value's type: an int column is a whole number, never a "float".
_KIND_NAMES = {"int": "a whole number (int)", "float": "a number (float)", "str": "text",
               "bool": "a condition (bool)", "date": "a date", "timestamp": "a timestamp"}


def common(kinds: list[str], node: exp.Expression) -> str:
    """The common type of comparable operands; numbers compare with numbers only, and so on."""
    families = {"float" if k in ("int", "float") else "time" if k in TIME_TYPES else k
                for k in kinds if k != "null"}
    if len(families) > 1:
        hint = "; write a date as DATE '2024-01-01' or a timestamp as TIMESTAMP " \
            "'2024-01-01 08:00:00'" if families == {"str", "time"} else ""
        names = sorted({"time": "date/timestamp", "float": "number", "str": "text",
                        "bool": "condition (bool)"}.get(f, f) for f in families)
        raise QueryRefused(
            f"cannot compare or combine {' and '.join(names)} values in {short(node)}{hint}")
    if not families:
        return "null"
    family = families.pop()
    if family == "float":
        return "int" if all(k in ("int", "null") for k in kinds) else "float"
    if family == "time":  # DuckDB compares a date with a timestamp as midnight of that day
        return "date" if all(k in ("date", "null") for k in kinds) else "timestamp"
    return family


def short(node: exp.Expression) -> str:
    """A construct's SQL, cut to 80 characters for messages."""
    sql = node.sql(dialect="duckdb")
    return sql if len(sql) <= 80 else sql[:77] + "..."


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
    if _CAST_TYPES.get(node.args["to"].this) == "bool":
        return 0.0, 1.0
    found = child(node.this)
    if found is None or _CAST_TYPES.get(node.args["to"].this) == "float":
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


_EPOCH = dt.datetime(1970, 1, 1)


def seconds(moment: dt.datetime) -> float:
    """A date or timestamp as seconds since 1970-01-01 (how ranges carry dates)."""
    return (moment - _EPOCH).total_seconds()


def moment(value: float) -> dt.datetime:
    """The inverse of `seconds`."""
    return _EPOCH + dt.timedelta(seconds=value)


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
            value = seconds(time_literal(operand.this, _CAST_TYPES[node.args["to"].this]))
            return value, value
        return time_range(operand, leaf)
    if isinstance(node, _TRUNCS):
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


def truncate(value: dt.datetime, unit: str) -> dt.datetime:
    """The start of the period of `unit` (TRUNC_UNITS) holding `value`, as DuckDB's date_trunc
    computes it (weeks start on Monday)."""
    day = dt.datetime(value.year, value.month, value.day)
    if unit == "HOUR":
        return day.replace(hour=value.hour)
    if unit == "DAY":
        return day
    if unit == "WEEK":
        return day - dt.timedelta(days=day.weekday())
    if unit == "MONTH":
        return day.replace(day=1)
    if unit == "QUARTER":
        return day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    return day.replace(month=1, day=1)


def periods(first: dt.datetime, last: dt.datetime, unit: str, most: int) -> list[dt.datetime]:
    """The starts of every period of `unit` that meets [first, last], in order; a refusal when
    there are more than `most`."""
    found: list[dt.datetime] = []
    start: dt.datetime | None = truncate(first, unit)
    while start is not None and start <= last:
        if len(found) == most:
            raise QueryRefused(f"date_trunc('{unit.lower()}', ...) would have more than {most} "
                               f"periods from {first} to {last}; use a coarser unit or restrict "
                               "the dates in WHERE")
        found.append(start)
        start = _next_period(start, unit)
    return found


def _next_period(start: dt.datetime, unit: str) -> dt.datetime | None:
    try:
        if unit in ("HOUR", "DAY", "WEEK"):
            return start + {"HOUR": dt.timedelta(hours=1), "DAY": dt.timedelta(days=1),
                            "WEEK": dt.timedelta(days=7)}[unit]
        months = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[unit]
        index = start.year * 12 + start.month - 1 + months
        return start.replace(year=index // 12, month=index % 12 + 1)
    except (OverflowError, ValueError):  # past 9999-12-31
        return None


_DAY_PARTS: dict[str, Callable[[dt.datetime], int]] = {  # as DuckDB computes them
    "YEAR": lambda d: d.year, "QUARTER": lambda d: (d.month - 1) // 3 + 1,
    "MONTH": lambda d: d.month, "DAY": lambda d: d.day, "DAYOFWEEK": lambda d: d.isoweekday() % 7,
    "ISODOW": lambda d: d.isoweekday(), "DAYOFYEAR": lambda d: d.timetuple().tm_yday,
    "WEEK": lambda d: d.isocalendar()[1]}
_ENUMERATED_DAYS = 400


def part_values(part: str, first: dt.datetime, last: dt.datetime) -> tuple[int, ...] | None:
    """The values a part of the day (not of the time) takes from `first` to `last`, in order,
    when they span at most 400 days; else None (the part's whole range applies)."""
    if part not in _DAY_PARTS or (last - first).days > _ENUMERATED_DAYS:
        return None
    days = periods(first, last, "DAY", _ENUMERATED_DAYS + 2)
    return tuple(sorted({_DAY_PARTS[part](day) for day in days}))


def _extract_range(node: exp.Expression, child: Callable[[exp.Expression], Range | None]) -> Range | None:
    """EXTRACT's value range: fixed for every part but YEAR, whose range is the years of its
    argument's bounds (a refusal naming the column when it has none)."""
    fixed = _PARTS[time_part(node)]
    if fixed is not None:
        return float(fixed[0]), float(fixed[1])
    argument = node.expression if isinstance(node, exp.Extract) else node.this
    found = time_range(argument, lambda column: _needed(child(column), column))
    if found is None:
        return None
    return float(moment(found[0]).year), float(moment(found[1]).year)


_RANGES[exp.Extract] = _extract_range
_RANGES.update({kind: _extract_range for kind in _PART_FUNCTIONS})


def normalize_times(tree: exp.Expression) -> exp.Expression:
    """A copy of `tree` with date_part('part', x) written as EXTRACT(part FROM x), the one form
    the whitelist types (sqlglot reads DuckDB's date_part as an unknown function)."""
    def rewrite_one(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() in ("date_part", "datepart") \
                and len(node.expressions) == 2:
            part, value = node.expressions
            if isinstance(part, exp.Literal) and part.is_string:
                return exp.Extract(this=exp.var(part.this.upper()), expression=value)
        return node
    return tree.transform(rewrite_one)
