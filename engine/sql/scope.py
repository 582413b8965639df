"""Name resolution and type checking for binding: `Scope` resolves a row-level expression's
names to policy columns (the private table's or a joined one's), type-checks it with the scalar
whitelist and hardens it; `PostScope` checks what is evaluated after noise (aggregates, group
keys, literals) and binds each aggregate to its measurements."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence

from sqlglot import exp

from ..aggregates import Measured, Operand, aggregate_of, supported
from ..aggregates.variance import AMBIGUOUS
from ..errors import QueryRefused
from ..plan import GroupKey, Measurement, OutputColumn
from ..policy import ColumnSpec, TableSpec
from ..sql_types import NUMBER_TYPES, TIME_TYPES, SqlType
from .bounds import Range, value_range
from .calendar import seconds
from .harden import as_double, harden
from .join import Source, joined_column
from .scalars import MAX_LITERAL, short, type_of


def declared(column: ColumnSpec, scope: Scope, what: str) -> tuple[dt.datetime, dt.datetime]:
    """A date or timestamp column's declared bounds, or a refusal saying to declare them."""
    if column.span is None:
        raise QueryRefused(f"{what} refused: its values follow from the bounds of "
                           f"{scope.table.name}.{column.name}, which the policy does not give; "
                           f"declare lower and upper for {scope.table.name}.{column.name}")
    return column.span


class Scope:
    """Name resolution and type checking for row-level (pre-aggregation) expressions."""

    def __init__(self, table: TableSpec, aliases: set[str], data_columns: frozenset[str] = frozenset(),
                 joined: Sequence[Source] = ()) -> None:
        self.table = table
        self.aliases = aliases
        self.data_columns = data_columns
        self.joined = tuple(joined)

    def refers_to(self, node: exp.Expression, column: ColumnSpec) -> bool:
        """Whether `node` names the policy column `column` (of the private table or of a joined
        one: columns of one name in two tables are different columns)."""
        if not isinstance(node, exp.Column):
            return False
        try:
            return self.column(node) == column
        except QueryRefused:
            return False

    def has_column(self, node: exp.Column) -> bool:
        """Whether `node` names a policy column of the private or a joined table."""
        name = node.name.lower()
        return name in self.table.columns or any(name in s.table.columns for s in self.joined)

    def spec_of(self, node: exp.Column) -> ColumnSpec | None:
        """The policy column `node` names, or None (an output alias, an unknown name)."""
        try:
            return self.column(node)
        except QueryRefused:
            return None

    def column(self, node: exp.Expression) -> ColumnSpec:
        if not isinstance(node, exp.Column):
            raise QueryRefused(
                f"{node.sql(dialect='duckdb')} refused here: expected a column name"
            )
        self._check_qualifier(node)
        name = node.name.lower()
        source = self._owner(node)
        if source is not None:
            other = source.table
            if isinstance(other, TableSpec) and name == other.privacy_unit:
                raise QueryRefused(f"column {node.sql(dialect='duckdb')} is the privacy unit of "
                                   f"{other.name}: it may only appear as COUNT(DISTINCT "
                                   f"{self.table.name}.{name})")
            if name not in other.columns:
                raise QueryRefused(f"unknown column {node.name!r} in table {other.name} "
                                   f"(columns: {', '.join(sorted(other.columns))})")
            return joined_column(other, name, source.label)
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
        if node.table and node.table.lower() not in self.aliases \
                and not any(node.table.lower() in s.names for s in self.joined):
            raise QueryRefused(f"unknown table qualifier {node.table!r} in {node.sql()}")

    def _owner(self, node: exp.Column) -> Source | None:
        """The joined table a column reference names (None: the private table): the one its
        qualifier names, or, unqualified, the one table that has the column (a name two tables
        have must be qualified)."""
        if not self.joined:
            return None
        name = node.name.lower()
        if node.table:
            return next((s for s in self.joined if node.table.lower() in s.names), None)
        owners = [s for s in self.joined if name in s.table.columns]
        in_private = name in self.table.columns or name == self.table.privacy_unit
        if len(owners) + in_private > 1:
            first = self.table.name if in_private else owners[0].shown
            second = owners[0].shown if in_private else owners[1].shown
            raise QueryRefused(f"column {node.name} is in both {first} and {second}: "
                               f"write {first}.{name} or {second}.{name}")
        return owners[0] if owners else None

    def is_unit(self, node: exp.Expression) -> bool:
        if not isinstance(node, exp.Column) or self.table.privacy_unit is None:
            return False
        self._check_qualifier(node)
        if self._owner(node) is not None:
            return False
        return node.name.lower() == self.table.privacy_unit

    def scalar_type(self, node: exp.Expression, where: str) -> SqlType:
        """Type-check a row-level expression; return its type (NULL for a bare NULL)."""
        if isinstance(node, exp.AggFunc):
            raise QueryRefused(f"aggregate {node.sql(dialect='duckdb')} refused in {where}: "
                               "filter groups on aggregates with HAVING")
        return type_of(node, where, self._leaf_type, self.scalar_type)

    def _leaf_type(self, node: exp.Expression, where: str) -> SqlType | None:
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
        return harden(self._bind_names(node.copy()))

    def _bind_names(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            column = self.column(node)
            if column.type in TIME_TYPES:
                return _guarded(column)
            return exp.column(column.name, quoted=True)
        if isinstance(node, exp.Literal) and not node.is_string and not _is_round_digits(node) \
                and not node.this.replace("_", "").isdigit():
            # DuckDB reads 1.5 as a DECIMAL, whose casts and arithmetic can overflow.
            return as_double(node)
        for key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                node.set(key, self._bind_names(child))
            elif isinstance(child, list):
                node.set(key, [self._bind_names(c) if isinstance(c, exp.Expression) else c
                               for c in child])
        return node


class PostScope:
    """Expressions evaluated after noise: aggregates, group keys, literals and arithmetic."""

    def __init__(self, scope: Scope, group_by: tuple[GroupKey, ...], quantile_bins: int) -> None:
        self.scope = scope
        self.group_by = group_by
        self.quantile_bins = quantile_bins
        self.measurements: dict[tuple[Measured, str | None], Measurement] = {}
        self.operands: dict[tuple[str, bool], Operand] = {}
        self.requested: list[str] = []  # measurements asked for, in order, by the output bound now
        self.bound: list[Operand] = []  # operands bound, in order, by the output bound now

    @property
    def table(self) -> TableSpec:
        return self.scope.table

    def is_unit(self, node: exp.Expression) -> bool:
        return self.scope.is_unit(node)

    def measurement(self, kind: Measured, operand: Operand | None) -> exp.Column:
        key = (kind, operand.name if operand else None)
        if key not in self.measurements:
            self.measurements[key] = Measurement(kind, operand, f"__m{len(self.measurements)}")
        self.requested.append(self.measurements[key].name)
        return exp.column(self.measurements[key].name, quoted=True)

    def rewrite(self, node: exp.Expression, where: str,
                aliases: dict[str, OutputColumn]) -> exp.Expression:
        """Check `node` and rewrite it over group keys and noisy measurement columns.

        The rewritten expression is type-checked like a row-level one (measurements are
        numbers, group keys have their column's type) and hardened, so evaluating it on
        noisy values can neither fail nor overflow."""
        rewritten = self._rewrite(node, where, aliases)
        type_of(rewritten, where, self._leaf_type, self._type, released=True)
        return harden(rewritten)

    def _type(self, node: exp.Expression, where: str) -> SqlType:
        return type_of(node, where, self._leaf_type, self._type, released=True)

    def _leaf_type(self, node: exp.Expression, where: str) -> SqlType | None:
        if not isinstance(node, exp.Column):
            return None
        key = next((col for col in self.group_by if col.name == node.name), None)
        return key.type if key is not None else SqlType.FLOAT

    def _rewrite(self, node: exp.Expression, where: str,
                 aliases: dict[str, OutputColumn]) -> exp.Expression:
        if isinstance(node, exp.AggFunc):
            return self._aggregate(node, where)
        if isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc):
            return self._aggregate(_filtered(node), where)
        if isinstance(node, exp.WithinGroup):
            return self._aggregate(within_group(node), where)
        if isinstance(node, exp.Anonymous) and node.name.upper() in AMBIGUOUS:
            raise QueryRefused(f"{short(node)} refused in {where}: {AMBIGUOUS[node.name.upper()]}")
        key = self._key_of(node)
        if key is not None:
            return exp.column(key.name, quoted=True)
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
            if not self._is_group_key(spec.name):
                raise QueryRefused(
                    f"column {node.name} in {where} refused: a column outside an aggregate must "
                    "be in GROUP BY (and have a public domain)"
                )
            return exp.column(spec.name, quoted=True)
        if isinstance(node, exp.Interval):
            raise QueryRefused(f"INTERVAL refused in {where}: date arithmetic is not supported; use "
                               "EXTRACT(part FROM key), date_trunc('unit', key) or compare a date "
                               "key with DATE '...' literals")
        type_of(node, where, lambda n, w: SqlType.FLOAT if isinstance(n, (exp.AggFunc, exp.Column))
                 else None, lambda n, w: SqlType.FLOAT, shallow=True, released=True)
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            node = exp.TryCast(this=node.this, to=node.args["to"])
        rewritten = node.copy()
        for child_key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                rewritten.set(child_key, self._argument(child, where, aliases))
            elif isinstance(child, list):
                rewritten.set(child_key, [
                    self._argument(c, where, aliases) if isinstance(c, exp.Expression) else c
                    for c in child
                ])
        return rewritten

    def _argument(self, node: exp.Expression, where: str,
                  aliases: dict[str, OutputColumn]) -> exp.Expression:
        """An argument of an operator or function after noise: a part name (EXTRACT's `month`)
        as written, a date or timestamp key guarded by the range of its public values (the form
        on which the gate accepts date functions, §17), anything else rewritten."""
        if isinstance(node, exp.Var):
            return node.copy()
        rewritten = self._rewrite(node, where, aliases)
        key = next((k for k in self.group_by if isinstance(rewritten, exp.Column)
                    and k.name == rewritten.name and k.type in TIME_TYPES and k.keys), None)
        if key is None:
            return rewritten
        return _guard(key.name, key.type, min(key.keys), max(key.keys))

    def _is_group_key(self, name: str) -> bool:
        return any(col.name == name for col in self.group_by)

    def _key_of(self, node: exp.Expression) -> GroupKey | None:
        """The expression GROUP BY key that `node` repeats (as SQL text), if any."""
        if isinstance(node, (exp.Column, exp.Literal, exp.AggFunc)):
            return None
        inner = node
        while isinstance(inner, exp.Paren):
            inner = inner.this
        text = inner.sql(dialect="duckdb")
        return next((key for key in self.group_by if key.name != key.label and key.label == text), None)

    def _aggregate(self, node: exp.AggFunc, where: str) -> exp.Expression:
        aggregate = aggregate_of(node)
        if aggregate is None:
            raise QueryRefused(
                f"aggregate {node.sql_name()} refused in {where}: supported aggregates are "
                f"{supported()}"
            )
        return aggregate.bind(node, self)

    def operand(self, node: exp.Expr, arg: exp.Expression, numeric: bool) -> Operand:
        registered = aggregate_of(node) if isinstance(node, exp.AggFunc) else None
        distinct = isinstance(node.this, exp.Distinct)
        call = node.key.upper() if distinct or registered is None else registered.name
        if isinstance(arg, exp.Distinct):
            raise QueryRefused(f"{node.sql(dialect='duckdb')} refused: DISTINCT is supported only "
                               "in COUNT, SUM and AVG")
        if node.args.get("expressions"):
            raise QueryRefused(f"{node.sql(dialect='duckdb')} refused: {call} takes one argument")
        kind = self.scope.scalar_type(arg, f"the argument of {call}")
        columns = tuple(dict.fromkeys(self.scope.column(c) for c in arg.find_all(exp.Column)))
        bare = arg if isinstance(arg, exp.Column) else None
        name = columns[0].name if bare is not None else arg.sql(dialect="duckdb")
        shown = f"DISTINCT {name}" if distinct else name  # SUM(DISTINCT note), not SUM DISTINCT(note)
        key = (name, numeric)
        if key in self.operands:
            self.bound.append(self.operands[key])
            return self.operands[key]
        value = self.scope.rewrite_scalar(arg)
        if not numeric:
            found = Operand(name, kind, value, columns)
        elif kind == SqlType.BOOL:
            found = Operand(name, SqlType.BOOL, value, columns, 0, 1)
        elif kind == SqlType.NULL:
            raise QueryRefused(f"{call}({shown}) refused: the argument is always NULL")
        elif kind in TIME_TYPES:
            raise QueryRefused(
                f"{call}({shown}) refused: a {kind} is not a number; aggregate a number taken "
                f"from it, e.g. {call}(EXTRACT(year FROM {name})) or {call}(EXTRACT(month FROM "
                f"{name})), or count the rows with COUNT({name})")
        elif kind not in NUMBER_TYPES:
            what = "column" if bare is not None else "argument"
            raise QueryRefused(f"{call}({shown}) refused: the {what} is {kind}, not numeric "
                               f"(a condition counts as 0/1; or COUNT({shown}))")
        elif bare is not None:
            self._column_range(call, name, bare)
            lo, hi = columns[0].bounds
            found = Operand(name, kind, value, columns, lo, hi)
        else:
            found = self._expression_operand(call, name, arg, kind, value, columns)
        self.operands[key] = found
        self.bound.append(found)
        return found

    def _expression_operand(self, call: str, name: str, arg: exp.Expression, kind: SqlType,
                            value: exp.Expression, columns: tuple[ColumnSpec, ...]) -> Operand:
        """A numeric row expression, bounded by interval arithmetic over the policy's column
        bounds; its value is clamped to those bounds, so they hold whatever the data holds."""
        found = value_range(arg, lambda column: self._column_range(call, name, column))
        if found is None:
            raise QueryRefused(f"{call}({name}) refused: the argument is always NULL")
        lo, hi = found
        if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) > MAX_LITERAL:
            raise QueryRefused(
                f"{call}({name}) refused: its values may reach [{lo:g}, {hi:g}] under the policy's "
                f"bounds, beyond the {MAX_LITERAL:.0e} an aggregate's argument may reach")
        if kind == SqlType.INT:  # an integer value clamped to integers keeps the discrete Laplace exact
            lo, hi = math.floor(lo), math.ceil(hi)
        return Operand(name, kind, value, columns, lo, hi)

    def _column_range(self, call: str, name: str, node: exp.Column) -> Range:
        """A column's public range in an aggregate's argument (a bool is 0 or 1), or a refusal
        naming the column and what would be accepted instead."""
        column = self.scope.column(node)
        if column.type == SqlType.BOOL:
            return 0.0, 1.0
        if column.type in TIME_TYPES:  # inside EXTRACT(year FROM ...): its declared bounds
            first, last = declared(column, self.scope, f"{call}({name})")
            return seconds(first), seconds(last)
        if not column.numeric:
            raise QueryRefused(f"{call}({name}) refused: column {column.name} is {column.type}, not "
                               f"numeric; COUNT({name}) counts its non-NULL values")
        if not column.bounded:
            alternative = f"; or GROUP BY {column.name}" if column.group_values is not None else ""
            raise QueryRefused(
                f"{call}({name}) refused: the policy gives no lower/upper bounds for "
                f"{column.name}, so its sensitivity is unbounded; declare them in the policy "
                f"or use COUNT({name}){alternative}")
        lo, hi = column.bounds
        return float(lo), float(hi)


def _guarded(column: ColumnSpec) -> exp.Expression:
    """A date or timestamp column as queries read it: NULL outside the range it is read in
    (its declared bounds, else years 1 to 9999), so every date function and cast is total on
    it, EXTRACT and date_trunc stay within the ranges the plan derives, and a value outside the
    bounds is never counted in a group (docs/theory.md §17)."""
    first, last = column.period
    return _guard(column.name, column.type, first, last)


def _guard(name: str, kind: SqlType, first: dt.date, last: dt.date) -> exp.Expression:
    """`CASE WHEN name BETWEEN first AND last THEN name END` for a date or timestamp column."""
    def text(value: dt.date) -> str:
        if kind == SqlType.DATE:
            return (value.date() if isinstance(value, dt.datetime) else value).isoformat()
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    kind_sql = "DATE" if kind == SqlType.DATE else "TIMESTAMP"
    raw = exp.column(name, quoted=True)
    inside = exp.Between(this=raw, low=exp.TryCast(this=exp.Literal.string(text(first)),
                                                   to=exp.DataType.build(kind_sql)),
                         high=exp.TryCast(this=exp.Literal.string(text(last)),
                                          to=exp.DataType.build(kind_sql)))
    return exp.Case(ifs=[exp.If(this=inside, true=raw.copy())])


def _filtered(node: exp.Filter) -> exp.AggFunc:
    """AGG(x) FILTER (WHERE c) as AGG(CASE WHEN c THEN x END), COUNT(*) counting 1 per row: the
    same value, with the condition part of the argument (so bound and type-checked with it)."""
    call = node.this.copy()
    condition = node.expression.this if isinstance(node.expression, exp.Where) else node.expression
    if isinstance(call.this, exp.Distinct):
        raise QueryRefused(f"{short(node)} refused: FILTER is not supported on "
                           f"{call.sql_name()}(DISTINCT ...); put the condition in WHERE")
    value = exp.Literal.number(1) if isinstance(call.this, exp.Star) else call.this
    call.set("this", exp.Case(ifs=[exp.If(this=condition.copy(), true=value.copy())]))
    return call


def within_group(node: exp.WithinGroup) -> exp.AggFunc:
    """PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x) as QUANTILE_CONT(x, q), DuckDB's own
    reading of it; anything else with WITHIN GROUP is refused naming that form."""
    call, order = node.this, node.expression
    items = order.expressions if isinstance(order, exp.Order) else []
    if not isinstance(call, exp.PercentileCont) or call.args.get("expression") is not None \
            or len(items) != 1 or not isinstance(items[0], exp.Ordered) or items[0].args.get("desc"):
        raise QueryRefused(f"{short(node)} refused: WITHIN GROUP is supported as "
                           "PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY expr), or write QUANTILE_CONT(expr, q)")
    return exp.PercentileCont(this=items[0].this.copy(), expression=call.this.copy())


def _is_round_digits(node: exp.Expression) -> bool:
    return isinstance(node.parent, exp.Round) and node.arg_key == "decimals"
