"""Hardening checked expressions into total forms: the SQL rewrites (DOUBLE operands, TRY_CAST,
BETWEEN as two comparisons, 32-bit SUBSTRING positions) that make every whitelisted scalar one
DuckDB evaluates without error, and the table of how DuckDB binds each of them, which the gate
(engine/backends/duckdb_gate.py) checks bound plans against."""

from __future__ import annotations

from sqlglot import exp

from .scalars import scalar_of

# How DuckDB's binder shows each whitelisted scalar (engine/sql/scalars.py), by when it is total:
# "class" and "operator" (expression classes, BOUND_OPERATOR types) and "comparison"
# (BOUND_FUNCTION types; the binder casts both sides to one type, and those casts are checked)
# always; "double" and "text" functions only on DOUBLE or VARCHAR arguments; "same" functions
# when all arguments share one type; "positions" (SUBSTRING) with 32-bit positions; "cast"
# when the cast is total or a TRY_CAST. `harden` rewrites checked expressions into these forms.
BOUND_AS: dict[str, dict[str, frozenset[str]]] = {
    "ABS": {"double": frozenset({"abs"})},
    "ROUND": {"double": frozenset({"round"})},
    "FLOOR": {"double": frozenset({"floor"})},
    "CEIL": {"double": frozenset({"ceil"})},
    "SQRT": {"double": frozenset({"sqrt"})},  # NaN below 0, never an error (measured)
    "LOWER": {"text": frozenset({"lower"})},
    "UPPER": {"text": frozenset({"upper"})},
    "TRIM": {"text": frozenset({"trim"})},
    "LENGTH": {"text": frozenset({"length"})},
    "SUBSTRING": {"positions": frozenset({"substring"})},
    "COALESCE": {"operator": frozenset({"OPERATOR_COALESCE"})},
    "LEAST": {"same": frozenset({"least"})},
    "GREATEST": {"same": frozenset({"greatest"})},
    "CAST": {"cast": frozenset({"OPERATOR_CAST"})},
    "CASE": {"class": frozenset({"BOUND_CASE"})},
    # Total on dates and timestamps of years 1 to 9999 (and NULL), which the gate checks each
    # argument holds (`_in_range`): binding reads every such column as NULL outside that range.
    "EXTRACT": {"time": frozenset({"year", "quarter", "month", "day", "dayofmonth", "dayofweek",
                                   "isodow", "dayofyear", "week", "weekofyear", "hour", "minute",
                                   "second"})},
    "DATE_TRUNC": {"time": frozenset({"date_trunc"})},
    "( )": {},
    "unary -": {"double": frozenset({"-"})},
    "arithmetic": {"double": frozenset({"+", "-", "*", "/", "%", "//"})},
    "comparison": {"comparison": frozenset({
        "COMPARE_EQUAL", "COMPARE_NOTEQUAL", "COMPARE_LESSTHAN", "COMPARE_GREATERTHAN",
        "COMPARE_LESSTHANOREQUALTO", "COMPARE_GREATERTHANOREQUALTO", "COMPARE_DISTINCT_FROM",
        "COMPARE_NOT_DISTINCT_FROM"})},
    "AND/OR": {"class": frozenset({"BOUND_CONJUNCTION"})},
    "NOT": {"operator": frozenset({"OPERATOR_NOT"})},
    "IN": {"operator": frozenset({"COMPARE_IN", "COMPARE_NOT_IN"})},
    # Binding writes BETWEEN as its two comparisons; some releases bind a BETWEEN in raw SQL
    # as one three-argument comparison (__between), total in the same way.
    "BETWEEN": {"comparison": frozenset({"COMPARE_GREATERTHANOREQUALTO",
                                         "COMPARE_LESSTHANOREQUALTO", "COMPARE_BETWEEN"})},
    "IS": {"operator": frozenset({"OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"}),
           "comparison": frozenset({"COMPARE_DISTINCT_FROM", "COMPARE_NOT_DISTINCT_FROM"})},
    "LIKE": {"text": frozenset({"~~", "!~~", "~~*", "!~~*"})},
    # On released values only (RELEASED_SCALARS): NaN or ±inf out of their domain, never an error.
    "POWER": {"double": frozenset({"pow", "power"})},
    "PI": {"double": frozenset({"pi"})},
    "LN": {"double": frozenset({"ln"})},
    "EXP": {"double": frozenset({"exp"})},
    "LOG10": {"double": frozenset({"log"})},
    "COS": {"double": frozenset({"cos"})},
    "SIN": {"double": frozenset({"sin"})},
}


_DOUBLE = exp.DataType.Type.DOUBLE


def as_double(node: exp.Expression) -> exp.Expression:
    """TRY_CAST(node AS DOUBLE), unless it is one already: DOUBLE arithmetic never raises."""
    if isinstance(node, exp.TryCast) and node.to.this == _DOUBLE:
        return node
    return exp.TryCast(this=node, to=exp.DataType.build("DOUBLE"))


def harden(node: exp.Expression) -> exp.Expression:
    """Make a checked expression total: it cannot raise on any value it is evaluated on.

    Every operand of a scalar that DuckDB makes total only on DOUBLE (arithmetic, ABS, ...) is
    DOUBLE (no integer or decimal overflow; division by zero gives NULL on the locked
    connections), BETWEEN is written as its two comparisons, SUBSTRING positions are TRY_CAST
    to INTEGER (inside the range DuckDB accepts), and CAST becomes TRY_CAST. A runtime error
    would otherwise reveal, by occurring or not, something about the exact data. Idempotent."""
    for key, child in list(node.args.items()):
        if isinstance(child, exp.Expression):
            node.set(key, harden(child))
        elif isinstance(child, list):
            node.set(key, [harden(c) if isinstance(c, exp.Expression) else c for c in child])
    if isinstance(node, exp.Between):
        # As `x >= low AND x <= high` (the same value, NULLs included): DuckDB releases bind
        # BETWEEN differently, and the verdict must not follow the release.
        return exp.Paren(this=exp.and_(exp.GTE(this=node.this, expression=node.args["low"]),
                                       exp.LTE(this=node.this.copy(), expression=node.args["high"])))
    scalar = scalar_of(node, released=True)  # checked already: a row expression has none
    bound = BOUND_AS[scalar.name] if scalar is not None else {}
    if "cast" in bound and not isinstance(node, exp.TryCast):
        return exp.TryCast(this=node.this, to=node.args["to"])
    if "double" in bound:
        for key in ("this", "expression"):
            if isinstance(node.args.get(key), exp.Expression):
                node.set(key, as_double(node.args[key]))
    if "positions" in bound:
        for key in ("start", "length"):
            value = node.args.get(key)
            if value is not None and not (isinstance(value, exp.TryCast)
                                          and value.to.this == exp.DataType.Type.INT):
                node.set(key, exp.TryCast(this=value, to=exp.DataType.build("INT")))
    return node
