"""Bind a parsed SELECT to the policy: check names and types, and build a typed QueryPlan."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from .errors import QueryRefused
from .policy import ColumnSpec, Policy, TableSpec

MAX_LITERAL = 1e15
MAX_GROUPS = 1_000_000
MAX_LIMIT = 1_000_000_000
SUPPORTED_AGGREGATES = "COUNT(*), COUNT(col), COUNT(DISTINCT <privacy unit>), SUM(col), AVG(col)"
SCALAR_FUNCTIONS = (
    "ABS, ROUND, FLOOR, CEIL, LOWER, UPPER, TRIM, LENGTH, SUBSTRING, COALESCE, LEAST, GREATEST, "
    "CAST, CASE"
)
_SELECT_ARGS = {"expressions", "from_", "where", "group", "having", "order", "limit", "offset"}
_CAST_TYPES = {
    exp.DataType.Type.TINYINT: "int", exp.DataType.Type.SMALLINT: "int",
    exp.DataType.Type.INT: "int", exp.DataType.Type.BIGINT: "int",
    exp.DataType.Type.FLOAT: "float", exp.DataType.Type.DOUBLE: "float",
    exp.DataType.Type.VARCHAR: "str", exp.DataType.Type.TEXT: "str",
    exp.DataType.Type.BOOLEAN: "bool",
}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)


@dataclass(frozen=True)
class Measurement:
    """One exact aggregate that is released with noise: COUNT, SUM or COUNT(DISTINCT unit)."""

    kind: str  # "count" | "sum" | "count_distinct"
    column: ColumnSpec | None  # None for COUNT(*) and COUNT(DISTINCT unit)
    name: str  # internal column name in the executed query, e.g. "__m0"

    @property
    def integer(self) -> bool:
        """Whether the exact value is an integer (so the discrete Laplace applies)."""
        return self.kind != "sum" or self.summed.type == "int"

    @property
    def summed(self) -> ColumnSpec:
        """The column a SUM adds up (clamped to its bounds); other measurements have none."""
        if self.kind != "sum" or self.column is None:
            raise TypeError(f"{self.label} adds up no column")
        return self.column

    @property
    def label(self) -> str:
        if self.kind == "count_distinct":
            return "COUNT(DISTINCT unit)"
        inner = "*" if self.column is None else self.column.name
        return f"{self.kind.upper()}({inner})"


@dataclass(frozen=True)
class OutputColumn:
    """One column of the answer: its name and how to compute it from noisy values."""

    name: str
    expression: exp.Expression  # over group keys and measurement names
    function: str | None  # "COUNT", "SUM", "AVG" when the column is exactly one aggregate
    measurements: tuple[str, ...]  # names of the measurements it is computed from
    column: ColumnSpec | None = None  # the aggregated column, for AVG's bounds


@dataclass(frozen=True)
class QueryPlan:
    """Everything later steps need: the table, filter, groups, noisy measurements, outputs."""

    sql: str
    table: TableSpec
    where: exp.Expression | None
    group_by: tuple[ColumnSpec, ...]
    measurements: tuple[Measurement, ...]
    outputs: tuple[OutputColumn, ...]
    having: exp.Expression | None
    order: tuple[exp.Ordered, ...]
    limit: int | None
    offset: int | None

    @property
    def group_count(self) -> int:
        return math.prod(len(col.keys) for col in self.group_by)


def build_plan(select: exp.Select, policy: Policy, sql: str,
               data_columns: Mapping[str, frozenset[str]] | None = None) -> QueryPlan:
    """Validate the SELECT against the policy and return its plan. `data_columns` (each table's
    column names in the data) lets a refusal say a column exists but is not in the policy."""
    for key, value in select.args.items():
        if key not in _SELECT_ARGS and value not in (None, [], False):
            if key == "distinct":
                raise QueryRefused("SELECT DISTINCT refused: aggregate queries return one row per group")
            raise QueryRefused(f"{key.upper()} clause refused: not supported")
    table, aliases = _bind_table(select, policy)
    scope = _Scope(table, aliases, (data_columns or {}).get(table.name, frozenset()))
    where = None
    if select.args.get("where") is not None:
        condition = select.args["where"].this
        if scope.scalar_type(condition, "WHERE") not in ("bool", "null"):
            raise QueryRefused("WHERE must be a condition (true/false), not a value")
        where = scope.rewrite_scalar(condition)
    group_by = _bind_group(select, scope)
    post = _PostScope(scope, group_by)
    outputs = _bind_outputs(select, post)
    if not any(out.measurements for out in outputs):
        raise QueryRefused(f"no aggregate in SELECT: use one of {SUPPORTED_AGGREGATES}")
    aliases_to_outputs = {out.name.lower(): out for out in outputs}
    having = None
    if select.args.get("having") is not None:
        having = post.rewrite(select.args["having"].this, "HAVING", aliases_to_outputs)
    order = _bind_order(select, post, aliases_to_outputs, len(outputs))
    limit = _bind_count(select.args.get("limit"), "LIMIT")
    offset = _bind_count(select.args.get("offset"), "OFFSET")
    plan = QueryPlan(sql, table, where, group_by, tuple(post.measurements.values()),
                     tuple(outputs), having, order, limit, offset)
    if plan.group_by and plan.group_count > MAX_GROUPS:
        raise QueryRefused(f"GROUP BY would produce {plan.group_count} groups; at most {MAX_GROUPS}")
    return plan


def _bind_table(select: exp.Select, policy: Policy) -> tuple[TableSpec, set[str]]:
    source = select.args.get("from_")
    if source is None:
        raise QueryRefused("SELECT without FROM refused: name the private table, e.g. FROM people")
    table = source.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        what = table.this if isinstance(table, exp.Table) else table
        name = what.name if isinstance(what, exp.Anonymous) else (
            what.sql_name() if isinstance(what, exp.Func) else type(what).__name__)
        raise QueryRefused(f"table function or file reader {name} refused: FROM must name a table")
    if table.args.get("catalog") or (table.text("db") and table.text("db").lower() != "main"):
        raise QueryRefused(f"qualified table name {table.sql()} refused: name the table alone")
    for key in ("sample", "pivots", "joins", "laterals", "hints", "version", "when", "changes"):
        if table.args.get(key):
            raise QueryRefused(f"{key.upper()} on the table refused: not supported")
    _check_args(table, "FROM")
    alias = table.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise QueryRefused(f"column aliases in FROM {table.name} AS {alias.sql(dialect='duckdb')} "
                           "refused: not supported; use the table's own column names")
    if alias is not None:
        _check_args(alias, "FROM")
    name = table.name.lower()
    spec = policy.tables.get(name)
    if spec is None:
        if any(mark in table.name for mark in "/\\:.*"):
            raise QueryRefused(f"file path or URL {table.name!r} refused in FROM: files are never "
                               f"read; name a table ({', '.join(sorted(policy.tables))})")
        raise QueryRefused(f"unknown table {table.name!r} (tables: {', '.join(sorted(policy.tables))})")
    aliases = {name}
    if table.alias:
        aliases.add(table.alias.lower())
    return spec, aliases


def _bind_group(select: exp.Select, scope: _Scope) -> tuple[ColumnSpec, ...]:
    group = select.args.get("group")
    if group is None:
        return ()
    for key in ("grouping_sets", "cube", "rollup", "all", "totals"):
        if group.args.get(key):
            raise QueryRefused(f"GROUP BY {key.upper()} refused: list public columns instead")
    columns: list[ColumnSpec] = []
    for item in group.expressions:
        if not isinstance(item, exp.Column):
            raise QueryRefused(
                f"GROUP BY {item.sql(dialect='duckdb')} refused: group on a public column by name"
            )
        column = scope.column(item)
        if column.group_values is None:
            raise QueryRefused(
                f"GROUP BY {column.name} refused: the column has no public domain in the policy "
                "(only bool columns or columns with a domain may be grouped on)"
            )
        if column not in columns:
            columns.append(column)
    return tuple(columns)


def _bind_outputs(select: exp.Select, post: _PostScope) -> list[OutputColumn]:
    outputs: list[OutputColumn] = []
    names: set[str] = set()
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star):
            raise QueryRefused("SELECT * refused: select aggregates such as COUNT(*) or SUM(col)")
        node = item.this if isinstance(item, exp.Alias) else item
        name = item.alias if isinstance(item, exp.Alias) else _display_name(node)
        expression = post.rewrite(node, "SELECT", {})
        used = _measurements_in(expression, post)
        function, aggregate = _single_aggregate(node)
        unique = name
        suffix = 2
        while unique.lower() in names:
            unique = f"{name}_{suffix}"
            suffix += 1
        names.add(unique.lower())
        column = post.scope.column(aggregate.this) \
            if aggregate is not None and function in ("SUM", "AVG") else None
        outputs.append(OutputColumn(unique, expression, function, used, column))
    return outputs


def _display_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Column):
        return node.name.lower()
    return node.sql(dialect="duckdb")


def _single_aggregate(node: exp.Expression) -> tuple[str | None, exp.Expression | None]:
    """('AVG', the Avg node) when the output is exactly one aggregate, else (None, None)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
        return node.key.upper(), node
    return None, None


def _measurements_in(expression: exp.Expression, post: _PostScope) -> tuple[str, ...]:
    names = {m.name for m in post.measurements.values()}
    found = [col.name for col in expression.find_all(exp.Column) if col.name in names]
    return tuple(dict.fromkeys(found))


def _bind_order(select: exp.Select, post: _PostScope, aliases: dict[str, OutputColumn],
                n_outputs: int) -> tuple[exp.Ordered, ...]:
    order = select.args.get("order")
    if order is None:
        return ()
    _check_args(order, "ORDER BY")
    items = []
    for ordered in order.expressions:
        if not isinstance(ordered, exp.Ordered):
            raise QueryRefused(f"ORDER BY {_short(ordered)} refused: not supported")
        _check_args(ordered, "ORDER BY")
        key = ordered.this
        if isinstance(key, exp.Literal) and not key.is_string:
            position = _int_literal(key, "ORDER BY position")
            if not 1 <= position <= n_outputs:
                raise QueryRefused(f"ORDER BY {position} refused: positions run from 1 to {n_outputs}")
            rewritten = list(aliases.values())[position - 1].expression.copy()
        else:
            rewritten = post.rewrite(key, "ORDER BY", aliases)
        items.append(exp.Ordered(this=rewritten, desc=bool(ordered.args.get("desc")),
                                 nulls_first=bool(ordered.args.get("nulls_first"))))
    return tuple(items)


def _bind_count(clause: exp.Expression | None, what: str) -> int | None:
    if clause is None:
        return None
    if isinstance(clause, exp.Fetch):
        raise QueryRefused("FETCH refused: not supported; write LIMIT n instead")
    if isinstance(clause, exp.Limit):
        options = clause.args.get("limit_options")
        if options is not None and options.args.get("percent"):
            raise QueryRefused(f"{what} with a percentage refused: not supported; write "
                               "LIMIT n with a whole number of rows")
        if options is not None and options.args.get("with_ties"):
            raise QueryRefused(f"{what} ... WITH TIES refused: not supported; write LIMIT n")
    if isinstance(clause, (exp.Limit, exp.Offset)):
        _check_args(clause, what)
    value = clause.expression if isinstance(clause, (exp.Limit, exp.Offset)) else clause
    if not isinstance(value, exp.Literal) or value.is_string:
        raise QueryRefused(f"{what} refused: expected a whole number literal")
    number = _int_literal(value, what)
    if not 0 <= number <= MAX_LIMIT:
        raise QueryRefused(f"{what} {number} refused: expected 0 to {MAX_LIMIT}")
    return number


def _int_literal(node: exp.Literal, what: str) -> int:
    try:
        return int(node.this)
    except ValueError:
        raise QueryRefused(f"{what} {node.this} refused: expected a whole number") from None


def _numeric_literal(node: exp.Literal) -> float:
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


class _Scope:
    """Name resolution and type checking for row-level (pre-aggregation) expressions."""

    def __init__(self, table: TableSpec, aliases: set[str], data_columns: frozenset[str] = frozenset()) -> None:
        self.table = table
        self.aliases = aliases
        self.data_columns = data_columns

    def column(self, node: exp.Expression) -> ColumnSpec:
        if not isinstance(node, exp.Column):
            raise QueryRefused(
                f"{node.sql(dialect='duckdb')} refused here: expected a column name"
            )
        self._check_qualifier(node)
        name = node.name.lower()
        if name == self.table.privacy_unit:
            raise QueryRefused(
                f"column {node.name} is the privacy unit: it may only appear as "
                f"COUNT(DISTINCT {node.name})"
            )
        spec = self.table.columns.get(name)
        if spec is None and name in self.data_columns:
            raise QueryRefused(
                f"column {node.name!r} exists in table {self.table.name} but is not in the policy; "
                f"policy columns: {', '.join(sorted(self.table.columns))}"
            )
        if spec is None:
            raise QueryRefused(
                f"unknown column {node.name!r} in table {self.table.name} "
                f"(columns: {', '.join(sorted(self.table.columns))})"
            )
        return spec

    def _check_qualifier(self, node: exp.Column) -> None:
        if node.args.get("catalog") or node.args.get("db"):
            raise QueryRefused(f"qualified column {node.sql()} refused: use table.column at most")
        if node.table and node.table.lower() not in self.aliases:
            raise QueryRefused(f"unknown table qualifier {node.table!r} in {node.sql()}")

    def is_unit(self, node: exp.Expression) -> bool:
        if not isinstance(node, exp.Column) or self.table.privacy_unit is None:
            return False
        self._check_qualifier(node)
        return node.name.lower() == self.table.privacy_unit

    def scalar_type(self, node: exp.Expression, where: str) -> str:
        """Type-check a row-level expression; return 'int', 'float', 'str', 'bool' or 'null'."""
        if isinstance(node, exp.AggFunc):
            raise QueryRefused(f"aggregate {node.sql(dialect='duckdb')} refused in {where}: "
                               "filter groups on aggregates with HAVING")
        return _type_of(node, where, self._leaf_type, self.scalar_type)

    def _leaf_type(self, node: exp.Expression, where: str) -> str | None:
        if isinstance(node, exp.Column):
            if node.is_star:
                raise QueryRefused(f"* refused in {where}")
            return self.column(node).type
        return None

    def rewrite_scalar(self, node: exp.Expression) -> exp.Expression:
        """Copy a checked expression into the form executed: plain quoted names, fractional
        literals and arithmetic as DOUBLE, casts as TRY_CAST (see `_harden`), so that no
        overflow, decimal precision or bad cast can raise an error whose message or
        occurrence depends on the data."""
        return _harden(self._bind_names(node.copy()))

    def _bind_names(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            return exp.column(self.table.columns[node.name.lower()].name, quoted=True)
        if isinstance(node, exp.Literal) and not node.is_string and not _is_round_digits(node) \
                and not node.this.replace("_", "").isdigit():
            # DuckDB reads 1.5 as a DECIMAL, whose casts and arithmetic can overflow.
            return _as_double(node)
        for key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                node.set(key, self._bind_names(child))
            elif isinstance(child, list):
                node.set(key, [self._bind_names(c) if isinstance(c, exp.Expression) else c
                               for c in child])
        return node


class _PostScope:
    """Expressions evaluated after noise: aggregates, group keys, literals and arithmetic."""

    def __init__(self, scope: _Scope, group_by: tuple[ColumnSpec, ...]) -> None:
        self.scope = scope
        self.group_by = group_by
        self.measurements: dict[tuple[str, str | None], Measurement] = {}

    def measurement(self, kind: str, column: ColumnSpec | None) -> exp.Column:
        key = (kind, column.name if column else None)
        if key not in self.measurements:
            self.measurements[key] = Measurement(kind, column, f"__m{len(self.measurements)}")
        return exp.column(self.measurements[key].name, quoted=True)

    def rewrite(self, node: exp.Expression, where: str,
                aliases: dict[str, OutputColumn]) -> exp.Expression:
        """Check `node` and rewrite it over group keys and noisy measurement columns.

        The rewritten expression is type-checked like a row-level one (measurements are
        numbers, group keys have their column's type) and hardened, so evaluating it on
        noisy values can neither fail nor overflow."""
        rewritten = self._rewrite(node, where, aliases)
        _type_of(rewritten, where, self._leaf_type, self._type)
        return _harden(rewritten)

    def _type(self, node: exp.Expression, where: str) -> str:
        return _type_of(node, where, self._leaf_type, self._type)

    def _leaf_type(self, node: exp.Expression, where: str) -> str | None:
        if not isinstance(node, exp.Column):
            return None
        key = next((col for col in self.group_by if col.name == node.name), None)
        return key.type if key is not None else "float"

    def _rewrite(self, node: exp.Expression, where: str,
                 aliases: dict[str, OutputColumn]) -> exp.Expression:
        if isinstance(node, exp.AggFunc):
            return self._aggregate(node, where)
        if isinstance(node, exp.Column):
            if node.is_star:
                raise QueryRefused(f"* refused in {where}")
            name = node.name.lower()
            if not node.table and name in aliases and not self._is_group_key(name):
                return aliases[name].expression.copy()
            if self.scope.is_unit(node):
                raise QueryRefused(
                    f"column {node.name} is the privacy unit: it may only appear as "
                    f"COUNT(DISTINCT {node.name})"
                )
            spec = self.scope.column(node)
            if spec not in self.group_by:
                raise QueryRefused(
                    f"column {node.name} in {where} refused: a column outside an aggregate must "
                    "be in GROUP BY (and have a public domain)"
                )
            return exp.column(spec.name, quoted=True)
        _type_of(node, where, lambda n, w: "float" if isinstance(n, (exp.AggFunc, exp.Column))
                 else None, lambda n, w: "float", shallow=True)
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            node = exp.TryCast(this=node.this, to=node.args["to"])
        rewritten = node.copy()
        for child_key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                rewritten.set(child_key, self._rewrite(child, where, aliases))
            elif isinstance(child, list):
                rewritten.set(child_key, [
                    self._rewrite(c, where, aliases) if isinstance(c, exp.Expression) else c
                    for c in child
                ])
        return rewritten

    def _is_group_key(self, name: str) -> bool:
        return any(col.name == name for col in self.group_by)

    def _aggregate(self, node: exp.AggFunc, where: str) -> exp.Expression:
        if isinstance(node, exp.Count):
            arg = node.this
            if isinstance(arg, exp.Star):
                return self.measurement("count", None)
            if isinstance(arg, exp.Distinct):
                targets = arg.expressions
                if len(targets) == 1 and self.scope.is_unit(targets[0]):
                    return self.measurement("count_distinct", None)
                unit = self.scope.table.privacy_unit
                hint = f"COUNT(DISTINCT {unit})" if unit else "COUNT(*) (rows are individuals)"
                raise QueryRefused(
                    f"{node.sql(dialect='duckdb')} refused: COUNT(DISTINCT ...) is supported only "
                    f"on the privacy unit; use {hint}"
                )
            if self.scope.is_unit(arg):
                raise QueryRefused(
                    f"COUNT({arg.name}) refused: count units with COUNT(DISTINCT {arg.name})"
                )
            return self.measurement("count", self._bare_column(node, arg))
        if isinstance(node, (exp.Sum, exp.Avg)):
            column = self._bare_column(node, node.this)
            if not column.numeric:
                raise QueryRefused(f"{node.key.upper()}({column.name}) refused: the column is "
                                   f"{column.type}, not numeric")
            if not column.bounded:
                raise QueryRefused(
                    f"{node.key.upper()}({column.name}) refused: the policy gives no lower/upper "
                    f"bounds for {column.name}, so its sensitivity is unbounded"
                )
            total = self.measurement("sum", column)
            if isinstance(node, exp.Sum):
                return total
            count = self.measurement("count", column)
            lo, hi = column.bounds
            mean = exp.Div(this=total, expression=_greatest(count, 1))
            return exp.Least(this=_greatest(mean, lo), expressions=[exp.Literal.number(hi)],
                             ignore_nulls=True)
        raise QueryRefused(
            f"aggregate {node.sql_name()} refused in {where}: supported aggregates are "
            f"{SUPPORTED_AGGREGATES}"
        )

    def _bare_column(self, node: exp.AggFunc, arg: exp.Expression) -> ColumnSpec:
        if isinstance(arg, exp.Distinct):
            raise QueryRefused(f"{node.sql(dialect='duckdb')} refused: DISTINCT is supported only "
                               "as COUNT(DISTINCT <privacy unit>)")
        if node.args.get("expressions") or not isinstance(arg, exp.Column):
            raise QueryRefused(
                f"{node.sql(dialect='duckdb')} refused: aggregate arguments must be a bare column "
                "(values are clamped to the policy's bounds, not to expressions)"
            )
        return self.scope.column(arg)


def _greatest(node: exp.Expression, floor: float) -> exp.Greatest:
    """GREATEST(node, floor) as DuckDB's own GREATEST, which skips NULL arguments."""
    return exp.Greatest(this=node, expressions=[exp.Literal.number(floor)], ignore_nulls=True)


_DOUBLE = exp.DataType.Type.DOUBLE
_NUMERIC_OPERATORS = _ARITHMETIC + (exp.Neg, exp.Abs, exp.Round, exp.Floor, exp.Ceil)


def _as_double(node: exp.Expression) -> exp.Expression:
    """TRY_CAST(node AS DOUBLE), unless it is one already: DOUBLE arithmetic never raises."""
    if isinstance(node, exp.TryCast) and node.to.this == _DOUBLE:
        return node
    return exp.TryCast(this=node, to=exp.DataType.build("DOUBLE"))


def _is_round_digits(node: exp.Expression) -> bool:
    return isinstance(node.parent, exp.Round) and node.arg_key == "decimals"


def _harden(node: exp.Expression) -> exp.Expression:
    """Make a checked expression total: it cannot raise on any value it is evaluated on.

    Every operand of arithmetic is DOUBLE (no integer or decimal overflow; division by zero
    gives NULL on the locked connections), SUBSTRING positions are TRY_CAST to INTEGER (inside
    the range DuckDB accepts), and CAST becomes TRY_CAST. A runtime error would otherwise
    reveal, by occurring or not, something about the exact data. Idempotent."""
    for key, child in list(node.args.items()):
        if isinstance(child, exp.Expression):
            node.set(key, _harden(child))
        elif isinstance(child, list):
            node.set(key, [_harden(c) if isinstance(c, exp.Expression) else c for c in child])
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
        return exp.TryCast(this=node.this, to=node.args["to"])
    if isinstance(node, _NUMERIC_OPERATORS):
        for key in ("this", "expression"):
            if isinstance(node.args.get(key), exp.Expression):
                node.set(key, _as_double(node.args[key]))
    if isinstance(node, exp.Substring):
        for key in ("start", "length"):
            value = node.args.get(key)
            if value is not None and not (isinstance(value, exp.TryCast)
                                          and value.to.this == exp.DataType.Type.INT):
                node.set(key, exp.TryCast(this=value, to=exp.DataType.build("INT")))
    return node


def _type_of(node: exp.Expression, where: str, leaf, recurse, shallow: bool = False) -> str:
    """Type-check one whitelisted scalar construct; children are typed by `recurse`.

    With `shallow`, only the construct itself is checked (children are checked elsewhere)."""
    _check_args(node, where)
    leaf_type = leaf(node, where)
    if leaf_type is not None:
        return leaf_type
    if isinstance(node, exp.Literal):
        if node.is_string:
            return "str"
        value = _numeric_literal(node)
        return "int" if float(value).is_integer() and "." not in node.this and "e" not in \
            node.this.lower() else "float"
    if isinstance(node, exp.Boolean):
        return "bool"
    if isinstance(node, exp.Null):
        return "null"
    if shallow:
        _check_known(node, where)
        return "float"
    child = lambda n: recurse(n, where)  # noqa: E731
    if isinstance(node, exp.Paren):
        return child(node.this)
    if isinstance(node, exp.Neg):
        return _numeric(child(node.this), node, "-")
    if isinstance(node, _ARITHMETIC):
        _numeric(child(node.this), node, "arithmetic")
        _numeric(child(node.expression), node, "arithmetic")
        return "float"
    if isinstance(node, _COMPARISONS):
        _common([child(node.this), child(node.expression)], node)
        return "bool"
    if isinstance(node, (exp.And, exp.Or)):
        _boolean(child(node.this), node)
        _boolean(child(node.expression), node)
        return "bool"
    if isinstance(node, exp.Not):
        _boolean(child(node.this), node)
        return "bool"
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise QueryRefused("IN (subquery) refused: list literal values")
        _common([child(node.this)] + [child(e) for e in node.expressions], node)
        return "bool"
    if isinstance(node, exp.Between):
        _common([child(node.this), child(node.args["low"]), child(node.args["high"])], node)
        return "bool"
    if isinstance(node, exp.Is):
        operand = child(node.this)
        if not isinstance(node.expression, (exp.Null, exp.Boolean)):
            raise QueryRefused("IS is supported only as IS [NOT] NULL, TRUE or FALSE")
        if isinstance(node.expression, exp.Boolean) and operand not in ("bool", "null"):
            # DuckDB would cast the operand to BOOLEAN, which fails on some values.
            raise QueryRefused(f"IS {node.expression.sql()} on a {operand} value refused in "
                               f"{_short(node)}: it applies to conditions (bool) only")
        return "bool"
    if isinstance(node, (exp.Like, exp.ILike)):
        if node.args.get("escape"):
            raise QueryRefused("LIKE ... ESCAPE refused: not supported")
        _string(child(node.this), node)
        _string(child(node.expression), node)
        return "bool"
    if isinstance(node, (exp.Abs, exp.Floor, exp.Ceil)):
        if node.args.get("decimals") or node.args.get("to"):
            raise QueryRefused(f"{node.sql_name()} takes one argument here")
        return _numeric(child(node.this), node, node.sql_name())
    if isinstance(node, exp.Round):
        decimals = node.args.get("decimals")
        if decimals is not None and (not isinstance(decimals, exp.Literal) or decimals.is_string):
            raise QueryRefused("ROUND's second argument must be a whole number literal")
        if decimals is not None and not -20 <= _int_literal(decimals, "ROUND digits") <= 20:
            raise QueryRefused("ROUND's digits must be between -20 and 20")
        return _numeric(child(node.this), node, "ROUND")
    if isinstance(node, (exp.Lower, exp.Upper)):
        return _string(child(node.this), node)
    if isinstance(node, exp.Trim):
        if node.args.get("expression") or node.args.get("position"):
            raise QueryRefused("TRIM takes one argument here")
        return _string(child(node.this), node)
    if isinstance(node, exp.Length):
        _string(child(node.this), node)
        return "int"
    if isinstance(node, exp.Substring):
        _string(child(node.this), node)
        for key in ("start", "length"):
            if node.args.get(key) is not None:
                _numeric(child(node.args[key]), node, "SUBSTRING")
        return "str"
    if isinstance(node, (exp.Coalesce, exp.Least, exp.Greatest)):
        return _common([child(node.this)] + [child(e) for e in node.expressions], node)
    if isinstance(node, exp.Case):
        if node.this is not None:
            raise QueryRefused("CASE <value> WHEN refused: write CASE WHEN <condition> THEN ...")
        results = []
        for branch in node.args.get("ifs") or []:
            _boolean(child(branch.this), branch)
            results.append(child(branch.args["true"]))
        if node.args.get("default") is not None:
            results.append(child(node.args["default"]))
        return _common(results, node)
    if isinstance(node, exp.Cast):
        target = _CAST_TYPES.get(node.to.this)
        if target is None or node.to.expressions:
            raise QueryRefused(
                f"CAST to {node.to.sql(dialect='duckdb')} refused: cast to INTEGER, BIGINT, DOUBLE, "
                "VARCHAR or BOOLEAN"
            )
        operand = child(node.this)
        if target in ("int", "float") and operand == "str":
            _check_text_to_number(node.this)
        return target
    _check_known(node, where)
    raise QueryRefused(f"{_construct_name(node)} refused in {where}")


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
            raise QueryRefused(f"CAST of {_short(operand)} to a number refused: text literals "
                               "cast to numbers must be plain decimal numbers; write the number "
                               "as a literal")
        if abs(float(operand.this)) > MAX_LITERAL:
            raise QueryRefused(f"CAST of {_short(operand)} to a number refused: magnitudes "
                               f"above {MAX_LITERAL:.0e} are not accepted")
        return
    raise QueryRefused(f"CAST of the text expression {_short(operand)} to a number refused: "
                       "cast a text column or a plain numeric literal instead")


_BINARY = frozenset({"this", "expression"})
_ONE_ARG = frozenset({"this"})
_ALLOWED_ARGS: dict[type, frozenset[str]] = {
    exp.Column: frozenset({"this", "table", "db", "catalog"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.In: frozenset({"this", "expressions", "query", "unnest", "field"}),
    exp.Between: frozenset({"this", "low", "high"}),
    exp.Is: _BINARY, exp.Like: _BINARY | {"negate", "escape"},
    exp.ILike: _BINARY | {"negate", "escape"},
    exp.Floor: frozenset({"this", "decimals", "to"}), exp.Ceil: frozenset({"this", "decimals", "to"}),
    exp.Round: frozenset({"this", "decimals"}), exp.Length: _ONE_ARG,
    exp.Trim: frozenset({"this", "expression", "position"}),
    exp.Substring: frozenset({"this", "start", "length"}),
    exp.Coalesce: frozenset({"this", "expressions", "is_nvl", "is_null"}),
    exp.Least: frozenset({"this", "expressions", "ignore_nulls"}),
    exp.Greatest: frozenset({"this", "expressions", "ignore_nulls"}),
    exp.Case: frozenset({"this", "ifs", "default"}), exp.If: frozenset({"this", "true", "false"}),
    exp.TryCast: frozenset({"this", "to", "safe"}), exp.Cast: frozenset({"this", "to"}),
    exp.DataType: frozenset({"this", "expressions", "nested", "kind"}),
    exp.Count: frozenset({"this", "expressions", "big_int"}),
    exp.Sum: frozenset({"this", "expressions"}), exp.Avg: frozenset({"this", "expressions"}),
    exp.Distinct: frozenset({"expressions"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Order: frozenset({"expressions"}),
    exp.Limit: frozenset({"expression", "limit_options"}), exp.Offset: frozenset({"expression"}),
    exp.Table: frozenset({"this", "alias", "db", "catalog"}),
    exp.TableAlias: frozenset({"this", "columns"}),
    **{kind: _ONE_ARG for kind in (exp.Paren, exp.Neg, exp.Not, exp.Abs, exp.Lower, exp.Upper,
                                   exp.Boolean)},
}


def _check_args(node: exp.Expression, where: str) -> None:
    """Refuse a construct carrying an option the engine would silently ignore (e.g. BETWEEN
    SYMMETRIC, LENGTH of bytes): only options that are implemented exactly may be set.
    Constructs outside the whitelist are left to `_check_known`, which names them."""
    allowed = _ALLOWED_ARGS.get(type(node))
    if allowed is None and isinstance(node, _ARITHMETIC + _COMPARISONS + (exp.And, exp.Or)):
        allowed = _BINARY
    if allowed is None:
        return
    extra = sorted(k for k, v in node.args.items() if k not in allowed and v not in (None, [], False))
    if extra:
        raise QueryRefused(f"{_short(node)} in {where} refused: the option {extra[0]!r} of "
                           f"{node.key.upper()} is not supported")


def _check_known(node: exp.Expression, where: str) -> None:
    """Refuse any construct outside the whitelist, naming it."""
    allowed = (exp.Paren, exp.Neg, exp.And, exp.Or, exp.Not, exp.In, exp.Between, exp.Is,
               exp.Like, exp.ILike, exp.Abs, exp.Floor, exp.Ceil, exp.Round, exp.Lower, exp.Upper,
               exp.Trim, exp.Length, exp.Substring, exp.Coalesce, exp.Least, exp.Greatest,
               exp.Case, exp.If, exp.Cast, exp.DataType, exp.Ordered) + _ARITHMETIC + _COMPARISONS
    if not isinstance(node, allowed):
        raise QueryRefused(f"{_construct_name(node)} refused in {where}")


def _construct_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return (f"function {node.name}() (not in the whitelist: {SCALAR_FUNCTIONS}; file readers, "
                "table functions and catalog functions are never allowed)")
    if isinstance(node, exp.Func):
        return f"function {node.sql_name()}() (allowed: {SCALAR_FUNCTIONS})"
    return f"construct {node.key.upper()} ({node.sql(dialect='duckdb')[:60]})"


def _numeric(kind: str, node: exp.Expression, what: str) -> str:
    if kind not in ("int", "float", "null"):
        raise QueryRefused(f"{what} needs numbers but got a {kind} in {_short(node)}")
    return "float" if kind == "null" else kind


def _boolean(kind: str, node: exp.Expression) -> None:
    if kind not in ("bool", "null"):
        raise QueryRefused(f"expected a condition but got a {kind} in {_short(node)}")


def _string(kind: str, node: exp.Expression) -> str:
    if kind not in ("str", "null"):
        raise QueryRefused(f"expected text but got a {kind} in {_short(node)}")
    return "str"


def _common(kinds: list[str], node: exp.Expression) -> str:
    """The common type of comparable operands; numbers compare with numbers only, and so on."""
    families = {"float" if k in ("int", "float") else k for k in kinds if k != "null"}
    if len(families) > 1:
        raise QueryRefused(
            f"cannot compare or combine {' and '.join(sorted(families))} values in {_short(node)}"
        )
    if not families:
        return "null"
    family = families.pop()
    if family == "float":
        return "int" if all(k in ("int", "null") for k in kinds) else "float"
    return family


def _short(node: exp.Expression) -> str:
    text = node.sql(dialect="duckdb")
    return text if len(text) <= 80 else text[:77] + "..."
