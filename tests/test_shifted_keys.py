"""GROUP BY a date or timestamp column moved by a fixed INTERVAL (docs/theory.md §32): the keys
are the declared range moved (narrowed by WHERE), the exact answers DuckDB's own grouping of
the rows in range, values outside the declared range (infinity, far years) counted in no cell
and never an error, and calendar steps, far shifts and bare timestamps refused in one line."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest
from dpsql.engine.backends.duckdb_execute import run
from dpsql.engine.backends.duckdb_gate import SchemaGate
from dpsql.engine.errors import QueryRefused
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select

from tests.library import POLICY, checkout, write_library
from tests.support import bound_plans

D = dt.date
FORMS = {
    "day + INTERVAL 1 DAY": tuple(D(2024, 3, 5) + dt.timedelta(days=i) for i in range(7)),
    "INTERVAL 1 WEEK + day": tuple(D(2024, 3, 11) + dt.timedelta(days=i) for i in range(7)),
    "CAST(seen + INTERVAL 20 HOUR AS DATE)": tuple(D(2024, 3, 4) + dt.timedelta(days=i) for i in range(8)),
    "date_trunc('week', day + INTERVAL 3 DAY)": (D(2024, 3, 4), D(2024, 3, 11)),
    "EXTRACT(dow FROM day - INTERVAL 1 DAY)": tuple(range(7)),
    "CAST(day - INTERVAL 1 SECOND AS DATE)": tuple(D(2024, 3, 3) + dt.timedelta(days=i) for i in range(7)),
    "(day + INTERVAL 1 DAY) + INTERVAL 1 DAY": tuple(D(2024, 3, 6) + dt.timedelta(days=i) for i in range(7)),
}
# Rows inside and outside the declared week, with DuckDB's extreme dates, and NULLs.
ROWS = [checkout(p, 1, d, h) for p, d, h in [(1, 0, 0), (1, 2, 5), (2, 3, 23), (2, 6, 23), (3, 6, 3),
                                             (4, 1, 12), (5, 4, 4), (None, 5, 20)]]
ODD = [(6, 1, D(2024, 3, 11), dt.datetime(2024, 3, 11, 1), "Fiction", 1.0),
       (7, 1, D(1, 1, 1), dt.datetime(1, 1, 1), "Fiction", 1.0),
       (8, 1, None, None, "Fiction", 1.0)]


def _plan(key: str, where: str = ""):
    sql = f"SELECT {key} AS k, COUNT(*) AS n FROM checkouts {where} GROUP BY {key}"
    return build_plan(parse_select(sql), POLICY, sql)


@pytest.mark.parametrize("key", FORMS)
def test_the_keys_are_the_declared_range_moved(key):
    (group,) = _plan(key).group_by
    assert group.keys == FORMS[key]
    assert group.label == parse_select(f"SELECT {key}").expressions[0].sql("duckdb")


def test_where_narrows_the_moved_keys():
    (group,) = _plan("day + INTERVAL 1 DAY", "WHERE day >= '2024-03-08'").group_by
    assert group.keys == (D(2024, 3, 9), D(2024, 3, 10), D(2024, 3, 11))


def test_the_answers_are_duckdbs_grouping_of_the_rows_in_range():
    """On DuckDB itself: each key's count is the count of the rows in the declared range whose
    moved value is that key; rows out of range (infinity included) count in no cell and never
    make the query fail."""
    with duckdb.connect() as conn:
        write_library(conn, ROWS + ODD)
        conn.execute("INSERT INTO checkouts VALUES (9, 1, 'infinity', 'infinity', 'Fiction', 1.0)")
        conn.execute("INSERT INTO checkouts VALUES (9, 1, '5877642-06-25', NULL, 'Fiction', 1.0)")
        plans = [_plan(key) for key in FORMS]
        bound_plans(conn, plans)
        for key, plan in zip(FORMS, plans, strict=True):
            exact = run(conn, rewrite(plan).sql("duckdb"), 1)
            truth = dict(conn.execute(f"SELECT {key}, COUNT(*) FROM checkouts WHERE patron IS NULL "
                                      "OR patron < 6 GROUP BY 1").fetchall())
            truth = {(k.date() if isinstance(k, dt.datetime) and isinstance(FORMS[key][0], D) else k): v
                     for k, v in truth.items()}
            counts = dict(zip((k[0] for k in exact.keys), exact.values[plan.measurements[0].name], strict=True))
            assert counts == {k: truth.get(k, 0) for k in FORMS[key]}, key


@pytest.mark.parametrize(("key", "message"), [
    ("day + INTERVAL 1 MONTH", "a date key moves by a whole number of a fixed length (weeks, days, "
                               "hours, minutes, seconds); a month step has none"),
    ("day + INTERVAL 1 YEAR", "a year step has none"),
    ("day + INTERVAL 4000000 DAY", "GROUP BY day + INTERVAL '4000000' DAY refused: it falls outside "
                                   "the years 1 to 9999"),
    ("seen + INTERVAL 2 HOUR", "a timestamp has too many values to group on; group on "
                               "date_trunc('day', seen + INTERVAL '2' HOUR)"),
    ("day + INTERVAL 2 HOUR", "a timestamp has too many values"),
])
def test_calendar_steps_far_shifts_and_timestamps_are_refused_in_one_line(key, message):
    with pytest.raises(QueryRefused, match="") as refusal:
        _plan(key)
    assert message in str(refusal.value) and "\n" not in str(refusal.value)
    assert "__moved" not in str(refusal.value)


def _day(text: str, kind: str = "DATE") -> str:
    return f"TRY_CAST('{text}' AS {kind})"


def test_the_gate_accepts_a_fixed_shift_of_a_guarded_date_only():
    gate = SchemaGate({("t",): [("d", "DATE")]})
    guarded = f"CASE WHEN d >= {_day('2024-01-01')} AND d <= {_day('2024-12-31')} THEN d END"
    moved = f"({guarded} + INTERVAL 3 DAY)"
    kept = (f"CASE WHEN {moved} >= {_day('2024-01-04', 'TIMESTAMP')} AND {moved} <= "
            f"{_day('2025-01-03', 'TIMESTAMP')} THEN {moved} END")
    gate.check(f"SELECT date_trunc('week', TRY_CAST({kept} AS DATE)), EXTRACT(dow FROM {kept}) FROM t")
    for bad in [f"SELECT {guarded} + INTERVAL 1 MONTH FROM t",  # a month has no fixed length
                f"SELECT {guarded} + INTERVAL 4000000 DAY FROM t",  # could leave DuckDB's range
                "SELECT d + INTERVAL 1 DAY FROM t",  # a bare column may hold any date
                f"SELECT date_trunc('week', {moved}) FROM t"]:  # not kept in range
        with pytest.raises(QueryRefused):
            gate.check(bad)
    gate.close()
