"""Differential fuzzer: a query the engine accepts must be answered on every dataset.

An error that happens on some data and not on other data is a noiseless bit about the data,
free of charge. So random typed expression trees over every column type are put into queries,
and each query is run through the public API on several adversarial datasets that share one
schema and policy (tests/adversarial.py). A query refused on the first dataset must be refused
with the same message on every dataset; a query accepted there must return an answer on every
dataset, whatever the rows hold, with the same columns, row count (unless HAVING filters noisy
values) and noise mechanisms, as strict JSON. Any exception at all (engine error, DuckDB error,
traceback) fails the test and names the SQL, the dataset and the error.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from dpsql.engine import DpsqlError, PrivateDatabase
from dpsql.engine.rewrite import copies_to_bound
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.planning_limits import Deadline
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests import adversarial
from tests.peer_forms import TWO_LEVEL_FORMS, peer_queries, unnest_queries
from tests.support import create_ledger

EPSILON = 2.0  # noisy counts within a few units of the exact ones, so HAVING sees real magnitudes
TYPES = ("int", "float", "str", "bool", "date", "timestamp")
MAX_DEPTH = 3
ILL_TYPED_PERCENT = 4  # how often a child of the wrong type is drawn on purpose
PEER_PERCENT = 15  # how often a query is of the peer forms (tests/peer_forms.py), all valid

ROW_LEAVES = {"int": ["age", "level", "people.age"], "float": ["income", "people.income"],
              "str": ["state", "note", "people.note"], "bool": ["sick"],
              "date": ["visit", "people.visit"], "timestamp": ["seen"]}
AGGREGATES = {
    "int": ["COUNT(*)", "COUNT(age)", "COUNT(note)", "COUNT(sick)", "COUNT(DISTINCT person_id)",
            "SUM(age)", "SUM(level)", "COUNT(visit)", "SUM(YEAR(visit) - 2020)",
            "COUNT(*) FILTER (WHERE seen < TIMESTAMP '2024-03-10 02:30:00')"],
    "float": ["SUM(income)", "AVG(income)", "AVG(age)", "AVG(level)", "AVG(sick)",
              "SUM(CASE WHEN age > 30 THEN income / 2 ELSE -income END)", "VAR_POP(age)",
              "STDDEV(income - 500)", "MEDIAN(income)", "QUANTILE_CONT(age - level, 0.9)",
              "PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY income)",
              "AVG(EXTRACT(hour FROM seen))", "AVG(EXTRACT(dow FROM visit))"],
}
EXPRESSION_KEYS = {"FLOOR(age / 10)": "int", "CASE WHEN income < 500 THEN 'low' ELSE 'high' END": "str",
                   "EXTRACT(month FROM visit)": "int", "date_trunc('year', visit)": "date",
                   "date_trunc('month', seen)": "timestamp"}
GROUPINGS = [(), (), (), ("state",), ("sick",), ("level",), ("state", "sick"), ("age",),
             ("FLOOR(age / 10)",), ("CASE WHEN income < 500 THEN 'low' ELSE 'high' END", "sick"),
             ("EXTRACT(month FROM visit)",), ("date_trunc('year', visit)", "state"), ("visit",)]
INT_LITERALS = ["0", "1", "-1", "2", "37", "100", "101", "-5", "127", "128", "255", "32768",
                "2147483648", "1000000000000000", "9223372036854775807"]
FLOAT_LITERALS = ["0.5", "-0.0", "1.5", "37.0", "999.999", "1e15", "1e-300", "3.14159", "2.5e3", "1e16"]
TEXT_LITERALS = ["true", "false", "t", "x", "1e999", "0x7F", "0x7FFFFFFFFFFFFFFF", "", " ", " 1 ",
                 "NaN", "inf", "-1", "1", "37", "1.5", "CA", "NY", "ZZ", "row", "%", "_", "a%",
                 "\\", "%\\", "\u00e9t\u00e9", "\U0001f4a5", "it's", "b" * 300]
INT_CASTS = ["INTEGER", "BIGINT", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT"]
FLOAT_CASTS = ["DOUBLE", "FLOAT", "REAL", "DECIMAL(18, 3)", "DECIMAL(4, 1)"]
DATE_LITERALS = ["2020-01-01", "2024-02-29", "2024-12-31", "2019-12-31", "2025-01-01", "0001-01-01",
                 "9999-12-31", "infinity", "-infinity", "epoch", "2024-02-30", "99999-01-01", "today"]
TIMESTAMP_LITERALS = ["2024-03-10 02:30:00", "2024-02-29 23:59:59", "1970-01-01 00:00:00",
                      "9999-12-31 23:59:59.999999", "infinity", "2024-01-01 00:00:00+05",
                      "2024-01-01T10:00", "allballs", "2024-01-01 24:00:00"]
PARTS = ["year", "quarter", "month", "day", "dow", "isodow", "doy", "week", "hour", "minute",
         "second", "epoch", "millisecond", "century"]
UNITS = ["year", "quarter", "month", "week", "day", "hour", "minute", "millennium"]
CASTS = {"int": INT_CASTS, "float": FLOAT_CASTS, "str": ["VARCHAR", "TEXT"], "bool": ["BOOLEAN"],
         "date": ["DATE"], "timestamp": ["TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMP_NS"]}


@dataclass(frozen=True)
class Context:
    """What an expression may reference: row columns (WHERE) or aggregates and keys (after)."""

    leaves: dict[str, list[str]]


def row_context() -> Context:
    """Before aggregation: the policy's columns, some written with the table name."""
    return Context(ROW_LEAVES)


def post_context(group: tuple[str, ...]) -> Context:
    """After noise: aggregates, their text, and the group keys."""
    leaves: dict[str, list[str]] = {t: list(AGGREGATES.get(t, [])) for t in TYPES}
    leaves["str"] = [f"CAST({a} AS VARCHAR)" for a in ("COUNT(*)", "SUM(income)", "AVG(age)")]
    for key in group:
        for typ, names in ROW_LEAVES.items():
            if key in names:
                leaves[typ].append(key)
        if key in EXPRESSION_KEYS:
            leaves[EXPRESSION_KEYS[key]].append(key)
    return Context(leaves)


def _peer(typ: str):
    """A type DuckDB must unify with `typ`: either number type for a number (so int and float
    columns meet, whatever their physical types), either time type for a date or timestamp,
    else `typ` itself."""
    if typ in ("date", "timestamp"):
        return st.sampled_from(["date", "timestamp"])
    return st.sampled_from(["int", "float"]) if typ in ("int", "float") else st.just(typ)


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@st.composite
def literal(draw, typ: str) -> str:
    """A literal of `typ`, or a (typed) NULL; text literals read as booleans, numbers and odd text."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["NULL", f"CAST(NULL AS {CASTS[typ][0]})"]))
    if typ == "int":
        return draw(st.one_of(st.sampled_from(INT_LITERALS), st.integers(-1000, 1000).map(str)))
    if typ == "float":
        return draw(st.sampled_from(FLOAT_LITERALS))
    if typ == "str":
        return _text(draw(st.sampled_from(TEXT_LITERALS)))
    if typ == "date":
        return f"DATE {_text(draw(st.sampled_from(DATE_LITERALS)))}"
    if typ == "timestamp":
        return f"TIMESTAMP {_text(draw(st.sampled_from(TIMESTAMP_LITERALS)))}"
    return draw(st.sampled_from(["TRUE", "FALSE"]))


@st.composite
def expression(draw, typ: str, ctx: Context, depth: int = MAX_DEPTH) -> str:
    """SQL text of an expression meant to have type `typ` (sometimes, on purpose, another)."""
    if draw(st.integers(0, 99)) < ILL_TYPED_PERCENT:
        typ = draw(st.sampled_from(TYPES))
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        leaves = ctx.leaves[typ]
        if leaves and draw(st.booleans()):
            return draw(st.sampled_from(leaves))
        return draw(literal(typ))
    sub = lambda t: expression(t, ctx, depth - 1)  # noqa: E731
    builders = {"int": _integer, "float": _float, "str": _string, "bool": _boolean, "date": _date,
                "timestamp": _timestamp}
    generic = draw(st.integers(0, 9))
    if generic == 0:
        return draw(_case(typ, sub))
    if generic == 1:
        function = draw(st.sampled_from(["COALESCE", "LEAST", "GREATEST"]))
        args = [draw(sub(draw(_peer(typ)))) for _ in range(draw(st.integers(1, 3)))]
        return f"{function}({', '.join(args)})"
    if generic == 2:
        source = draw(st.sampled_from(TYPES))
        cast = draw(st.sampled_from(["CAST", "CAST", "TRY_CAST"]))
        return f"{cast}({draw(sub(source))} AS {draw(st.sampled_from(CASTS[typ]))})"
    return draw(builders[typ](sub))


@st.composite
def _case(draw, typ: str, sub) -> str:
    """CASE WHEN with one or two branches, one in ten of another type, ELSE sometimes."""
    branches = draw(st.integers(1, 2))
    parts = []
    for _ in range(branches):
        result = draw(_peer(typ)) if draw(st.integers(0, 9)) else draw(st.sampled_from(TYPES))  # mixed
        parts.append(f"WHEN {draw(sub('bool'))} THEN {draw(sub(result))}")
    if draw(st.booleans()):
        parts.append(f"ELSE {draw(sub(draw(_peer(typ))))}")
    return f"(CASE {' '.join(parts)} END)"


@st.composite
def _integer(draw, sub) -> str:
    """Integer-valued forms (addition drawn most often, as it is the commonest in practice)."""
    kind = draw(st.integers(0, 6))
    if kind == 6:
        return draw(_part(sub))
    if kind == 0:
        op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
        return f"({draw(sub('int'))} {op} {draw(sub('int'))})"
    if kind == 1:
        return f"(-{draw(sub('int'))})"
    if kind == 2:
        return f"LENGTH({draw(sub('str'))})"
    if kind == 3:
        return f"{draw(st.sampled_from(['ABS', 'FLOOR', 'CEIL', 'ROUND']))}({draw(sub('int'))})"
    return f"({draw(sub('int'))} + {draw(sub('int'))})"


@st.composite
def _part(draw, sub) -> str:
    """A part of a date or timestamp: EXTRACT, its function forms and date_part (some parts
    are refused)."""
    part = draw(st.sampled_from(PARTS))
    value = draw(sub(draw(st.sampled_from(["date", "timestamp"]))))
    form = draw(st.integers(0, 2))
    if form == 0:
        return f"EXTRACT({part} FROM {value})"
    if form == 1:
        return f"date_part('{part}', {value})"
    return f"{draw(st.sampled_from(['YEAR', 'MONTH', 'DAY', 'HOUR', 'DAYOFWEEK', 'WEEK']))}({value})"


@st.composite
def _date(draw, sub) -> str:
    """Date-valued forms: a cast of a date or timestamp (or, refused, of text), date_trunc cast
    back to a date, and date arithmetic (refused, but for a column ± INTERVAL compared with
    literals, docs/theory.md §26.3)."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return f"CAST({draw(sub(draw(st.sampled_from(['date', 'timestamp', 'timestamp', 'str']))))} AS DATE)"
    if kind == 1:
        return f"CAST(date_trunc('{draw(st.sampled_from(UNITS))}', {draw(sub('date'))}) AS DATE)"
    if kind == 2:
        return f"({draw(sub('date'))} + {draw(st.sampled_from(['1', 'INTERVAL 1 DAY', 'age']))})"
    return draw(sub("date"))


@st.composite
def _timestamp(draw, sub) -> str:
    """Timestamp-valued forms: date_trunc of either time type, casts, and a refused time zone."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        unit = draw(st.sampled_from(UNITS))
        return f"date_trunc('{unit}', {draw(sub(draw(st.sampled_from(['date', 'timestamp']))))})"
    if kind == 1:
        return f"CAST({draw(sub('date'))} AS TIMESTAMP)"
    if kind == 2:
        return f"({draw(sub('timestamp'))} AT TIME ZONE {draw(sub('str'))})"
    return draw(sub("timestamp"))


@st.composite
def _float(draw, sub) -> str:
    """Number-valued forms over int and float operands, division drawn most often."""
    kind = draw(st.integers(0, 4))
    number = lambda: sub(draw(st.sampled_from(["int", "float", "float"])))  # noqa: E731
    if kind == 0:
        op = draw(st.sampled_from(["+", "-", "*", "/", "%"]))
        return f"({draw(number())} {op} {draw(number())})"
    if kind == 1:
        return f"ROUND({draw(number())}, {draw(st.integers(-3, 3))})"
    if kind == 2:
        return f"{draw(st.sampled_from(['ABS', 'FLOOR', 'CEIL', 'SQRT']))}({draw(number())})"
    if kind == 3:
        return f"({draw(number())} / {draw(number())})"
    return f"(-{draw(sub('float'))})"


@st.composite
def _string(draw, sub) -> str:
    """Text-valued forms: case and trim functions, SUBSTRING with computed offsets, casts."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return f"{draw(st.sampled_from(['LOWER', 'UPPER', 'TRIM']))}({draw(sub('str'))})"
    if kind == 1:
        start = draw(sub("int"))
        if draw(st.booleans()):
            return f"SUBSTRING({draw(sub('str'))}, {start}, {draw(sub('int'))})"
        return f"SUBSTRING({draw(sub('str'))}, {start})"
    if kind == 2:
        return f"CAST({draw(sub(draw(st.sampled_from(TYPES))))} AS VARCHAR)"
    return draw(sub("str"))


@st.composite
def _boolean(draw, sub) -> str:
    """Conditions: comparisons, AND/OR/NOT, IN, BETWEEN, IS tests and LIKE, on operands of any type."""
    kind = draw(st.integers(0, 8))
    operand = draw(st.sampled_from(TYPES))
    peer = lambda: sub(draw(_peer(operand)))  # noqa: E731
    if kind == 0:
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "IS DISTINCT FROM",
                                   "IS NOT DISTINCT FROM"]))
        return f"({draw(sub(operand))} {op} {draw(peer())})"
    if kind == 1:
        op = draw(st.sampled_from(["AND", "OR"]))
        return f"({draw(sub('bool'))} {op} {draw(sub('bool'))})"
    if kind == 2:
        return f"(NOT {draw(sub('bool'))})"
    if kind == 3:
        items = [draw(peer()) for _ in range(draw(st.integers(1, 3)))]
        negated = draw(st.sampled_from(["", "NOT "]))
        return f"({draw(sub(operand))} {negated}IN ({', '.join(items)}))"
    if kind == 4:
        negated = draw(st.sampled_from(["", "NOT "]))
        return f"({draw(sub(operand))} {negated}BETWEEN {draw(peer())} AND {draw(peer())})"
    if kind in (5, 6):
        test = draw(st.sampled_from(["NULL", "NOT NULL", "TRUE", "FALSE", "NOT TRUE", "NOT FALSE"]))
        return f"({draw(sub(operand))} IS {test})"
    if kind == 7:
        op = draw(st.sampled_from(["LIKE", "NOT LIKE", "ILIKE"]))
        return f"({draw(sub('str'))} {op} {draw(sub('str'))})"
    return f"({draw(sub(operand))} = {draw(peer())})"


@st.composite
def aggregate(draw) -> str:
    """A supported aggregate on a bare column, or over a row expression (SUM, AVG, COUNT, VAR,
    STDDEV, MIN or MAX, of any type, so some are refused), or one with FILTER (WHERE <condition>)."""
    kind = draw(st.integers(0, 9))
    if kind <= 1:
        function = draw(st.sampled_from(["SUM", "AVG", "COUNT", "VAR_SAMP", "STDDEV_POP", "MIN", "MAX"]))
        return f"{function}({draw(expression(draw(st.sampled_from(TYPES)), row_context(), 2))})"
    base = draw(st.sampled_from(AGGREGATES["int"] + AGGREGATES["float"]))
    if kind == 2:
        return f"{base} FILTER (WHERE {draw(expression('bool', row_context(), 2))})"
    return base


@st.composite
def queries(draw) -> str:
    """A SELECT over `people`: aggregates and expressions over them, WHERE, GROUP BY on domain
    columns, HAVING, ORDER BY and LIMIT, each sometimes; or one of the peer forms (computed
    keys, DISTINCT aggregates, dialect literals) drawn only where they are valid."""
    if draw(st.integers(0, 99)) < PEER_PERCENT:
        return draw(peer_queries())
    group = draw(st.sampled_from(GROUPINGS))
    post = post_context(group)
    items = [draw(aggregate())]
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            items.append(draw(aggregate()))
        else:
            items.append(draw(expression(draw(st.sampled_from(TYPES)), post, 2)))
    aliases = [f"c{i}" if draw(st.integers(0, 3)) == 0 else None for i in range(len(items))]
    numeric = [alias for alias, item in zip(aliases, items, strict=True)
               if alias and item in AGGREGATES["int"] + AGGREGATES["float"]]
    items = [f"{item} AS {alias}" if alias else item for item, alias in zip(items, aliases, strict=True)]
    keys = [key for key in group if draw(st.booleans())]
    sql = f"SELECT {', '.join(keys + items)} FROM people"
    if draw(st.integers(0, 9)) < 7:
        sql += f" WHERE {draw(expression('bool', row_context()))}"
    if group:
        sql += f" GROUP BY {', '.join(group)}"
    if draw(st.integers(0, 3)) == 0:
        having = draw(expression("bool", post, 2))
        if numeric and draw(st.booleans()):
            having = f"{draw(st.sampled_from(numeric))} > {draw(literal('int'))}"
        sql += f" HAVING {having}"
    if draw(st.integers(0, 3)) == 0:
        key = draw(st.one_of(expression(draw(st.sampled_from(TYPES)), post, 2),
                             st.integers(1, len(keys) + len(items)).map(str),
                             st.sampled_from(numeric or ["1"])))
        sql += f" ORDER BY {key} {draw(st.sampled_from(['ASC', 'DESC']))}"
    if draw(st.integers(0, 6)) == 0:
        sql += f" LIMIT {draw(st.integers(0, 3))}"
        if draw(st.booleans()):
            sql += f" OFFSET {draw(st.integers(0, 2))}"
    return sql


class Dataset:
    """One adversarial dataset opened under the shared policy. Its ledger is replaced by a fresh
    one when the budget runs low or a query fails (an engine may stop a database whose query
    failed on the data), so every example starts from a usable database."""

    def __init__(self, name: str, path: Path, policy: Path) -> None:
        self.name, self.path, self.policy = name, path, policy
        self.ledgers = 0
        self.db = self._open()

    def __repr__(self) -> str:
        return f"Dataset({self.name!r})"

    def _open(self) -> PrivateDatabase:
        self.ledgers += 1
        ledger = self.path.with_name(f"{self.path.stem}-{self.ledgers}.ledger")
        # reuse off: a query asked again (hypothesis replays and shrinks) runs on the data again
        return PrivateDatabase.connect(self.path, self.policy, ledger, create=True, reuse=False)

    def reopen(self) -> None:
        self.db.close()
        self.db = self._open()

    def query(self, sql: str):
        if self.db.budget().remaining < 2 * EPSILON:
            self.reopen()
        try:
            return self.db.query(sql, epsilon=EPSILON)
        except Exception:
            self.reopen()
            raise


@pytest.fixture(scope="session")
def datasets(tmp_path_factory) -> list[Dataset]:
    root: Path = tmp_path_factory.mktemp("differential")
    policy = adversarial.write_policy(root / "policy.yaml")
    opened = [Dataset(name, adversarial.write_dataset(root / f"{name}.duckdb", rows), policy)
              for name, rows in adversarial.datasets().items()]
    wide = adversarial.write_dataset(root / "wide_types.duckdb", adversarial.wide_rows(),
                                     adversarial.WIDE_SCHEMA)
    opened.append(Dataset("wide_types", wide, policy))
    yield opened
    for dataset in opened:
        dataset.db.close()


def failures_of(sql: str, datasets: list[Dataset], tally: Counter) -> list[str]:
    """Run `sql` differentially; return one line per failure (empty when the engine behaved).

    Every dataset must refuse it alike or answer it, the one storing each column in another
    physical type of its declared family (HUGEINT, UBIGINT, DECIMAL) included: a verdict is a
    function of the SQL text and the policy only."""
    first, problems = datasets[0], []
    try:
        first.db.explain(sql, epsilon=EPSILON)
    except DpsqlError as exc:
        tally["refused"] += 1
        targets = []
        for other in datasets[1:]:
            try:
                other.db.explain(sql, epsilon=EPSILON)
                problems.append(f"refused on {first.name} ({exc}) but accepted on {other.name}")
            except DpsqlError as again:
                if str(again) != str(exc):
                    problems.append(f"refusal differs: {first.name}: {exc}; {other.name}: {again}")
            except Exception as again:  # noqa: BLE001 - any crash is a finding
                problems.append(f"explain on {other.name} raised {type(again).__name__}: {again}")
    except Exception as exc:  # noqa: BLE001
        return [f"explain on {first.name} raised {type(exc).__name__}: {exc}"]
    else:
        tally["accepted"] += 1
        targets = list(datasets)
    shapes = {}
    for dataset in targets:
        try:
            result = dataset.query(sql)
            json.dumps(result.to_dict(), allow_nan=False)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"query on {dataset.name} raised {type(exc).__name__}: {exc}")
            continue
        # Only noisy values may differ; rows can differ only through HAVING on noisy values and
        # SELECT DISTINCT, which merges rows whose noisy values are equal.
        rows = None if " HAVING " in sql or sql.startswith("SELECT DISTINCT ") else len(result.df)
        shapes[dataset.name] = (list(result.df.columns), rows, result.aggregates)
    if len({repr(shape) for shape in shapes.values()}) > 1:
        problems.append(f"answer's columns, row count or mechanisms differ: {shapes}")
    return problems


def _report(sql: str, problems: list[str]) -> str:
    return "accepted query failed differentially:\n  SQL: " + sql + "\n  " + "\n  ".join(problems)


KNOWN_HOLES = [
    # Fail on d4c1ca0. IS TRUE/FALSE on text makes DuckDB cast each row's string to BOOLEAN at
    # run time: the query fails exactly when some row holds text that is not a boolean (here:
    # when some row has age 37), and is answered otherwise. One exact bit per query, free.
    "SELECT COUNT(*) FROM people WHERE (CASE WHEN age = 37 THEN 'x' ELSE 'true' END) IS TRUE",
    "SELECT COUNT(*) FROM people WHERE note IS TRUE",
    "SELECT COUNT(*) FROM people WHERE CAST(age AS VARCHAR) IS NOT FALSE",
    # Fail on d4c1ca0. The same cast after noise: it passes the dry run on zeros, then fails on the
    # noisy value after the charge, and DuckDB's message quotes that value.
    "SELECT COUNT(*) FROM people HAVING (CASE WHEN COUNT(*) > 5 THEN 'x' ELSE 'true' END) IS TRUE",
    "SELECT COUNT(*) FROM people HAVING CAST(COUNT(*) AS VARCHAR) IS TRUE",
    "SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY CAST(COUNT(*) AS VARCHAR) IS FALSE",
    "SELECT COUNT(*), CAST(SUM(income) AS VARCHAR) IS FALSE FROM people",
    # Fails on d4c1ca0: HAVING accepts a text value as its condition (WHERE refuses one), and
    # DuckDB casts the text of the noisy count to BOOLEAN after the charge.
    "SELECT COUNT(*) FROM people HAVING CAST(COUNT(*) AS VARCHAR)",
    # Fails on d4c1ca0 on wide_types only: an int column stored as HUGEINT meets a float column
    # stored as DECIMAL(18, 2); DuckDB casts the HUGEINT to DECIMAL(38, 2), which fails on a row
    # whose value is above 10^36.
    "SELECT COUNT(*) FROM people WHERE income = age",
    "SELECT COUNT(*) FROM people WHERE (CASE WHEN sick THEN income ELSE age END) > 0",
    # Fails on d4c1ca0 on every dataset: the answer's JSON form holds pandas' NA, which the JSON
    # encoder rejects (the CLI's --format json loses this answer after its charge).
    "SELECT COUNT(*), CAST(NULL AS BOOLEAN) FROM people",
    # Answered on d4c1ca0 (the engine's hardening covers them); kept so that they stay answered.
    "SELECT COUNT(*) FROM people WHERE (CASE WHEN age = 37 THEN 9223372036854775807 + age ELSE 0 END) > 0",
    "SELECT COUNT(*) FROM people WHERE (CASE WHEN sick THEN CAST(age AS TINYINT) ELSE 0 END) > 0",
    "SELECT COUNT(*) FROM people WHERE SUBSTRING(note, age * 100000000000) = 'x'",
    "SELECT COUNT(*) FROM people WHERE SUBSTRING(note, 1, age - 1000) = ''",
    "SELECT COUNT(*) FROM people WHERE CAST(note AS INTEGER) = 1",
    # Answered on d4c1ca0 although they bypass the literal caps (a cap is not a run-time error, so
    # this test only requires that they are refused everywhere or answered everywhere).
    "SELECT COUNT(*) FROM people WHERE age < CAST('0x7FFFFFFFFFFFFFFF' AS BIGINT)",
    "SELECT SUM(income) FROM people WHERE income < CAST(CASE WHEN sick THEN 'inf' END AS DOUBLE)",
]


def _differential(datasets: list[Dataset], examples: int, derandomize: bool, capsys) -> None:
    tally: Counter = Counter()

    @settings(max_examples=examples, derandomize=derandomize, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sql=queries())
    def check(sql: str) -> None:
        problems = failures_of(sql, datasets, tally)
        if problems:
            raise AssertionError(_report(sql, problems))

    for hole in KNOWN_HOLES:
        check = example(sql=hole)(check)
    start = time.perf_counter()
    check()
    total = tally["accepted"] + tally["refused"]
    with capsys.disabled():
        print(f"\ndifferential fuzz: {total} queries x {len(datasets)} datasets in "
              f"{time.perf_counter() - start:.0f} s: {tally['accepted']} accepted, {tally['refused']} refused")
    assert tally["accepted"] >= 0.3 * total, f"only {tally['accepted']} of {total} accepted: fuzzer too weak"


def test_accepted_queries_succeed_on_every_dataset(datasets, capsys):
    """80 random queries (fixed seed, reproducible), each on every dataset, plus the known
    holes, most of the time inside the engine (planning and post-processing); the slow variant
    below runs 8000 from a fresh seed."""
    _differential(datasets, examples=80, derandomize=True, capsys=capsys)


@pytest.mark.slow
def test_accepted_queries_succeed_on_every_dataset_slow(datasets, capsys):
    """8000 queries, from a fresh seed each run."""
    _differential(datasets, examples=8000, derandomize=False, capsys=capsys)


# Neighbouring hostile datasets: one unit's rows replaced by more hostile rows than its bound,
# removed, or a heavy unit's hundred rows swapped for odd ones; or one row with a NULL unit (an
# individual of its own) added. Each pair shares a ledger, so both bound units with one key.
def _neighbours() -> dict[str, tuple[list[tuple], list[tuple]]]:
    sets = adversarial.datasets()
    base, extremes, mixed = sets["ordinary"], sets["extremes"], sets["mixed"]
    without = [row for row in base if row[0] != 5]
    light = [row for row in mixed if row[0] != 1000]
    return {
        "replaced": (base, without + [(5, *row[1:]) for row in extremes[:7]]),
        "removed": (base, without),
        "heavy": (mixed, light + [(1000, *row[1:]) for row in extremes[:100]]),
        "null_unit": (mixed, mixed + [(None, *extremes[3][1:])]),
        # Lists longer than the 3 items read (docs/theory.md §31), on seven rows of unit 5.
        "lists": (base, without + [(5, *row[1:5], "row;x;row;x;row;x", *row[6:])
                                   for row in extremes[:7]]),
    }


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory) -> list[tuple[str, PrivateDatabase, PrivateDatabase]]:
    root: Path = tmp_path_factory.mktemp("neighbours")
    policy = adversarial.write_policy(root / "policy.yaml")
    pairs = []
    for name, (ours, theirs) in _neighbours().items():
        ledger = create_ledger(root / f"{name}.ledger", policy)
        dbs = [PrivateDatabase.connect(adversarial.write_dataset(root / f"{name}{i}.duckdb", rows),
                                       policy, ledger) for i, rows in enumerate((ours, theirs))]
        pairs.append((name, *dbs))
    yield pairs
    for _, *dbs in pairs:
        for db in dbs:
            db.close()


def _exact(db: PrivateDatabase, sql: str):
    """The plan and exact measurements the engine would add noise to (owner-side, for the check)."""
    plan, rewritten, *_ = db._preparer._plan(sql, Deadline(db.policy.limits))
    for table, columns in copies_to_bound(plan):
        db._backend.bound(table, db.ledger.hash_key, columns)
    return plan, db._backend.run(rewritten, len(plan.group_by)).values


def _peer_forms_within(neighbours, examples: int, derandomize: bool, capsys) -> None:
    """Each drawn peer-form query and the worst cases below, on every pair of neighbours: each
    exact measurement, summed over its cells and groups, moves by at most the sensitivity its
    noise is calibrated to, and some COUNT(DISTINCT col) moves by its whole sensitivity."""
    reached: dict[str, float] = {}  # per aggregate, the largest change seen over its sensitivity

    @settings(max_examples=examples, derandomize=derandomize, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sql=peer_queries())
    @example(sql="SELECT COUNT(DISTINCT age), COUNT(DISTINCT visit), SUM(DISTINCT income - 500), "
                 "AVG(DISTINCT age - 50) FROM people WHERE visit >= '2020-01-01' OR sick = 1")
    @example(sql="SELECT FLOOR(age / 10) * 10, COUNT(DISTINCT state), SUM(DISTINCT level), COUNT(*) "
                 "FROM people WHERE level = TRUE OR visit < DATE '2023-01-01' + INTERVAL 2 MONTH "
                 "GROUP BY 1")
    @example(sql="SELECT date_trunc('month', visit + INTERVAL 3 DAY), EXTRACT(dow FROM visit - INTERVAL "
                 "1 DAY), COUNT(*), SUM(income) FROM people GROUP BY 1, 2")  # moved dates, §32.2
    def check(sql: str) -> None:
        for name, ours, theirs in neighbours:
            (plan, before), (_, after) = _exact(ours, sql), _exact(theirs, sql)
            for m in plan.measurements:
                moved = sum(abs(float(a) - float(b)) for cell in m.cells
                            for a, b in zip(before[cell], after[cell], strict=True))
                bound = sensitivity(m, plan)
                assert moved <= bound * (1 + 1e-9), (sql, name, m.label, moved, bound)
                key = f"{m.kind.name}{' grouped' if plan.group_by else ''}"
                reached[key] = max(reached.get(key, 0.0), moved / bound)

    check()
    with capsys.disabled():
        print("\nlargest change over sensitivity:", {k: round(v, 3) for k, v in sorted(reached.items())})
    assert max(v for k, v in reached.items() if k.startswith("COUNT DISTINCT")) == 1.0


def test_peer_forms_move_within_their_sensitivity_on_hostile_neighbours(neighbours, capsys):
    """20 peer-form queries (computed keys, DISTINCT aggregates, dialect literals; fixed seed)
    and three worst cases on five pairs of neighbouring hostile datasets; the slow variant
    runs 400 from a fresh seed."""
    _peer_forms_within(neighbours, examples=20, derandomize=True, capsys=capsys)


@pytest.mark.slow
def test_peer_forms_move_within_their_sensitivity_on_hostile_neighbours_slow(neighbours, capsys):
    _peer_forms_within(neighbours, examples=400, derandomize=False, capsys=capsys)


@pytest.mark.parametrize("sql", TWO_LEVEL_FORMS)
def test_two_level_forms_move_within_their_sensitivity_on_hostile_neighbours(neighbours, sql):
    """A histogram of a per-unit value and aggregates over released rows (§33) on the four pairs
    of neighbouring hostile datasets: each exact measurement, summed over its cells and groups,
    moves by at most its sensitivity."""
    for name, ours, theirs in neighbours:
        (plan, before), (_, after) = _exact(ours, sql), _exact(theirs, sql)
        for m in plan.measurements:
            moved = sum(abs(float(a) - float(b)) for cell in m.cells
                        for a, b in zip(before[cell], after[cell], strict=True))
            assert moved <= sensitivity(m, plan) * (1 + 1e-9), (sql, name, m.label, moved)


# Fields of an Explanation that describe the ledger (each dataset has its own), not the query.
_LEDGER_FIELDS = {"budget", "level_before", "level_after", "admissible"}


def _explain_alike(datasets: list[Dataset], sql: str) -> None:
    """`explain` reads no data values: its whole output (plan, rewritten SQL, sensitivities,
    noise) must be identical on every dataset, and so must a refusal."""
    outputs = {}
    for dataset in datasets:
        try:
            explanation = dataset.db.explain(sql, epsilon=EPSILON)
            outputs[dataset.name] = {f.name: getattr(explanation, f.name) for f in fields(explanation)
                                     if f.name not in _LEDGER_FIELDS}
        except DpsqlError as exc:
            outputs[dataset.name] = {"refused": str(exc)}
    first = next(iter(outputs.values()))
    differing = {name: {k: v for k, v in out.items() if first.get(k) != v}
                 for name, out in outputs.items() if out != first}
    assert not differing, f"explain depends on the data for {sql}: {differing}"


@settings(max_examples=30, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sql=queries())
@example(sql="SELECT COUNT(*) FROM people")
def test_explain_is_the_same_on_every_dataset(datasets, sql):
    """30 random queries (fixed seed) explained on every dataset; the slow variant runs 600
    from a fresh seed."""
    _explain_alike(datasets, sql)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sql=queries())
def test_explain_is_the_same_on_every_dataset_slow(datasets, sql):
    _explain_alike(datasets, sql)


JOINS = [
    "SELECT band, COUNT(*), SUM(km), AVG(income) FROM people JOIN trips ON people.person_id = "
    "trips.person_id JOIN states ON people.state = states.state JOIN zones ON states.zone = "
    "zones.zone GROUP BY band",
    "SELECT COUNT(*), SUM(km * age), MAX(km), COUNT(DISTINCT person_id) FROM people, trips, states, "
    "zones WHERE people.person_id = trips.person_id AND people.state = states.state AND states.zone "
    "= zones.zone AND km > age AND band = 'south'",
    "SELECT mode, COUNT(*), MEDIAN(km) FROM people LEFT JOIN trips ON people.person_id = "
    "trips.person_id LEFT JOIN states ON people.state = states.state LEFT JOIN zones ON "
    "states.zone = zones.zone WHERE zones.band IS NULL OR income > 10 GROUP BY mode",
    "WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT states.zone, SUM(income) FROM "
    "adults JOIN states ON adults.state = states.state JOIN zones ON zones.zone = states.zone "
    "JOIN trips ON trips.person_id = adults.person_id GROUP BY states.zone",
]


@pytest.fixture(scope="module")
def join_datasets(tmp_path_factory) -> list[Dataset]:
    root: Path = tmp_path_factory.mktemp("differential-joins")
    policy = adversarial.write_join_policy(root / "policy.yaml")
    opened = [Dataset(name, adversarial.add_join_tables(
        adversarial.write_dataset(root / f"{name}.duckdb", rows)), policy)
        for name, rows in adversarial.datasets().items()]
    wide = adversarial.write_dataset(root / "wide_types.duckdb", adversarial.wide_rows(),
                                     adversarial.WIDE_SCHEMA)
    opened.append(Dataset("wide_types", adversarial.add_join_tables(wide), policy))
    yield opened
    for dataset in opened:
        dataset.db.close()


@pytest.mark.parametrize("sql", JOINS)
def test_joins_of_four_tables_answer_alike_on_every_dataset(join_datasets, sql):
    """A tree of joins (two private tables on the unit, a public table reached through another)
    on every adversarial dataset, its hostile units and values included: each answers with
    intervals and the same shape, or all refuse alike."""
    problems = failures_of(sql, join_datasets, Counter())
    assert not problems, _report(sql, problems)
    assert join_datasets[0].db.explain(sql, epsilon=EPSILON).max_rows_per_unit == 2 * 3


@settings(max_examples=15, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sql=unnest_queries())
def test_unnest_forms_answer_alike_on_every_dataset(datasets, sql):
    """Every drawn UNNEST form (docs/theory.md §31) is accepted, and answered alike on every
    adversarial dataset, odd notes, NULL lists and the wide physical types included."""
    tally: Counter = Counter()
    problems = failures_of(sql, datasets, tally)
    assert not problems, _report(sql, problems)
    assert tally["refused"] == 0, sql


def test_unnest_forms_move_within_their_sensitivity_on_hostile_neighbours(neighbours):
    """12 UNNEST queries (fixed seed) on the pairs of neighbouring hostile datasets, one of them
    giving unit 5 seven rows of six-item lists: each exact measurement moves by at most the
    sensitivity with m · max_items rows per unit (2 · 3)."""

    @settings(max_examples=12, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sql=unnest_queries())
    @example(sql="SELECT item, COUNT(*), SUM(income), COUNT(DISTINCT person_id) FROM people, "
                 "UNNEST(string_split(note, ';')) AS g(item) GROUP BY 1")
    def check(sql: str) -> None:
        for name, ours, theirs in neighbours:
            (plan, before), (_, after) = _exact(ours, sql), _exact(theirs, sql)
            assert plan.rows_per_unit == 6
            for m in plan.measurements:
                moved = sum(abs(float(a) - float(b)) for cell in m.cells
                            for a, b in zip(before[cell], after[cell], strict=True))
                assert moved <= sensitivity(m, plan) * (1 + 1e-9), (sql, name, m.label, moved)

    check()
