"""Properties of date columns: one unit's change moves each exact aggregate over dates by at
most its sensitivity, and the ranges and key domains derived from the bounds hold every value
DuckDB computes, whatever dates the rows hold (infinite, far outside the bounds, NULL)."""

from __future__ import annotations

import datetime as dt

import duckdb
from dpsql.engine.backends.duckdb_execute import run
from dpsql.engine.errors import QueryRefused
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support import BASE_POLICY, bound_plans

POLICY = parse_policy({**BASE_POLICY, "tables": {"visits": {
    "privacy_unit": "person_id", "max_rows_per_unit": 2, "columns": {
        "day": {"type": "date", "lower": "2023-11-15", "upper": "2024-03-10"},
        "ts": {"type": "timestamp", "lower": "2024-02-27 22:00:00", "upper": "2024-03-02 03:30:00"},
        "age": {"type": "int", "lower": 0, "upper": 100}}}}})
QUERIES = [
    "SELECT COUNT(*), AVG(EXTRACT(hour FROM ts)), SUM(YEAR(day) - 2020), COUNT(day) FROM visits "
    "WHERE day >= DATE '2023-12-01'",
    "SELECT EXTRACT(month FROM day), COUNT(*), SUM(EXTRACT(dow FROM ts)), "
    "COUNT(*) FILTER (WHERE EXTRACT(hour FROM ts) < 12) FROM visits GROUP BY 1",
    "SELECT date_trunc('month', day), YEAR(day), COUNT(*), AVG(age) FROM visits "
    "WHERE day BETWEEN DATE '2023-12-10' AND DATE '2024-02-29' GROUP BY 1, 2",
    "SELECT day, COUNT(*) FROM visits WHERE day > DATE '2024-02-25' AND day <> DATE '2024-03-01' "
    "GROUP BY day",
    "SELECT date_trunc('hour', ts), date_trunc('day', ts), COUNT(DISTINCT person_id), "
    "SUM(EXTRACT(minute FROM ts)) FROM visits WHERE ts < TIMESTAMP '2024-02-29 01:00:00' GROUP BY 1, 2",
]
PLANS = [build_plan(parse_select(q), POLICY, q) for q in QUERIES]

# Days and moments around the bounds, and the values DuckDB holds beyond any policy's.
ODD_DAYS = ["infinity", "-infinity", "5881580-07-10", "-5877641-06-25", "0001-01-01", "9999-12-31"]
ODD_MOMENTS = ["infinity", "-infinity", "294247-01-10 04:00:54", "-290308-12-22 00:00:00",
               "9999-12-31 23:59:59.999999"]
days = st.one_of(st.none(), st.sampled_from(ODD_DAYS),
                 st.dates(dt.date(2023, 11, 1), dt.date(2024, 3, 20)).map(str))
moments = st.one_of(st.none(), st.sampled_from(ODD_MOMENTS),
                    st.datetimes(dt.datetime(2024, 2, 27), dt.datetime(2024, 3, 3)).map(str))
row = st.tuples(days, moments, st.one_of(st.none(), st.integers(-20, 150)))
unit_rows = st.lists(row, max_size=4)


def _exact(table: dict[int, list[tuple]]) -> list[dict[str, list]]:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE visits (person_id BIGINT, day DATE, ts TIMESTAMP, age BIGINT)")
    records = [(unit, *r) for unit, rows in table.items() for r in rows]
    if records:
        conn.executemany("INSERT INTO visits VALUES (?, ?::DATE, ?::TIMESTAMP, ?)", records)
    bound_plans(conn, PLANS)
    answers = [run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values for plan in PLANS]
    conn.close()
    return answers


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(others=st.dictionaries(st.integers(0, 5), unit_rows, max_size=5), unit=st.integers(0, 7),
       before=unit_rows, after=unit_rows)
# A unit moving between the extreme keys: first and last month, hour, minute.
@example(others={}, unit=0, before=[("2023-11-15", "2024-02-27 22:00:00", 100)] * 2,
         after=[("2024-03-10", "2024-03-02 03:30:00", 0)] * 2)
def test_one_unit_moves_each_date_aggregate_within_its_sensitivity(others, unit, before, after):
    for plan, a, b in zip(PLANS, _exact({**others, unit: before}), _exact({**others, unit: after}),
                          strict=True):
        for m in plan.measurements:
            moved = sum(abs(float(x) - float(y)) for x, y in zip(a[m.name], b[m.name], strict=True))
            assert moved <= sensitivity(m, plan) * (1 + 1e-9), (plan.sql, m.label, moved)


KEY_EXPRESSIONS = ("EXTRACT(year FROM day)", "EXTRACT(month FROM day)", "EXTRACT(dow FROM ts)",
                   "EXTRACT(isodow FROM day)", "EXTRACT(doy FROM day)", "EXTRACT(week FROM day)",
                   "EXTRACT(quarter FROM ts)", "EXTRACT(day FROM ts)", "EXTRACT(hour FROM ts)",
                   "EXTRACT(minute FROM ts)", "EXTRACT(second FROM ts)", "YEAR(ts)",
                   "date_trunc('week', day)", "date_trunc('quarter', day)", "date_trunc('year', ts)",
                   "date_trunc('hour', ts)", "date_trunc('day', ts)", "CAST(ts AS DATE)", "day")
windows = st.tuples(st.sampled_from(["day", "ts"]), st.sampled_from(["BETWEEN", ">=", "<", "="]),
                    st.datetimes(dt.datetime(2023, 11, 1), dt.datetime(2024, 3, 12)),
                    st.integers(0, 500))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(days, moments.map(lambda m: m if m is None else m.split(" ")[0])),
                min_size=1, max_size=12),
       st.lists(moments, min_size=1, max_size=12), st.one_of(st.none(), windows))
def test_keys_hold_every_value_duckdb_computes(day_values, moment_values, window):
    """Every non-NULL key DuckDB computes from the rows the query counts is one of the key
    values the plan derives from the bounds and the WHERE (so no counted row falls outside its
    groups), whatever the rows hold."""
    conn = duckdb.connect()
    conn.execute("CREATE TABLE visits (person_id BIGINT, day DATE, ts TIMESTAMP, age BIGINT)")
    rows = [(i, d, t, 1) for i, (d, t) in enumerate(zip(day_values, moment_values, strict=False))]
    conn.executemany("INSERT INTO visits VALUES (?, ?::DATE, ?::TIMESTAMP, ?)", rows)
    where = ""
    if window is not None:
        column, op, start, length = window
        kind = "DATE" if column == "day" else "TIMESTAMP"
        text = (lambda t: t.date().isoformat()) if column == "day" else (lambda t: t.isoformat(sep=" "))
        first = f"{kind} '{text(start)}'"
        where = f" WHERE {column} BETWEEN {first} AND {kind} '{text(start + dt.timedelta(days=length))}'" \
            if op == "BETWEEN" else f" WHERE {column} {op} {first}"
    for expression in KEY_EXPRESSIONS:
        sql = f"SELECT {expression} AS k, COUNT(*) FROM visits{where} GROUP BY 1"
        try:
            plan = build_plan(parse_select(sql), POLICY, sql)
        except QueryRefused as exc:  # a WHERE outside the bounds leaves no key
            assert "leaves none of its values possible" in str(exc), (sql, exc)
            continue
        key = plan.group_by[0]
        filtered = "" if plan.where is None else f" WHERE {plan.where.sql('duckdb')}"
        computed = {r[0] for r in conn.execute(
            f"SELECT {key.value.sql('duckdb')} FROM visits{filtered}").fetchall() if r[0] is not None}
        assert computed <= set(key.keys), (sql, computed - set(key.keys))
    conn.close()


def test_a_short_window_keeps_only_the_parts_it_can_hold():
    sql = ("SELECT EXTRACT(month FROM day), COUNT(*) FROM visits "
           "WHERE day BETWEEN DATE '2023-12-20' AND DATE '2024-02-05' GROUP BY 1")
    assert build_plan(parse_select(sql), POLICY, sql).group_by[0].keys == (1, 2, 12)
