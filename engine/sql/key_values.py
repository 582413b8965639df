"""The public keys of a GROUP BY expression over columns whose values the policy lists (a bool,
a domain, a bounded int or a declared date column): the expression evaluated in DuckDB on every
combination of those values (NULL included), no data read (docs/theory.md §26)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
from sqlglot import exp

from ..errors import QueryRefused
from ..policy import ColumnSpec
from ..sql_types import SqlType
from .bounds import Range, value_range
from .calendar import PART_FUNCTIONS
from .scalars import short
from .scope import Scope

# Combinations of column values evaluated to find an expression's keys: ten times the key limit,
# so planning stays within a second or two (DuckDB evaluates about ten million rows a second).
MAX_COMBINATIONS = 10_000_000

KEY_TYPES = (SqlType.INT, SqlType.BOOL, SqlType.STR, SqlType.DATE)

ColumnRange = Callable[[exp.Column], Range]
DateSpan = Callable[[ColumnSpec], tuple[dt.datetime, dt.datetime]]


def expression_keys(node: exp.Expression, kind: SqlType, scope: Scope, value: exp.Expression,
                    key_range: ColumnRange, span: DateSpan, max_keys: int) -> tuple[SqlType, tuple]:
    """The sorted distinct non-NULL values of `value` (the hardened `node`, of type `kind`) on
    every combination of its columns' public values; an int expression with a column that lists
    no values (a bounded float) or too many combinations takes every whole number of its range
    by interval arithmetic instead. A number whose values are all whole is an int key. Refused
    beyond `max_keys` keys, quoting both numbers."""
    what = short(node)
    if kind not in KEY_TYPES and kind != SqlType.FLOAT:
        raise QueryRefused(f"GROUP BY {what} refused: its values are {kind.value}s; a computed key "
                           "is a number, bool, text or date")
    columns = tuple(dict.fromkeys(scope.column(c) for c in node.find_all(exp.Column)))
    lists = [_values(column, span) for column in columns]
    missing = next((c for c, v in zip(columns, lists, strict=True) if v is None), None)
    combinations = math.prod(len(v) + 1 for v in lists if v is not None)
    if missing is not None or combinations > MAX_COMBINATIONS:
        if kind in (SqlType.INT, SqlType.FLOAT) and whole(node, scope):
            return SqlType.INT, _whole_numbers(node, what, key_range, max_keys)
        raise QueryRefused(_not_listed(what, scope, missing) if missing is not None else
                           f"GROUP BY {what} refused: its keys would be computed from "
                           f"{combinations} combinations of its columns' values; at most "
                           f"{MAX_COMBINATIONS}")
    keys = _evaluate(value, [v for v in lists if v is not None], max_keys)
    if len(keys) > max_keys:
        raise QueryRefused(f"GROUP BY {what} would produce more than {max_keys} groups; at most "
                           f"{max_keys}")
    if kind in (SqlType.INT, SqlType.FLOAT):
        keys = [k for k in keys if math.isfinite(k)]  # NaN and ±inf group nothing, as NULL
        odd = next((k for k in keys if not (float(k).is_integer() and abs(k) <= 2 ** 53)), None)
        if odd is not None:
            raise QueryRefused(f"GROUP BY {what} refused: it takes values that are not whole "
                               f"numbers (such as {odd:g}); group on FLOOR, CEIL or ROUND of it")
        return SqlType.INT, tuple(sorted({int(k) for k in keys}))
    return kind, tuple(keys)


_WHOLE_FUNCTIONS = (exp.Floor, exp.Ceil, exp.Extract)
_WHOLE_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Abs, exp.Paren, exp.Coalesce,
                     exp.Least, exp.Greatest)
_INT_CASTS = (exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
              exp.DataType.Type.BIGINT, exp.DataType.Type.INT128)


def whole(node: exp.Expression, scope: Scope) -> bool:
    """Whether an expression's every non-NULL value is a whole number, read from its form: int
    columns and literals, FLOOR, CEIL, ROUND to 0 digits, EXTRACT, casts to an integer type, and
    sums, differences, products, LEAST/GREATEST/COALESCE of such."""
    if isinstance(node, exp.Column):
        return scope.column(node).type in (SqlType.INT, SqlType.BOOL)
    if isinstance(node, exp.Literal):
        return not node.is_string and node.this.replace("_", "").lstrip("-").isdigit()
    if isinstance(node, (*_WHOLE_FUNCTIONS, exp.Null)) or (
            isinstance(node, exp.Round) and node.args.get("decimals") is None):
        return True
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return node.to.this in _INT_CASTS
    if isinstance(node, _WHOLE_ARITHMETIC):
        return all(whole(child, scope) for child in node.iter_expressions())
    return isinstance(node, tuple(PART_FUNCTIONS))


@dataclass(frozen=True)
class Listed:
    """A column's public values: a domain's (or booleans'), or the whole numbers (days) from
    `first` to `last`."""

    column: ColumnSpec
    values: tuple = ()
    first: int | dt.date | None = None
    last: int | dt.date | None = None

    def __len__(self) -> int:
        if self.first is None or self.last is None:
            return len(self.values)
        if isinstance(self.first, dt.date) and isinstance(self.last, dt.date):
            return (self.last - self.first).days + 1
        return int(self.last) - int(self.first) + 1  # type: ignore[arg-type]

    def source(self, conn: duckdb.DuckDBPyConnection, index: int) -> str:
        """A one-column SELECT of these values and NULL, named as the column."""
        name = exp.to_identifier(self.column.name, quoted=True).sql(dialect="duckdb")
        if isinstance(self.first, dt.date):
            return (f"(SELECT CAST(range AS DATE) AS {name} FROM range(DATE '{self.first}', "
                    f"DATE '{self.last}' + INTERVAL 1 DAY, INTERVAL 1 DAY) UNION ALL SELECT NULL)")
        if self.first is not None:
            return (f"(SELECT CAST(range AS BIGINT) AS {name} FROM range({self.first}, "
                    f"{self.last} + 1) UNION ALL SELECT NULL)")
        table = f"__v{index}"
        kind = {SqlType.INT: "BIGINT", SqlType.BOOL: "BOOLEAN", SqlType.DATE: "DATE",
                SqlType.FLOAT: "DOUBLE"}.get(self.column.type, "VARCHAR")
        conn.execute(f"CREATE TABLE {table} (v {kind})")
        conn.executemany(f"INSERT INTO {table} VALUES (?)", [(v,) for v in self.values] + [(None,)])
        return f"(SELECT v AS {name} FROM {table})"


def _values(column: ColumnSpec, span: DateSpan) -> Listed | None:
    """The values the policy lists for a column (its domain, booleans, the whole numbers of an
    int column's bounds, the days of a date column's narrowed bounds), or None."""
    if column.group_values is not None:
        return Listed(column, tuple(column.group_values))
    if column.type == SqlType.INT and column.bounded:
        return Listed(column, first=math.ceil(column.bounds[0]), last=math.floor(column.bounds[1]))
    if column.type == SqlType.DATE and column.span is not None:
        first, last = (moment.date() for moment in span(column))
        return Listed(column, first=first, last=last)
    return None


def _not_listed(what: str, scope: Scope, column: ColumnSpec) -> str:
    return (f"GROUP BY {what} refused: {scope.table.name}.{column.name} lists no values in the "
            "policy; a computed key reads bool columns, columns with a domain, and int or date "
            "columns with lower and upper")


def _whole_numbers(node: exp.Expression, what: str, key_range: ColumnRange, max_keys: int) -> tuple:
    """Every whole number in the range interval arithmetic gives an int expression."""
    found = value_range(node, key_range)
    if found is None:
        raise QueryRefused(f"GROUP BY {what} refused: its value is always NULL")
    lo, hi = math.ceil(found[0]), math.floor(found[1])
    if hi - lo + 1 > max_keys:
        raise QueryRefused(f"GROUP BY {what} would produce {hi - lo + 1} groups; at most {max_keys}")
    return tuple(range(lo, hi + 1))


def _evaluate(value: exp.Expression, lists: list[Listed], max_keys: int) -> list:
    """`value` on the cross product of the lists (each with NULL added), in an empty in-memory
    DuckDB: its distinct non-NULL results, sorted, at most max_keys + 1 of them."""
    with duckdb.connect(":memory:", config={"threads": 1}) as conn:
        sources = [listed.source(conn, index) for index, listed in enumerate(lists)]
        rows = " CROSS JOIN ".join(sources) if sources else "(SELECT 1)"
        key = value.sql(dialect="duckdb")
        found = conn.execute(f"SELECT DISTINCT k FROM (SELECT {key} AS k FROM {rows}) "
                             f"WHERE k IS NOT NULL ORDER BY k LIMIT {max_keys + 1}").fetchall()
    return [row[0] for row in found]
