"""The structural gate: bind SQL on an empty copy of the schema and refuse fallible plans.

Before SQL built from a query runs on the data, it is bound on a DuckDB connection that holds
EMPTY tables with the data's column types (and the bounded copies'). DuckDB's own binder then
shows every cast it inserted, implicit ones included, and every function it chose, with their
argument types (`json_serialize_plan`, unoptimized). A plan is accepted only if every cast is
total (no value of its source type can make it fail) or a TRY_CAST, and every function and
operator is on an allow-list of total ones for the argument types it got. That connection reads
no data, so its verdict, and every message it produces, depends on the query text and the schema
alone; `explain` binds there too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import duckdb

from ..aggregates import measured
from ..aggregates.per_unit import PER_UNIT_BOUND
from ..errors import QueryRefused
from ..sql.harden import BOUND_AS
from ..sql.scalars import RELEASED_SCALARS, SCALARS
from ..unnest_rows import UNNEST_BOUND, UNNEST_CLASS, UNNEST_OPERATOR

_SIGNED = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64, "HUGEINT": 128}
_UNSIGNED = {"UTINYINT": 8, "USMALLINT": 16, "UINTEGER": 32, "UBIGINT": 64, "UHUGEINT": 128}
_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INTEGER": 10, "BIGINT": 19, "HUGEINT": 39,
           "UTINYINT": 3, "USMALLINT": 5, "UINTEGER": 10, "UBIGINT": 20, "UHUGEINT": 39}
_FLOATS = {"FLOAT", "DOUBLE"}
_NUMBERS = set(_SIGNED) | set(_UNSIGNED) | _FLOATS | {"DECIMAL"}
_TIMES = {"DATE", "TIMESTAMP"}
_TO_TEXT = _NUMBERS | _TIMES | {"BOOLEAN", "VARCHAR"}
# SUBSTRING is total for positions within 32-bit integers and fails beyond (measured).
_SMALL_INTS = {"TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT"}

_OPERATORS = {"LOGICAL_PROJECTION", "LOGICAL_AGGREGATE_AND_GROUP_BY", "LOGICAL_FILTER",
              "LOGICAL_GET", "LOGICAL_COMPARISON_JOIN", "LOGICAL_CROSS_PRODUCT",
              "LOGICAL_ORDER_BY", "LOGICAL_EXPRESSION_GET", "LOGICAL_DUMMY_SCAN", "LOGICAL_LIMIT",
              "LOGICAL_DISTINCT",  # DISTINCT compares values: total on any (NaN equals NaN)
              UNNEST_OPERATOR}  # a list column's items (docs/theory.md §31)


def _bound(category: str) -> frozenset[str]:
    """The DuckDB names of every whitelisted scalar in one category (KeyError for a scalar
    engine/sql/harden.py's BOUND_AS does not map: each must say how DuckDB binds it)."""
    return frozenset(name for scalar in SCALARS + RELEASED_SCALARS
                     for name in BOUND_AS[scalar.name].get(category, frozenset()))


_TOTAL_CLASSES = {"BOUND_REF", "BOUND_COLUMN_REF", "BOUND_CONSTANT", UNNEST_CLASS} | _bound("class")
_TOTAL_OPERATORS = _bound("operator")
_COMPARISONS = _bound("comparison")
_CASTS = _bound("cast")
_ON_FLOATS = _bound("double")
_ON_TEXT = _bound("text")
_SAME_TYPE = _bound("same")
_POSITIONS = _bound("positions")
_ON_TIMES = _bound("time")
_TABLE_SCAN = "seq_scan"


class SchemaGate:
    """A schema-only DuckDB connection that binds SQL and judges its bound plan, per SQL text."""

    def __init__(self, tables: dict[tuple[str, ...], list[tuple[str, str]]]) -> None:
        """`tables` maps a table's path, `(name,)` or `(catalog, schema, name)`, to its
        (column, DuckDB type) list; the tables are created empty."""
        self._conn = duckdb.connect(":memory:", config={
            "enable_external_access": False, "autoinstall_known_extensions": False,
            "autoload_known_extensions": False, "error_on_division_by_zero": False,
        })
        self._tables: set[tuple[str, ...]] = set()
        for path, columns in tables.items():
            self.add(path, columns)
        self._conn.execute("SET lock_configuration = true")
        self._verdicts: dict[str, str | None] = {}

    def add(self, path: tuple[str, ...], columns: list[tuple[str, str]]) -> None:
        """Create one more empty table (a bounded copy of a column set, made when a query first
        names it); a path already held is left as it is."""
        if path in self._tables:
            return
        if len(path) > 1 and not self._conn.execute(
                "SELECT count(*) FROM duckdb_databases() WHERE database_name = ?",
                [path[0]]).fetchall()[0][0]:
            self._conn.execute(f"ATTACH ':memory:' AS {_quote(path[0])}")
        body = ", ".join(f"{_quote(col)} {kind}" for col, kind in columns)
        self._conn.execute(f"CREATE TABLE {'.'.join(map(_quote, path))} ({body})")
        self._tables.add(path)

    def check(self, sql: str) -> None:
        """Raise QueryRefused unless `sql` binds and its plan can fail on no value."""
        if sql not in self._verdicts:
            self._verdicts[sql] = self._judge(sql)
        refusal = self._verdicts[sql]
        if refusal is not None:
            raise QueryRefused(refusal)

    def close(self) -> None:
        self._conn.close()

    def _judge(self, sql: str) -> str | None:
        try:
            text = self._conn.execute("SELECT json_serialize_plan(?, optimize := false)",
                                      [sql]).fetchall()[0][0]
        except duckdb.Error as exc:
            return f"the query cannot be run: {_first_line(str(exc))}"
        try:
            plan = json.loads(text)
        except ValueError:  # DuckDB writes a NaN or infinite constant as NAN or INF, not JSON
            return ("a constant that is not a number (such as 0 / 0) refused: DuckDB folds it "
                    "into a plan that cannot be checked; write the expression without it")
        if plan.get("error"):
            return f"the query cannot be run: {_first_line(plan.get('error_message', ''))}"
        for node in _nodes(plan["plans"]):
            problem = _operator_problem(node) if "expression_class" not in node \
                else _expression_problem(node)
            if problem is not None:
                return (f"{problem} refused: it could fail on some data value, and whether a "
                        "query fails must not depend on the data")
        return None


def _nodes(value) -> Iterator[dict]:
    """Every plan operator and bound expression in the serialized plan, without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            kind = item.get("type")
            if "expression_class" in item or (isinstance(kind, str)
                                              and kind.startswith("LOGICAL_")):
                yield item
            stack.extend(v for v in item.values() if isinstance(v, (list, dict)))


def _operator_problem(node: dict) -> str | None:
    kind = node["type"]
    if kind not in _OPERATORS:
        return f"plan operator {kind}"
    if kind == "LOGICAL_GET" and node.get("qname", {}).get("path") != [_TABLE_SCAN]:
        return f"table function {'.'.join(node.get('qname', {}).get('path', ['?']))}"
    return None


def _expression_problem(node: dict) -> str | None:
    cls, kind = node["expression_class"], node.get("type")
    if cls in _TOTAL_CLASSES:
        return None
    if cls == "BOUND_OPERATOR":
        return None if kind in _TOTAL_OPERATORS else f"operator {kind}"
    if cls == "BOUND_AGGREGATE":
        name = _name(node)
        if not any(name in aggregate.bound for aggregate in measured()) and name not in PER_UNIT_BOUND:
            return f"aggregate {name}()"
        if name == "sum" and not all(_type(c)["id"] in _NUMBERS for c in _children(node)):
            return "SUM of a non-number"
        return None
    if cls != "BOUND_FUNCTION":
        return f"expression {cls}"
    if kind in _CASTS:
        return _cast_problem(node)
    if kind in _COMPARISONS:
        return None
    return _function_problem(node)


def _cast_problem(node: dict) -> str | None:
    if node.get("function_data", {}).get("try_cast"):
        return None
    operand = _children(node)[0]
    source, target = _type(operand), _type(node)
    if total_cast(source, target) or _constant_fits(operand, target):
        return None
    if source["id"] in _TIMES and target["id"] in _TIMES and _in_range(operand):
        return None  # DATE <-> TIMESTAMP is total on years 1 to 9999
    return f"cast from {_type_name(source)} to {_type_name(target)}"


def _constant_fits(operand: dict, target: dict) -> bool:
    """Whether `operand` is an integer constant that the target type holds exactly (DuckDB
    casts a literal to a narrow column's type, e.g. 3 to TINYINT in `age > 3`)."""
    if operand.get("expression_class") != "BOUND_CONSTANT":
        return False
    kind, value = _type(operand)["id"], operand["value"].get("value")
    if (kind not in _SIGNED and kind not in _UNSIGNED) or isinstance(value, bool) \
            or not isinstance(value, int):
        return False
    t = target["id"]
    if t in _SIGNED:
        return -(2 ** (_SIGNED[t] - 1)) <= value < 2 ** (_SIGNED[t] - 1)
    if t in _UNSIGNED:
        return 0 <= value < 2 ** _UNSIGNED[t]
    if t == "DECIMAL":
        return abs(value) < 10 ** (_width(target) - _scale(target))
    return False


def total_cast(source: dict, target: dict) -> bool:
    """Whether DuckDB's CAST from `source` to `target` succeeds on every value of `source`."""
    s, t = source["id"], target["id"]
    if s == "NULL" or (s == t and s != "DECIMAL"):
        return True
    if t == "VARCHAR":
        return s in _TO_TEXT
    if s == "BOOLEAN":
        return t in _SIGNED or t in _UNSIGNED or t in _FLOATS or (
            t == "DECIMAL" and _width(target) - _scale(target) >= 1)
    if t == "BOOLEAN":
        return s in _NUMBERS
    if s in _SIGNED:
        if t in _SIGNED:
            return _SIGNED[t] >= _SIGNED[s]
        if t in _FLOATS:
            return True
    if s in _UNSIGNED:
        if t in _UNSIGNED:
            return _UNSIGNED[t] >= _UNSIGNED[s]
        if t in _SIGNED:
            return _SIGNED[t] > _UNSIGNED[s]
        if t in _FLOATS:
            return t == "DOUBLE" or s != "UHUGEINT"
    if (s in _SIGNED or s in _UNSIGNED) and t == "DECIMAL":
        return _width(target) - _scale(target) >= _DIGITS[s]
    if s == "FLOAT":
        return t == "DOUBLE"
    if s == "DECIMAL":
        if t in _FLOATS:
            return True
        if t == "DECIMAL":
            return _scale(target) >= _scale(source) and \
                _width(target) - _scale(target) >= _width(source) - _scale(source)
    return False


def _function_problem(node: dict) -> str | None:
    name = _name(node)
    kinds = [_type(c)["id"] for c in _children(node)]
    if name in ("+", "-") and _fixed_shift(_children(node)):
        return None
    if name in _ON_FLOATS:
        operands = kinds[:1] if name == "round" else kinds
        if all(k in _FLOATS for k in operands) and (name != "round" or kinds[1:] in ([], ["INTEGER"])):
            return None
        return f"function {name}({', '.join(kinds)}) (total only on DOUBLE)"
    if name in _ON_TEXT:
        return None if all(k == "VARCHAR" for k in kinds) else \
            f"function {name}({', '.join(kinds)}) (total only on VARCHAR)"
    if name in _ON_TIMES:
        children = _children(node)
        times = [c for c in children if _type(c)["id"] in _TIMES]
        if times and all(_in_range(c) for c in times) and all(
                c in times or (c.get("expression_class") == "BOUND_CONSTANT"
                               and _type(c)["id"] == "VARCHAR") for c in children):
            return None
        return (f"function {name}({', '.join(kinds)}) (total only on a DATE or TIMESTAMP known to "
                "lie in years 1 to 9999)")
    if name in _SAME_TYPE:
        return None if len(set(kinds)) == 1 else f"function {name}({', '.join(kinds)})"
    if name in UNNEST_BOUND:
        return None if tuple(kinds) == UNNEST_BOUND[name] else f"function {name}({', '.join(kinds)})"
    if name in _POSITIONS:
        children = _children(node)
        if kinds[0] == "VARCHAR" and all(_small_int(c) for c in children[1:]):
            return None
        return f"function substring({', '.join(kinds)}) (positions must be 32-bit integers)"
    return f"function {name}()"


# A fixed shift of a date or timestamp known to lie in years 1 to 9999 (a GROUP BY key over a
# moved date, engine/sql/shifted_keys.py): at most 10,000 years of days and microseconds, no
# months. DuckDB's timestamps reach years 290308 BC to 294247, so it cannot overflow.
_MOST_SHIFT_DAYS = 3_660_000


def _fixed_shift(children: list[dict]) -> bool:
    """Whether `children` are a DATE or TIMESTAMP in range and a constant INTERVAL without
    months of at most `_MOST_SHIFT_DAYS` (days and microseconds alike)."""
    if len(children) != 2:
        return False
    moment, step = children
    value = (step.get("value") or {}).get("value") if step.get("expression_class") == "BOUND_CONSTANT" \
        else None
    if _type(moment)["id"] not in _TIMES or not _in_range(moment) or _type(step)["id"] != "INTERVAL" \
            or not isinstance(value, dict):
        return False
    days, micros = value.get("days"), value.get("micros")
    return value.get("months") == 0 and isinstance(days, int) and isinstance(micros, int) \
        and abs(days) <= _MOST_SHIFT_DAYS and abs(micros) <= _MOST_SHIFT_DAYS * 86_400_000_000


def _in_range(node: dict) -> bool:
    """Whether a DATE or TIMESTAMP expression is NULL or in years 1 to 9999 on every row, from
    its form alone: an ISO literal of that range, a column read through a CASE that keeps it
    only between two such literals (binding's form, engine/sql/scope.py `_guarded`), or casts,
    date_trunc, CASE and COALESCE of such values. Anything else (a bare column, which may hold
    'infinity' or year 5881580) is not known to be."""
    cls, kind = node.get("expression_class"), node.get("type")
    children = _children(node)
    if cls == "BOUND_CONSTANT":  # DuckDB folds a literal's cast: days or microseconds
        value = node.get("value") or {}
        number, limits = value.get("value"), _CONSTANT_RANGE.get(_type(node)["id"])
        return bool(value.get("is_null")) or (
            limits is not None and isinstance(number, int) and not isinstance(number, bool)
            and limits[0] <= number <= limits[1])
    if kind == "OPERATOR_CAST" and children:
        inner = children[0]
        if inner.get("expression_class") == "BOUND_CONSTANT":
            value = inner.get("value") or {}
            return bool(value.get("is_null")) or (_type(inner)["id"] == "VARCHAR"
                                                  and _iso_in_range(value.get("value")))
        return _type(inner)["id"] in _TIMES and _in_range(inner)
    if cls == "BOUND_CASE":
        checks = node.get("case_checks") or []
        return all(_in_range(c["then_expr"]) or _kept_between(c["when_expr"], c["then_expr"])
                   for c in checks) and _in_range(node.get("else_expr") or {})
    if cls == "BOUND_FUNCTION" and _name(node) == "date_trunc":
        return all(_in_range(c) for c in children if _type(c)["id"] in _TIMES)
    if kind == "OPERATOR_COALESCE" or (cls == "BOUND_FUNCTION" and _name(node) in _SAME_TYPE):
        return bool(children) and all(_in_range(c) for c in children)
    return False


def _kept_between(when: dict, then: dict) -> bool:
    """Whether `when` is `then >= low AND then <= high` (or `then BETWEEN low AND high`) with
    `low` and `high` in range, so that CASE WHEN when THEN then holds only values in range."""
    if when.get("type") == "COMPARE_BETWEEN":
        args = _children(when)
        return len(args) == 3 and _same(args[0], then) and all(_in_range(a) for a in args[1:])
    parts = _children(when) if when.get("type") == "CONJUNCTION_AND" else []
    kinds = sorted(p.get("type", "") for p in parts)
    if kinds != ["COMPARE_GREATERTHANOREQUALTO", "COMPARE_LESSTHANOREQUALTO"]:
        return False
    return all(len(_children(p)) == 2 and _same(_children(p)[0], then) and _in_range(_children(p)[1])
               for p in parts)


def _same(a: dict, b: dict) -> bool:
    """Two bound column references to the same column, or two function calls of the same
    functions on the same columns and constants, such as a moved date (their place in the text
    aside): every function a plan passing the gate holds is deterministic, so both are equal."""
    def key(node: object) -> object:
        if isinstance(node, dict):
            return {k: key(v) for k, v in node.items() if not k.startswith("query_location")}
        return [key(v) for v in node] if isinstance(node, list) else node
    return a.get("expression_class") in ("BOUND_REF", "BOUND_COLUMN_REF", "BOUND_FUNCTION") \
        and key(a) == key(b)


def _iso_in_range(text: object) -> bool:
    """Whether a literal is an ISO date or timestamp of years 1 to 9999 without a time zone."""
    if not isinstance(text, str) or _ISO.fullmatch(text) is None:
        return False
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


_EPOCH = datetime(1970, 1, 1)
_CONSTANT_RANGE = {  # years 1 to 9999 as DuckDB stores them: days and microseconds since 1970
    "DATE": ((datetime(1, 1, 1) - _EPOCH).days, (datetime(9999, 12, 31) - _EPOCH).days),
    "TIMESTAMP": ((datetime(1, 1, 1) - _EPOCH) // timedelta(microseconds=1),
                  (datetime(9999, 12, 31, 23, 59, 59, 999999) - _EPOCH) // timedelta(microseconds=1))}
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?")


def _small_int(node: dict) -> bool:
    """Whether an integer argument always holds a 32-bit value (a widened small integer)."""
    kind = _type(node)["id"]
    if kind in _SMALL_INTS:
        return True
    if node.get("type") == "OPERATOR_CAST" and not node.get("function_data", {}).get("try_cast"):
        return _small_int(_children(node)[0])
    if node.get("expression_class") == "BOUND_CONSTANT":
        value = node["value"]
        return value.get("is_null") or (isinstance(value.get("value"), int)
                                        and abs(value["value"]) < 2**31)
    return False


def _children(node: dict) -> list[dict]:
    return node.get("children") or []


def _type(node: dict) -> dict:
    """The type DuckDB bound for an expression; a shape this does not know is UNKNOWN, which
    no allow-list accepts, so the gate fails closed."""
    if "return_type" in node:
        return node["return_type"]
    if node.get("expression_class") == "BOUND_CONJUNCTION":
        return {"id": "BOOLEAN"}  # AND/OR carry no return type: they are always boolean
    if isinstance(node.get("value"), dict) and "type" in node["value"]:
        return node["value"]["type"]  # a constant carries its type with its value
    return {"id": "UNKNOWN"}


def _name(node: dict) -> str:
    path = node.get("qname", {}).get("path") or [node.get("name", "?")]
    return path[-1]


def _width(kind: dict) -> int:
    return (kind.get("type_info") or {}).get("width", 0)


def _scale(kind: dict) -> int:
    return (kind.get("type_info") or {}).get("scale", 0)


def _type_name(kind: dict) -> str:
    if kind["id"] == "DECIMAL":
        return f"DECIMAL({_width(kind)},{_scale(kind)})"
    return kind["id"]


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else "binder error"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'

