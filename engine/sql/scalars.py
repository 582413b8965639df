"""The scalar whitelist and its type rules: one table that binding, the gate and messages read.

Each allowed scalar function or operator is one `Scalar`: the sqlglot nodes it is written as,
the options each node may carry, and its type rule. Plan binding types expressions with it,
the gate derives its allow-list of DuckDB functions from it (engine/backends/duckdb_gate.py),
and refusals list its functions, so the three cannot disagree. Types are SqlType values (int,
float, str, bool, date, timestamp and null). The bounds an expression keeps are bounds.py's, the
calendar it computes with calendar.py's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlglot import exp

from ..errors import QueryRefused
from ..sql_types import NUMBER_TYPES, TIME_TYPES, SqlType
from .calendar import PART_FUNCTIONS, TRUNCS, time_literal, time_part, trunc_unit

MAX_LITERAL = 1e15

Typer = Callable[[exp.Expression], SqlType]  # the type of a child expression
TypeRule = Callable[[exp.Expression, Typer], SqlType]  # the type of a node, given its children's


@dataclass(frozen=True)
class Scalar:
    """One allowed scalar function or operator and how it is typed."""

    name: str  # as messages name it; functions by their SQL name ("ABS")
    nodes: Mapping[type[exp.Expression], frozenset[str]]  # sqlglot node -> options it may set
    rule: TypeRule
    function: bool  # listed among the allowed functions in messages (operators are not)


_BINARY = frozenset({"this", "expression"})
_ONE_ARG = frozenset({"this"})
CAST_TYPES = {
    exp.DataType.Type.TINYINT: SqlType.INT, exp.DataType.Type.SMALLINT: SqlType.INT,
    exp.DataType.Type.INT: SqlType.INT, exp.DataType.Type.BIGINT: SqlType.INT,
    exp.DataType.Type.FLOAT: SqlType.FLOAT, exp.DataType.Type.DOUBLE: SqlType.FLOAT,
    exp.DataType.Type.VARCHAR: SqlType.STR, exp.DataType.Type.TEXT: SqlType.STR,
    exp.DataType.Type.BOOLEAN: SqlType.BOOL,
    exp.DataType.Type.DATE: SqlType.DATE, exp.DataType.Type.TIMESTAMP: SqlType.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPNTZ: SqlType.TIMESTAMP,
}


def _paren(node: exp.Expression, child: Typer) -> SqlType:
    return child(node.this)


def _negation(node: exp.Expression, child: Typer) -> SqlType:
    return numeric(child(node.this), node, "-")


def _arithmetic(node: exp.Expression, child: Typer) -> SqlType:
    numeric(child(node.this), node, "arithmetic")
    numeric(child(node.expression), node, "arithmetic")
    return SqlType.FLOAT


def _comparison(node: exp.Expression, child: Typer) -> SqlType:
    common([child(node.this), child(node.expression)], node)
    return SqlType.BOOL


def _logic(node: exp.Expression, child: Typer) -> SqlType:
    boolean(child(node.this), node)
    boolean(child(node.expression), node)
    return SqlType.BOOL


def _not(node: exp.Expression, child: Typer) -> SqlType:
    boolean(child(node.this), node)
    return SqlType.BOOL


def _in(node: exp.Expression, child: Typer) -> SqlType:
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise QueryRefused("IN (subquery) refused: list literal values")
    if not node.expressions:
        raise QueryRefused(f"{short(node.this)} IN () refused: the list is empty; list one value "
                           f"or more, e.g. {short(node.this)} IN (1, 2)")
    common([child(node.this)] + [child(e) for e in node.expressions], node)
    return SqlType.BOOL


def _between(node: exp.Expression, child: Typer) -> SqlType:
    common([child(node.this), child(node.args["low"]), child(node.args["high"])], node)
    return SqlType.BOOL


def _is(node: exp.Expression, child: Typer) -> SqlType:
    operand = child(node.this)
    if not isinstance(node.expression, (exp.Null, exp.Boolean)):
        raise QueryRefused("IS is supported only as IS [NOT] NULL, TRUE or FALSE")
    if isinstance(node.expression, exp.Boolean) and operand not in (SqlType.BOOL, SqlType.NULL):
        # DuckDB would cast the operand to BOOLEAN, which fails on some values.
        raise QueryRefused(f"IS {node.expression.sql()} on a {operand} value refused in "
                           f"{short(node)}: it applies to conditions (bool) only")
    return SqlType.BOOL


def _like(node: exp.Expression, child: Typer) -> SqlType:
    if node.args.get("escape"):
        raise QueryRefused("LIKE ... ESCAPE refused: not supported")
    text(child(node.this), node)
    text(child(node.expression), node)
    return SqlType.BOOL


def _one_number(node: exp.Expression, child: Typer) -> SqlType:
    name = node.key.upper()  # ABS, FLOOR or CEIL
    if node.args.get("decimals") or node.args.get("to"):
        raise QueryRefused(f"{name} takes one argument here")
    return numeric(child(node.this), node, name)


def _root(node: exp.Expression, child: Typer) -> SqlType:
    numeric(child(node.this), node, "SQRT")
    return SqlType.FLOAT


def _round(node: exp.Expression, child: Typer) -> SqlType:
    decimals = node.args.get("decimals")
    if decimals is not None and (not isinstance(decimals, exp.Literal) or decimals.is_string):
        raise QueryRefused("ROUND's second argument must be a whole number literal")
    if decimals is not None and not -20 <= int_literal(decimals, "ROUND digits") <= 20:
        raise QueryRefused("ROUND's digits must be between -20 and 20")
    return numeric(child(node.this), node, "ROUND")


def _text(node: exp.Expression, child: Typer) -> SqlType:
    return text(child(node.this), node)


def _trim(node: exp.Expression, child: Typer) -> SqlType:
    if node.args.get("expression") or node.args.get("position"):
        raise QueryRefused("TRIM takes one argument here")
    return text(child(node.this), node)


def _length(node: exp.Expression, child: Typer) -> SqlType:
    text(child(node.this), node)
    return SqlType.INT


def _substring(node: exp.Expression, child: Typer) -> SqlType:
    text(child(node.this), node)
    for key in ("start", "length"):
        if node.args.get(key) is not None:
            numeric(child(node.args[key]), node, "SUBSTRING")
    return SqlType.STR


def _common_of_all(node: exp.Expression, child: Typer) -> SqlType:
    return common([child(node.this)] + [child(e) for e in node.expressions], node)


def _case(node: exp.Expression, child: Typer) -> SqlType:
    if node.this is not None:
        raise QueryRefused("CASE <value> WHEN refused: write CASE WHEN <condition> THEN ...")
    results = []
    for branch in node.args.get("ifs") or []:
        boolean(child(branch.this), branch)
        results.append(child(branch.args["true"]))
    if node.args.get("default") is not None:
        results.append(child(node.args["default"]))
    return common(results, node)


def _cast(node: exp.Expression, child: Typer) -> SqlType:
    to = node.args["to"]
    target = CAST_TYPES.get(to.this)
    if target is None or to.expressions:
        raise QueryRefused(
            f"CAST to {to.sql(dialect='duckdb')} refused: cast to INTEGER, BIGINT, DOUBLE, "
            "VARCHAR, BOOLEAN, DATE or TIMESTAMP"
        )
    operand = child(node.this)
    if target in NUMBER_TYPES and operand == SqlType.STR:
        _check_text_to_number(node.this)
    if target in TIME_TYPES:
        _check_to_time(node.this, operand, target)
    elif operand in TIME_TYPES and target != SqlType.STR:
        raise QueryRefused(f"CAST of the {operand} {short(node.this)} to {target} refused: take a "
                           "number from it with EXTRACT(year|month|day|dow|hour FROM ...)")
    return target


def _check_to_time(operand: exp.Expression, kind: SqlType, target: SqlType) -> None:
    """A date or timestamp comes from a column, another date or timestamp, or an ISO literal
    (DATE '2024-01-01'): DuckDB also reads 'infinity', 'epoch' and years beyond 9999, and a
    cast of text read from the data would be NULL or not depending on the values."""
    while isinstance(operand, exp.Paren):
        operand = operand.this
    if kind in TIME_TYPES or kind == SqlType.NULL:
        return
    if isinstance(operand, exp.Literal) and operand.is_string:
        time_literal(operand.this, target)
        return
    raise QueryRefused(f"CAST of {short(operand)} ({kind}) to {target} refused: write a literal "
                       "such as DATE '2024-01-01' or TIMESTAMP '2024-01-01 08:00:00', or declare "
                       "the column as date or timestamp in the policy")


def _extract(node: exp.Expression, child: Typer) -> SqlType:
    time_part(node)
    operand = child(node.expression if isinstance(node, exp.Extract) else node.this)
    if operand not in TIME_TYPES and operand != SqlType.NULL:
        raise QueryRefused(f"{short(node)} refused: it takes a date or timestamp, not a {operand}")
    return SqlType.INT


def _trunc(node: exp.Expression, child: Typer) -> SqlType:
    trunc_unit(node)
    operand = child(node.this)
    if operand not in TIME_TYPES and operand != SqlType.NULL:
        raise QueryRefused(f"{short(node)} refused: it takes a date or timestamp, not a {operand}")
    return SqlType.TIMESTAMP


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
    Scalar("EXTRACT", {exp.Extract: _BINARY, **_all(tuple(PART_FUNCTIONS), _ONE_ARG)}, _extract,
           True),
    Scalar("DATE_TRUNC", _all(TRUNCS, frozenset({"this", "unit"})), _trunc, True),
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


def _power(node: exp.Expression, child: Typer) -> SqlType:
    numeric(child(node.this), node, "POWER")
    numeric(child(node.expression), node, "POWER")
    return SqlType.FLOAT


def _pi(node: exp.Expression, child: Typer) -> SqlType:
    return SqlType.FLOAT


def _float_of_one(name: str) -> TypeRule:
    def rule(node: exp.Expression, child: Typer) -> SqlType:
        numeric(child(node.this), node, name)
        return SqlType.FLOAT
    return rule


def _check_log10(node: exp.Expression) -> None:
    """LOG is accepted as LOG10(x) (LOG(10, x)) only: peers read LOG(x) in different bases."""
    base = node.this
    while isinstance(base, exp.TryCast):  # hardened already
        base = base.this
    if node.expression is None or not isinstance(base, exp.Literal) or base.is_string \
            or float(base.this) != 10:
        raise QueryRefused(f"{short(node)} refused: LOG is base 10 in DuckDB and PostgreSQL but "
                           "natural in SQL Server and Spark; write LOG10(x) or LN(x)")


def _log10(node: exp.Expression, child: Typer) -> SqlType:
    _check_log10(node)
    numeric(child(node.expression), node, "LOG10")
    return SqlType.FLOAT


# Functions applied only to released values (post-processing of noisy aggregates and group
# keys, never to rows): DuckDB evaluates them on DOUBLE as NaN or ±inf, never an error.
RELEASED_SCALARS: tuple[Scalar, ...] = (
    Scalar("POWER", {exp.Pow: _BINARY}, _power, True),
    Scalar("PI", {exp.Pi: frozenset()}, _pi, True),
    Scalar("LN", {exp.Ln: _ONE_ARG}, _float_of_one("LN"), True),
    Scalar("EXP", {exp.Exp: _ONE_ARG}, _float_of_one("EXP"), True),
    Scalar("LOG10", {exp.Log: _BINARY}, _log10, True),
    Scalar("COS", {exp.Cos: _ONE_ARG}, _float_of_one("COS"), True),
    Scalar("SIN", {exp.Sin: _ONE_ARG}, _float_of_one("SIN"), True),
)
_RELEASED_BY_NODE: dict[type[exp.Expression], Scalar] = {
    kind: s for s in RELEASED_SCALARS for kind in s.nodes}

_BY_NODE: dict[type[exp.Expression], Scalar] = {kind: s for s in SCALARS for kind in s.nodes}
# Operators whose subclasses (sqlglot dialect variants) carry the same two operands.
_BINARY_NODES = tuple(kind for s in SCALARS if s.rule in (_arithmetic, _comparison, _logic)
                      for kind in s.nodes)
# Options of the other constructs a query may contain (clauses, aggregates, names, literals).
_OPTIONS: dict[type[exp.Expression], frozenset[str]] = {
    **{kind: options for s in SCALARS + RELEASED_SCALARS for kind, options in s.nodes.items()},
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


def scalar_of(node: exp.Expression, released: bool = False) -> Scalar | None:
    """The whitelist entry `node` is an instance of, or None; with `released`, also the
    functions allowed on released values only."""
    for kind in type(node).__mro__:
        found = _BY_NODE.get(kind) or (_RELEASED_BY_NODE.get(kind) if released else None)
        if found is not None:
            return found
    return None


def type_of(node: exp.Expression, where: str, leaf: Callable[[exp.Expression, str], SqlType | None],
            recurse: Callable[[exp.Expression, str], SqlType], shallow: bool = False,
            released: bool = False) -> SqlType:
    """Type-check one whitelisted scalar construct; children are typed by `recurse`, names by
    `leaf`. With `shallow`, only the construct itself is checked (children are checked elsewhere);
    with `released`, the functions allowed on released values only are accepted too."""
    if node is None:  # e.g. FLOOR(--1): `--` starts a comment, which ends the arguments
        raise QueryRefused(f"a function in {where} is missing its argument (note that -- starts "
                           "a comment in SQL: write - -1 or -(-1))")
    check_args(node, where)
    leaf_type = leaf(node, where)
    if leaf_type is not None:
        return leaf_type
    if isinstance(node, exp.Literal):
        if node.is_string:
            return SqlType.STR
        value = numeric_literal(node)
        return SqlType.INT if float(value).is_integer() and "." not in node.this and "e" not in \
            node.this.lower() else SqlType.FLOAT
    if isinstance(node, exp.Boolean):
        return SqlType.BOOL
    if isinstance(node, exp.Null):
        return SqlType.NULL
    if shallow:
        check_known(node, where, released)
        return SqlType.FLOAT
    scalar = scalar_of(node, released)
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


def check_known(node: exp.Expression, where: str, released: bool = False) -> None:
    """Refuse any construct outside the whitelist, naming it."""
    if isinstance(node, exp.If) and isinstance(node.parent, exp.Case):
        return
    if released and isinstance(node, exp.Log):
        _check_log10(node)
    if scalar_of(node, released) is None and not isinstance(node, _STRUCTURAL):
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


def numeric(kind: SqlType, node: exp.Expression, what: str) -> SqlType:
    """`kind` if it is a number type (float for NULL), else a refusal."""
    if kind not in (SqlType.INT, SqlType.FLOAT, SqlType.NULL):
        raise QueryRefused(f"{what} needs numbers but got a {kind} in {short(node)}")
    return SqlType.FLOAT if kind == SqlType.NULL else kind


def boolean(kind: SqlType, node: exp.Expression) -> None:
    """Refuse unless `kind` is a condition's type."""
    if kind not in (SqlType.BOOL, SqlType.NULL):
        raise QueryRefused(f"expected a condition but got a {kind} in {short(node)}")


def text(kind: SqlType, node: exp.Expression) -> SqlType:
    """SqlType.STR, or a refusal unless `kind` is text."""
    if kind not in (SqlType.STR, SqlType.NULL):
        raise QueryRefused(f"expected text but got {_KIND_NAMES.get(kind, kind)} in {short(node)}")
    return SqlType.STR


# How messages name a value's type: an int column is a whole number, never a "float".
_KIND_NAMES: dict[SqlType, str] = {
    SqlType.INT: "a whole number (int)", SqlType.FLOAT: "a number (float)", SqlType.STR: "text",
    SqlType.BOOL: "a condition (bool)", SqlType.DATE: "a date", SqlType.TIMESTAMP: "a timestamp"}

_FAMILY_NAMES = {SqlType.FLOAT: "number", SqlType.TIMESTAMP: "date/timestamp", SqlType.STR: "text",
                 SqlType.BOOL: "condition (bool)"}


def common(kinds: list[SqlType], node: exp.Expression) -> SqlType:
    """The common type of comparable operands; numbers compare with numbers only, and so on."""
    # Each kind's family, named by its widest type: numbers are FLOAT's, dates TIMESTAMP's.
    families = {SqlType.FLOAT if k in NUMBER_TYPES else SqlType.TIMESTAMP if k in TIME_TYPES else k
                for k in kinds if k != SqlType.NULL}
    if len(families) > 1:
        hint = "; write a date as DATE '2024-01-01' or a timestamp as TIMESTAMP " \
            "'2024-01-01 08:00:00'" if families == {SqlType.STR, SqlType.TIMESTAMP} else ""
        names = sorted(_FAMILY_NAMES[f] for f in families)
        raise QueryRefused(
            f"cannot compare or combine {' and '.join(names)} values in {short(node)}{hint}")
    if not families:
        return SqlType.NULL
    family = families.pop()
    if family == SqlType.FLOAT:
        return SqlType.INT if all(k in (SqlType.INT, SqlType.NULL) for k in kinds) else SqlType.FLOAT
    if family == SqlType.TIMESTAMP:  # DuckDB compares a date with a timestamp as midnight of that day
        return SqlType.DATE if all(k in (SqlType.DATE, SqlType.NULL) for k in kinds) else SqlType.TIMESTAMP
    return family


def short(node: exp.Expression) -> str:
    """A construct's SQL, cut to 80 characters for messages."""
    sql = node.sql(dialect="duckdb")
    return sql if len(sql) <= 80 else sql[:77] + "..."
