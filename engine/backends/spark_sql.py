"""The rewrite's tree in Spark SQL with DuckDB's meaning, or the reason it cannot be.

Plans hold DuckDB-hardened trees (engine/sql/harden.py). sqlglot transpiles their syntax; this
module fixes what means something else on Spark (measured value by value against DuckDB): IEEE
division and modulo by zero, `//`, FLOOR and CEIL as DOUBLE, LIKE without an escape character,
casts to integers rounding like DuckDB, and sums that cannot wrap. What it cannot give DuckDB's
meaning it refuses, by the query text and the schema only: casts of text to numbers or booleans
(DuckDB reads '2.7' as an integer, '1_000' as a number; Spark reads '1d' and ' true '), of floats
to text (the two print floats differently), of decimal literals to integers, and SUBSTRING with
positions that are not whole-number literals (start >= 1, length >= 0), dates and timestamps
to text. Dates and timestamps are read without time zone (TIMESTAMP_NTZ); EXTRACT counts Sunday
as day 0 and whole seconds, as DuckDB does. Spark refuses those queries
whatever the data holds, so a refusal says nothing about it.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from ..errors import QueryRefused
from ..sql.calendar import PART_FUNCTIONS, TRUNCS
from ..sql_types import NUMBER_TYPES, TIME_TYPES, SqlType

_INTEGERS = {exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
             exp.DataType.Type.BIGINT}
_FLOATS = {exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE}
_TIMES = {exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ}
_TEXT = {exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT, exp.DataType.Type.CHAR}
_DECIMAL_SUM = "DECIMAL(38, 0)"
# EXTRACT's parts (calendar.py's names) as Spark's EXTRACT names them, and what to add to
# Spark's value to get DuckDB's: DuckDB counts Sunday as 0, Spark's DAYOFWEEK as 1.
_PARTS = {"YEAR": ("YEAR", 0), "QUARTER": ("QUARTER", 0), "MONTH": ("MONTH", 0), "DAY": ("DAY", 0),
          "DAYOFWEEK": ("DAYOFWEEK", -1), "ISODOW": ("DAYOFWEEK_ISO", 0), "DAYOFYEAR": ("DOY", 0),
          "WEEK": ("WEEK", 0), "HOUR": ("HOUR", 0), "MINUTE": ("MINUTE", 0), "SECOND": ("SECOND", 0)}
_PARTS.update(DOW=_PARTS["DAYOFWEEK"], DOY=_PARTS["DAYOFYEAR"], WEEKOFYEAR=_PARTS["WEEK"])
_WHOLE = 2 ** 52  # a double this large is a whole number: FLOOR and CEIL leave it alone
# Where a bare NULL stands for a truth value (DuckDB binds it as BOOLEAN there).
_CONDITIONS: dict[type, tuple[str, ...]] = {
    exp.Where: ("this",), exp.If: ("this",), exp.Not: ("this",), exp.And: ("this", "expression"),
    exp.Or: ("this", "expression"), exp.Having: ("this",)}


def to_spark(query: exp.Expression, column_types: Mapping[str, str]) -> exp.Expression:
    """A copy of `query` whose Spark SQL means what the tree means on DuckDB; QueryRefused for
    a form that cannot. `column_types` maps each data column to its type family (int, float,
    decimal, str, bool, date, timestamp or other)."""
    typer = _Types(column_types)
    for node in query.walk():
        _refuse(node, typer)
    return _translated(query.copy(), typer)


def _translated(node: exp.Expression, typer: _Types) -> exp.Expression:
    """`node` translated bottom-up: children first, so a node's types are read from the
    original operands (`_Types` reads only the column names, literals and casts below)."""
    for key, child in list(node.args.items()):
        if isinstance(child, exp.Expression):
            node.set(key, _translated(child, typer))
        elif isinstance(child, list):
            node.set(key, [_translated(c, typer) if isinstance(c, exp.Expression) else c
                           for c in child])
    return _translate(node, typer)


def _refuse(node: exp.Expr, typer: _Types) -> None:
    """Raise QueryRefused for a form whose Spark meaning differs from DuckDB's."""
    if isinstance(node, exp.Explode):  # Spark's split reads a regular expression: not checked
        raise QueryRefused("UNNEST of a list column is not supported on the Spark engine")
    if isinstance(node, exp.Cast):
        source, target = typer.of(node.this), node.to.this
        literal_time = target in _TIMES and isinstance(node.this, exp.Literal)  # an ISO literal
        if source == SqlType.STR and target not in _TEXT and not literal_time:
            raise QueryRefused("CAST of text to a number or boolean is not supported on the "
                               "Spark engine (DuckDB and Spark read text such as '1_000', '1d' "
                               "or ' true ' differently)")
        if target in _INTEGERS and source == SqlType.FLOAT and isinstance(node.this, exp.Literal):
            raise QueryRefused("CAST of a decimal literal to an integer type is not supported on "
                               "the Spark engine; write the whole number")
        if target in _INTEGERS and source not in (*NUMBER_TYPES, SqlType.BOOL, SqlType.NULL, "decimal"):
            raise QueryRefused("CAST to an integer type of this expression is not supported on "
                               "the Spark engine")
        if target in _TEXT and source in TIME_TYPES:
            raise QueryRefused("CAST of a date or timestamp to VARCHAR is not supported on the "
                               "Spark engine (DuckDB and Spark print them differently)")
        if target in _TEXT and source not in (SqlType.INT, SqlType.BOOL, SqlType.STR, SqlType.NULL):
            raise QueryRefused("CAST of a number that is not an integer to VARCHAR is not "
                               "supported on the Spark engine (DuckDB and Spark print floats "
                               "differently)")
    if isinstance(node, (exp.Extract, *PART_FUNCTIONS)) and _part(node) not in _PARTS:
        raise QueryRefused(f"EXTRACT of {_part(node)} is not supported on the Spark engine")
    if isinstance(node, exp.Substring):
        for key, least in (("start", 1), ("length", 0)):
            value = node.args.get(key)
            if value is not None and _whole_literal(value, least) is None:
                raise QueryRefused("SUBSTRING is not supported on the Spark engine unless its "
                                   "start is a whole-number literal >= 1 and its length one >= 0 "
                                   "(DuckDB and Spark count other positions differently)")


def _translate(node: exp.Expression, typer: _Types) -> exp.Expression:
    """One node in Spark's words (children are already translated)."""
    for key in _CONDITIONS.get(type(node), ()):
        if isinstance(node.args.get(key), exp.Null):  # Spark types a bare NULL as VOID
            node.set(key, exp.cast(exp.Null(), "BOOLEAN"))
    if isinstance(node, exp.Div):
        return _ieee_divide(node.this, node.expression)
    if isinstance(node, (exp.Extract, *PART_FUNCTIONS)):
        return _extract(node)
    if isinstance(node, TRUNCS):
        # DuckDB truncates to a TIMESTAMP without time zone: so does Spark's date_trunc of one.
        unit = exp.Literal.string(node.args["unit"].name.upper())
        moment = exp.cast(node.this, "TIMESTAMP_NTZ", dialect="spark")
        return exp.cast(exp.Anonymous(this="DATE_TRUNC", expressions=[unit, moment]),
                        "TIMESTAMP_NTZ", dialect="spark")
    if isinstance(node, exp.IntDiv):
        # DuckDB's // on DOUBLE (the only operands hardening leaves) divides, NULL by zero,
        # which is what Spark's / does.
        return exp.paren(exp.Div(this=node.this, expression=node.expression))
    if isinstance(node, exp.Mod):
        zero = exp.EQ(this=node.expression.copy(), expression=exp.Literal.number(0))
        nan = exp.Add(this=exp.cast(exp.Literal.string("NaN"), "DOUBLE"),
                      expression=exp.Mul(this=node.this.copy(), expression=exp.Literal.number(0)))
        return exp.Case(ifs=[exp.If(this=zero, true=nan)], default=node)
    if isinstance(node, (exp.Floor, exp.Ceil)) and node.args.get("decimals") is None:
        value = node.this
        whole = exp.or_(exp.func("ISNAN", value.copy()),
                        exp.GTE(this=exp.Abs(this=value.copy()), expression=exp.Literal.number(_WHOLE)))
        return exp.Case(ifs=[exp.If(this=whole, true=value.copy())],
                        default=exp.cast(node, "DOUBLE"))
    if isinstance(node, (exp.Like, exp.ILike)) and node.args.get("escape") is None:
        # DuckDB has no escape character; Spark's is the backslash: double every backslash.
        pattern = exp.func("REPLACE", node.expression, exp.Literal.string("\\"),
                           exp.Literal.string("\\\\"))
        node.set("expression", pattern)
        return node
    if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.TIMESTAMP:
        node.set("to", exp.DataType.build("TIMESTAMP_NTZ", dialect="spark"))  # Spark's is zoned
    if isinstance(node, exp.TryCast):
        node.set("safe", True)  # Spark's own TRY_CAST: NULL where a CAST would saturate
    if isinstance(node, exp.Cast) and node.to.this in _INTEGERS:
        source = typer.of(node.this)
        if source == SqlType.FLOAT:  # DuckDB rounds a double half to even, Spark truncates
            node.set("this", exp.func("BROUND", node.this))
        elif source == "decimal":  # and a DECIMAL half away from zero
            node.set("this", exp.func("ROUND", node.this))
        return node
    if isinstance(node, exp.Sum):
        # x + DECIMAL(38,0) zero is DECIMAL for an integer x and DOUBLE for a floating one;
        # in SUM(DISTINCT x) the zero goes inside DISTINCT (adding it merges no values).
        target = node.this
        if isinstance(target, exp.Distinct):
            target.set("expressions", [_widened(value) for value in target.expressions])
        else:
            node.set("this", _widened(target))
        return node
    return node


def _part(node: exp.Expr) -> str:
    """The part an EXTRACT (or YEAR(x), DAYOFWEEK(x), ...) reads, by calendar.py's names."""
    if isinstance(node, exp.Extract):
        return node.this.name.upper()
    return next(part for kind, part in PART_FUNCTIONS.items() if isinstance(node, kind))


def _extract(node: exp.Expression) -> exp.Expression:
    """EXTRACT as DuckDB computes it: Sunday is day 0 of the week, seconds are whole (Spark's
    SECOND keeps the fraction), the value a BIGINT."""
    name, shift = _PARTS[_part(node)]
    moment = node.expression if isinstance(node, exp.Extract) else node.this
    value: exp.Expression = exp.Extract(this=exp.var(name), expression=moment)
    if name == "SECOND":
        value = exp.Floor(this=value)
    if shift:
        value = exp.Add(this=value, expression=exp.Literal.number(shift))
    return exp.cast(value, "BIGINT")


def _widened(value: exp.Expression) -> exp.Expression:
    """`value` plus a DECIMAL(38, 0) zero: summed in Spark's widest type, as DuckDB sums."""
    return exp.Add(this=exp.paren(value), expression=exp.cast(exp.Literal.number(0), _DECIMAL_SUM))


def _ieee_divide(dividend: exp.Expression, divisor: exp.Expression) -> exp.Expression:
    """a / b as DuckDB divides DOUBLEs: by a zero it is a times infinity of the zero's sign
    (+inf, -inf, or NaN for 0/0), where Spark would give NULL."""
    negative_zero = exp.LT(this=exp.func("ATAN2", divisor.copy(), exp.Literal.number(-1)),
                           expression=exp.Literal.number(0))
    infinity = exp.Case(ifs=[exp.If(this=negative_zero, true=exp.cast(exp.Literal.string("-Infinity"),
                                                                        "DOUBLE"))],
                        default=exp.cast(exp.Literal.string("Infinity"), "DOUBLE"))
    zero = exp.EQ(this=divisor.copy(), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=zero, true=exp.Mul(this=dividend.copy(), expression=infinity))],
                    default=exp.Div(this=dividend, expression=divisor))


def _whole_literal(node: exp.Expression, least: int) -> int | None:
    """The value of a whole-number literal >= `least` (possibly TRY_CAST as hardening leaves
    it), else None."""
    while isinstance(node, (exp.Cast, exp.Paren)):
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and node.is_int and int(node.this) >= least:
        return int(node.this)
    return None


class _Types:
    """The type family of an expression of a hardened tree: int, float, decimal, str, bool,
    null or other. Arithmetic is DOUBLE after hardening, so its family is float."""

    def __init__(self, column_types: Mapping[str, str]) -> None:
        self._columns = column_types

    def of(self, node: exp.Expr) -> str:
        if isinstance(node, exp.Paren):
            return self.of(node.this)
        if isinstance(node, exp.Column):
            return self._columns.get(node.name, "other")
        if isinstance(node, exp.Null):
            return SqlType.NULL
        if isinstance(node, exp.Boolean):
            return SqlType.BOOL
        if isinstance(node, exp.Literal):
            return SqlType.STR if node.is_string else SqlType.INT if node.is_int else SqlType.FLOAT
        if isinstance(node, exp.Cast):
            kind = node.to.this
            if kind in _INTEGERS:
                return SqlType.INT
            if kind in _FLOATS:
                return SqlType.FLOAT
            if kind == exp.DataType.Type.DECIMAL:
                return "decimal"
            if kind in _TEXT:
                return SqlType.STR
            if kind == exp.DataType.Type.DATE:
                return SqlType.DATE
            if kind in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ):
                return SqlType.TIMESTAMP
            return SqlType.BOOL if kind == exp.DataType.Type.BOOLEAN else "other"
        if isinstance(node, (exp.Binary, exp.Neg, exp.Abs, exp.Round, exp.Floor, exp.Ceil)) \
                and not isinstance(node, (exp.Predicate, exp.Connector, exp.DPipe)):
            return SqlType.FLOAT
        if isinstance(node, (exp.Predicate, exp.Connector, exp.Not, exp.In, exp.Between, exp.Is)):
            return SqlType.BOOL
        if isinstance(node, (exp.Length, exp.Extract, *PART_FUNCTIONS, exp.Count)):
            return SqlType.INT
        if isinstance(node, (exp.Sum, exp.Min, exp.Max)):  # a per-unit value (§29): its operand's
            return self.of(node.this)
        if isinstance(node, TRUNCS):
            return SqlType.TIMESTAMP
        if isinstance(node, (exp.Lower, exp.Upper, exp.Trim, exp.Substring, exp.DPipe)):
            return SqlType.STR
        if isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least, exp.Case, exp.If)):
            return self._common(node)
        return "other"

    def _common(self, node: exp.Expression) -> str:
        """The family of the values a COALESCE, GREATEST, LEAST or CASE picks from."""
        if isinstance(node, exp.Case):
            branches = [i.args["true"] for i in node.args.get("ifs", [])]
            if node.args.get("default") is not None:
                branches.append(node.args["default"])
        else:
            branches = [node.this, *node.expressions]
        families = {self.of(b) for b in branches} - {SqlType.NULL}
        if len(families) == 1:
            return families.pop()
        if families and families <= {*NUMBER_TYPES, "decimal"}:
            return SqlType.FLOAT
        return SqlType.NULL if not families else "other"
