"""Random SQL syntax trees, valid and invalid, built with sqlglot: the engine either refuses
with a clean one-line DpsqlError and charges nothing, or answers with noise and records
exactly one charge. No other exception escapes, and at a large noise scale no COUNT or SUM
answer equals the exact aggregate."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.errors import DpsqlError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from tests.support import create_ledger, with_every_join

NUMERIC = ["age", "income"]
COLUMNS = ["age", "income", "state", "sick", "note", "person_id", "rowid", "nosuch", "region",
           "population"]
FUNCTIONS = ["ABS", "ROUND", "FLOOR", "CEIL", "LOWER", "UPPER", "TRIM", "LENGTH", "SUBSTRING",
             "COALESCE", "LEAST", "GREATEST", "RANDOM", "HASH", "ERROR", "READ_CSV", "NOW",
             "REGEXP_MATCHES", "CURRENT_SETTING", "MD5", "DATE_PART", "STRFTIME", "STRPTIME",
             "MAKE_DATE", "TO_TIMESTAMP", "DATE_DIFF", "TIMEZONE", "LAST_DAY"]
CAST_TYPES = ["INTEGER", "BIGINT", "DOUBLE", "VARCHAR", "BOOLEAN", "TINYINT", "DECIMAL(38, 2)",
              "BLOB", "DATE", "TIMESTAMP", "TIMESTAMPTZ"]
DATE_TEXT = ["2024-02-29", "0001-01-01", "9999-12-31", "infinity", "-infinity", "epoch",
             "2024-02-30", "99999-01-01", "2024-01-01 10:00:00", "2024-01-01 00:00:00+05"]
TEXT = st.text(alphabet=st.sampled_from("aZ%_'\"\\;-*/ \u00e9\u200b0."), max_size=8)

literals = st.one_of(
    st.integers(-(2**70), 2**70).map(lambda v: exp.Literal.number(v)),
    st.sampled_from(["1.5", "1e15", "1e16", "-0.0", "1e308", "0.000001"]).map(exp.Literal.number),
    st.sampled_from(["0", "1", "100", "-5"]).map(exp.Literal.number),
    TEXT.map(exp.Literal.string),
    st.sampled_from(["nan", "inf", "-Infinity", "1e400", "CA", "NY"]).map(exp.Literal.string),
    st.booleans().map(lambda b: exp.Boolean(this=b)),
    st.just(exp.Null()),
    st.builds(lambda text, to: exp.cast(exp.Literal.string(text), to), st.sampled_from(DATE_TEXT),
              st.sampled_from(["DATE", "TIMESTAMP"])),
)
columns = st.sampled_from(COLUMNS).map(lambda name: exp.column(name))


def _combine(children):
    binary = st.sampled_from([exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.EQ,
                              exp.NEQ, exp.GT, exp.LT, exp.GTE, exp.And, exp.Or, exp.Like,
                              exp.NullSafeEQ])
    return st.one_of(
        st.builds(lambda op, a, b: op(this=a, expression=b), binary, children, children),
        st.builds(lambda a: exp.Not(this=a), children),
        st.builds(lambda a: exp.Neg(this=a), children),
        st.builds(lambda a: exp.Paren(this=a), children),
        st.builds(lambda a: exp.Is(this=a, expression=exp.Null()), children),
        st.builds(lambda a, b, c: exp.Between(this=a, low=b, high=c), children, children, children),
        st.builds(lambda a, items: exp.In(this=a, expressions=items), children,
                  st.lists(children, min_size=1, max_size=4)),
        st.builds(lambda name, args: exp.Anonymous(this=name, expressions=args), st.sampled_from(FUNCTIONS),
                  st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda a, to: exp.cast(a, to), children, st.sampled_from(CAST_TYPES)),
        st.builds(lambda c, a, b: exp.Case().when(c, a).else_(b), children, children, children),
        st.builds(lambda part, a: exp.Extract(this=exp.var(part), expression=a),
                  st.sampled_from(["YEAR", "MONTH", "DOW", "HOUR", "EPOCH", "CENTURY"]), children),
        st.builds(lambda unit, a: exp.TimestampTrunc(this=a, unit=exp.var(unit)),
                  st.sampled_from(["MONTH", "WEEK", "MILLENNIUM", "X"]), children),
    )


scalars = st.recursive(st.one_of(literals, columns), _combine, max_leaves=12)
aggregates = st.one_of(
    st.just(exp.Count(this=exp.Star())),
    st.builds(lambda c: exp.Count(this=c), columns),
    st.builds(lambda c: exp.Count(this=exp.Distinct(expressions=[c])), columns),
    st.builds(lambda c: exp.Sum(this=c), st.one_of(st.sampled_from(NUMERIC).map(exp.column),
                                                   columns, scalars)),
    st.builds(lambda c: exp.Avg(this=c), st.one_of(st.sampled_from(NUMERIC).map(exp.column),
                                                   columns)),
    st.builds(lambda c: exp.Max(this=c), columns),
    st.builds(lambda c: exp.Min(this=c), st.one_of(columns, scalars)),
    st.builds(lambda c: exp.Median(this=c), st.one_of(columns, scalars)),
    st.builds(lambda c, q: exp.PercentileCont(this=c, expression=q), columns,
              st.one_of(literals, st.floats(-0.5, 1.5).map(lambda v: exp.Literal.number(repr(v))))),
)
outputs = st.recursive(st.one_of(aggregates, aggregates, literals, columns),
                       _combine, max_leaves=6)


def _typed_num(children):
    op = st.sampled_from([exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv])
    return st.one_of(
        st.builds(lambda o, a, b: o(this=a, expression=b), op, children, children),
        st.builds(lambda a: exp.Neg(this=a), children),
        st.builds(lambda name, a: exp.func(name, a), st.sampled_from(["ABS", "FLOOR", "CEIL"]),
                  children),
        st.builds(lambda a, d: exp.Round(this=a, decimals=exp.Literal.number(d)), children,
                  st.integers(-3, 3)),
        st.builds(lambda a: exp.cast(a, "BIGINT"), children),
    )


NUMBERS = st.recursive(
    st.one_of(st.sampled_from(NUMERIC).map(exp.column),
              st.integers(-(10**15), 10**15).map(exp.Literal.number),
              st.floats(-1e6, 1e6).map(lambda v: exp.Literal.number(repr(v)))),
    _typed_num, max_leaves=8)
STRINGS = st.one_of(
    st.sampled_from(["state", "note"]).map(exp.column), TEXT.map(exp.Literal.string),
    st.builds(lambda n, a: exp.func(n, exp.column(a)), st.sampled_from(["LOWER", "UPPER", "TRIM"]),
              st.sampled_from(["state", "note"])),
    st.builds(lambda a, b: exp.Substring(this=exp.column("note"), start=a, length=b), NUMBERS,
              NUMBERS),
    st.builds(lambda a: exp.cast(a, "VARCHAR"), NUMBERS))
CONDITIONS = st.recursive(
    st.one_of(
        st.just(exp.column("sick")),
        st.builds(lambda o, a, b: o(this=a, expression=b),
                  st.sampled_from([exp.EQ, exp.NEQ, exp.GT, exp.LT, exp.GTE]), NUMBERS, NUMBERS),
        st.builds(lambda o, a, b: o(this=a, expression=b), st.sampled_from([exp.EQ, exp.Like]),
                  STRINGS, STRINGS),
        st.builds(lambda a, items: exp.In(this=a, expressions=items), NUMBERS,
                  st.lists(NUMBERS, min_size=1, max_size=3)),
        st.builds(lambda a: exp.Is(this=a, expression=exp.Null()), NUMBERS)),
    lambda c: st.one_of(st.builds(lambda a, b: exp.And(this=a, expression=b), c, c),
                        st.builds(lambda a, b: exp.Or(this=a, expression=b), c, c),
                        st.builds(lambda a: exp.Not(this=a), c)),
    max_leaves=6)
SUPPORTED = st.one_of(
    st.just(exp.Count(this=exp.Star())),
    st.just(exp.Count(this=exp.Distinct(expressions=[exp.column("person_id")]))),
    st.builds(lambda c: exp.Count(this=exp.column(c)), st.sampled_from(["age", "note", "sick"])),
    st.builds(lambda c: exp.Sum(this=exp.column(c)), st.sampled_from(NUMERIC)),
    st.builds(lambda c: exp.Avg(this=exp.column(c)), st.sampled_from(NUMERIC)),
    st.builds(lambda c: exp.Median(this=exp.column(c)), st.sampled_from(NUMERIC)),
    st.builds(lambda c, q: exp.PercentileCont(this=exp.column(c), expression=exp.Literal.number(repr(q))),
              st.sampled_from(NUMERIC), st.floats(0, 1)),
    st.builds(lambda c: exp.Min(this=exp.column(c)), st.sampled_from(NUMERIC)),
    st.builds(lambda c: exp.Max(this=exp.column(c)), st.sampled_from(NUMERIC)))


# CTE and FROM-subquery bodies over `people`: ones that flatten and ones that must be refused.
BODIES = [
    "SELECT * FROM people", "SELECT * FROM people WHERE age > 30",
    "SELECT person_id, age, income * 2 AS income, state, sick, note FROM people",
    "SELECT person_id AS pid, age AS state, note AS sick FROM people",
    "SELECT state, COUNT(*) AS age FROM people GROUP BY state", "SELECT DISTINCT * FROM people",
    "SELECT * FROM people LIMIT 3", "SELECT * FROM people ORDER BY age", "SELECT * FROM nosuch",
    "SELECT * FROM people UNION ALL SELECT * FROM people", "SELECT * FROM t",
    "SELECT * FROM people WHERE age IN (SELECT age FROM people)", "SELECT 1 AS age",
    "SELECT *, ROW_NUMBER() OVER () AS age FROM people", "SELECT * FROM (SELECT * FROM people) AS i",
]


# Joins to the public table `regions` (key state), the parent table `households` (key
# household_id) and the private `visits` (people's unit person_id): the accepted forms and
# hostile ones.
JOINS = ["regions ON people.state = regions.state", "regions AS r ON state = r.state",
         "regions ON people.note = regions.region", "regions ON people.age = regions.population",
         "people AS q ON people.age = q.age", "regions ON TRUE", "nosuch ON people.state = nosuch.state",
         "regions ON people.state = regions.state AND people.age > 3",
         "households ON people.household_id = households.household_id",
         "households AS h ON people.age = h.rooms", "households AS h ON TRUE",
         "households ON people.household_id = households.rooms",
         "visits ON people.person_id = visits.person_id", "visits AS v ON person_id = v.person_id",
         "visits AS v ON people.age = v.days", "people AS q ON people.person_id = q.person_id"]
LOOKUPS = {"regions": ("regions AS r ON people.state = r.state", "r.region"),
           "households": ("households AS h ON people.household_id = h.household_id", "h.area"),
           "visits": ("visits AS v ON people.person_id = v.person_id", "v.clinic")}
"""The accepted join of each kind, with a group key from the joined table."""
JOIN_TYPES = ["inner", "left", "right", "full", "cross"]


def _wrapped(draw, query: exp.Select) -> exp.Select:
    """`query` reading `people`, sometimes through a CTE or a FROM-subquery named t instead."""
    how = draw(st.sampled_from(["table", "table", "cte", "subquery"]))
    if how == "table":
        return query
    body = draw(st.sampled_from(BODIES))
    if how == "cte":
        return query.from_("t").with_("t", as_=body)
    return query.from_(f"({body}) AS t")


@st.composite
def valid_queries(draw) -> str:
    """Well-typed queries the engine should mostly answer: on the table, through a CTE, or
    joined to the public table, the parent table or the visits on the unit (a key of the joined
    table a group key, the private state qualified)."""
    lookup = draw(st.sampled_from([None, None, None, None, None, "regions", "households", "visits"]))
    joined = lookup is not None
    names = ["people.state", "sick", LOOKUPS[lookup][1]] if lookup else ["state", "sick"]
    group = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    items = draw(st.lists(SUPPORTED, min_size=1, max_size=3))
    keys = [exp.column(*reversed(g.split("."))) for g in group]
    query = exp.select(*keys, *items).from_("people")
    if lookup:
        query = query.join(LOOKUPS[lookup][0], join_type=draw(st.sampled_from(["inner", "left"])))
    if draw(st.booleans()):
        condition = draw(CONDITIONS)
        if joined:
            for column in condition.find_all(exp.Column):
                if column.name == "state":
                    column.set("table", exp.to_identifier("people"))
        query = query.where(condition)
    if group:
        query = query.group_by(*[k.copy() for k in keys])
    if not joined and draw(st.integers(0, 3)) == 0:
        query = query.from_("t").with_("t", as_=exp.select("*").from_("people").where(draw(CONDITIONS)))
    return query.sql(dialect="duckdb")


@st.composite
def queries(draw) -> str:
    items = draw(st.lists(st.one_of(aggregates, aggregates, outputs), min_size=1, max_size=3))
    group = draw(st.lists(st.sampled_from(["state", "sick", "state", "age", "person_id"]),
                          max_size=2, unique=True))
    source = draw(st.sampled_from(["people", "people", "people", "people AS p", "nosuch",
                                   "read_csv('/etc/passwd')", "information_schema.tables", "regions"]))
    query = exp.select(*[exp.column(g) for g in group if draw(st.booleans())], *items).from_(source)
    if source in ("people", "people AS p") and draw(st.integers(0, 3)) == 0:
        query = query.join(draw(st.sampled_from(JOINS)), join_type=draw(st.sampled_from(JOIN_TYPES)))
    if source == "people":
        query = _wrapped(draw, query)
    if draw(st.booleans()):
        query = query.where(draw(scalars))
    if group:
        query = query.group_by(*group)
    if draw(st.integers(0, 3)) == 0:
        query = query.having(draw(outputs))
    if draw(st.integers(0, 3)) == 0:
        query = query.order_by(draw(st.one_of(outputs, st.just(exp.Literal.number(1)))))
    if draw(st.integers(0, 3)) == 0:
        query = query.limit(draw(st.integers(-2, 5)))
    sql = query.sql(dialect="duckdb")
    return draw(st.sampled_from([sql, sql, sql, sql + "; SELECT 1", sql.replace("SELECT", "SELEC")]))


@pytest.fixture(scope="module")
def engine(people_db, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    data, policy = with_every_join(root, people_db, budget=1e6)
    # reuse off: an example asked again (hypothesis replays and shrinks) is charged again too
    db = PrivateDatabase.connect(data, policy, create_ledger(root / "ledger.sqlite", policy),
                                 reuse=False)
    yield db, root / "ledger.sqlite"
    db.close()


def _charges(ledger) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT sql, epsilon_dp FROM charges ORDER BY id").fetchall()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much])
@given(sql=st.one_of(queries(), valid_queries()), epsilon=st.sampled_from([1e-7, 1e-7, 0.5]))
def test_random_sql_is_refused_cleanly_or_answered_and_charged(engine, sql, epsilon):
    db, ledger = engine
    before = _charges(ledger)
    try:
        result = db.query(sql, epsilon=epsilon)
    except DpsqlError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message
        assert _charges(ledger) == before
        event(f"refused: {type(exc).__name__}")
        return
    event("answered" + (" through a CTE or subquery" if "(SELECT" in sql else "")
          + (" with a join" if "JOIN" in sql else ""))
    after = _charges(ledger)
    assert after[:-1] == before and after[-1] == (sql, result.epsilon_dp)
    if epsilon < 1e-3:
        _assert_not_exact(db, sql, epsilon, result)


def _assert_not_exact(db, sql, epsilon, result) -> None:
    """With scale >= 1e6 the chance that a COUNT or SUM comes out exact is about 1e-6."""
    prepared = db._prepare(sql, epsilon, None)
    plan = prepared.plan
    assert all(m.scale >= 1e6 for m in prepared.mechanisms.values())
    exact = execute.run(db._backend.conn, prepared.sql, len(plan.group_by))
    if plan.having is not None or plan.limit is not None or plan.offset is not None or plan.order:
        return  # rows are filtered or reordered by noisy values; outputs are not aligned
    for out in plan.outputs:
        if out.function in ("COUNT", "SUM"):
            noisy = result.df[out.name].tolist()
            truth = exact.values[out.measurements[0]]
            assert len(noisy) == len(truth)
            assert all(n != t for n, t in zip(noisy, truth, strict=True)), (out.name, noisy, truth)
