"""Answers made of group keys and noisy measurements skip the post-processing query and pandas;
what they get must be exactly what the query would have produced, values, types and intervals,
as the DataFrames of the Python API and as the rows the command line prints and the ledger
stores."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from dpsql.engine import postprocess
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.prepare import _all_keys

from tests.support import create_ledger, make_people, write_policy

DIRECT = [
    "SELECT COUNT(*) AS n FROM people",
    "SELECT COUNT(*) FROM people WHERE sick",
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state",
    "SELECT COUNT(*) AS n, state FROM people GROUP BY state",
    "SELECT sick, state, COUNT(*), SUM(income), SUM(age) FROM people GROUP BY sick, state",
    "SELECT SUM(income) AS total, COUNT(note) FROM people",
    "SELECT state, COUNT(DISTINCT person_id) FROM people GROUP BY state",
    "SELECT AVG(income) FROM people",
    "SELECT AVG(age) AS mean_age FROM people WHERE sick",
    "SELECT state, AVG(income) AS mean, COUNT(*) AS n FROM people GROUP BY state",
    "SELECT sick, state, AVG(age), SUM(age), AVG(income) FROM people GROUP BY sick, state",
    "SELECT LEAST(AVG(income), 50) AS capped FROM people",
    "SELECT MEDIAN(income) FROM people",
    "SELECT state, QUANTILE_CONT(income, 0.9) AS p90, MIN(age), MAX(age) FROM people GROUP BY state",
    "SELECT sick, COUNT(*) AS n, MEDIAN(age) AS m, AVG(income), MAX(income) FROM people GROUP BY sick",
]
NEEDS_QUERY = [
    "SELECT AVG(income) + 1 AS shifted FROM people",
    "SELECT SUM(income) / COUNT(*) AS ratio FROM people",
    "SELECT GREATEST(AVG(age), -3.5) AS floored FROM people",
    "SELECT state, AVG(income) AS mean FROM people GROUP BY state ORDER BY mean",
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC",
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING COUNT(*) > 3",
    "SELECT COUNT(*) * 2 AS twice FROM people",
    "SELECT state, COUNT(*) FROM people GROUP BY state LIMIT 2",
    "SELECT MEDIAN(income) + 1 AS shifted FROM people",
    "SELECT state, MEDIAN(income) AS m FROM people GROUP BY state ORDER BY m",
]


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    root = tmp_path_factory.mktemp("direct")
    policy = write_policy(root / "policy.yaml")
    db = PrivateDatabase.connect(make_people(root / "p.duckdb"), policy,
                                 create_ledger(root / "l.sqlite", policy))
    yield db
    db.close()


def _noisy(plan, rng: np.random.Generator) -> dict[str, list]:
    rows = plan.group_count if plan.group_by else 1
    return {cell: (rng.integers(-50, 500, rows).tolist() if m.integer
                   else rng.normal(100.0, 300.0, rows).tolist())
            for m in plan.measurements for cell in m.cells}


@pytest.mark.parametrize("sql", DIRECT)
def test_the_direct_answer_is_the_post_processing_querys(conn, sql):
    rng = np.random.default_rng(5)
    prepared = conn._preparer.prepare(sql, 1.0, None)
    plan, mechanisms = prepared.plan, prepared.mechanisms
    for _ in range(5):
        noisy, keys = _noisy(plan, rng), _all_keys(plan)
        fast = postprocess.direct(plan, keys, noisy, mechanisms)
        assert fast is not None and postprocess.answered_directly(plan)
        frame = postprocess.noisy_frame(plan, keys, noisy, mechanisms)
        slow = postprocess.finish(conn._post, plan, prepared.post_sql, frame)
        for got, want in zip(fast, slow, strict=True):
            _same(got, want)


@pytest.mark.parametrize("sql", [q for q in DIRECT if "AVG" in q])
def test_avg_computed_directly_matches_the_query_at_extreme_noisy_values(conn, sql):
    """Noisy counts at 0, negative or near 2**63 and totals near the largest DOUBLE: the
    DOUBLE conversions, the GREATEST(count, 1) floor and the clamp give the query's bits (and
    a histogram's quantile beside it is read as the query reads it)."""
    prepared = conn._preparer.prepare(sql, 1.0, None)
    plan, mechanisms = prepared.plan, prepared.mechanisms
    rows = plan.group_count if plan.group_by else 1
    picks = {True: [0, -1, 1, -(2**62), 2**63 - 1, 3, 9007199254740993],
             False: [0.0, -1e308, 1e308, 5e-324, -0.0, 123.456, 1e17 + 1.0]}
    keys = _all_keys(plan)
    for shift in range(7):
        cells = [(cell, m.integer) for m in plan.measurements for cell in m.cells]
        noisy = {cell: [picks[integer][(shift + i + j) % 7] for i in range(rows)]
                 for j, (cell, integer) in enumerate(cells)}
        fast = postprocess.direct(plan, keys, noisy, mechanisms)
        assert fast is not None
        frame = postprocess.noisy_frame(plan, keys, noisy, mechanisms)
        slow = postprocess.finish(conn._post, plan, prepared.post_sql, frame)
        _same(fast[0], slow[0])


@pytest.mark.parametrize("sql", NEEDS_QUERY)
def test_answers_with_expressions_or_selection_still_run_the_query(conn, sql):
    prepared = conn._preparer.prepare(sql, 1.0, None)
    plan = prepared.plan
    noisy = _noisy(plan, np.random.default_rng(1))
    assert postprocess.direct(plan, _all_keys(plan), noisy, prepared.mechanisms) is None
    assert not postprocess.answered_directly(plan)


def _same(got, want) -> None:
    """A directly built table against the post-processing query's: the same frame (dtypes and
    values) and the same Python values row by row, with the same types (an int stays an int;
    a zero's sign is not compared, as `assert_frame_equal` does not)."""
    assert got._frame is None  # built without pandas
    for rows in ("rows", "object_rows", "floats" if want.frame().dtypes.eq(float).all() else "rows"):
        fast, slow = getattr(got, rows)(), getattr(want, rows)()
        assert [[(type(v), v if v == v else "NaN") for v in row] for row in fast] \
            == [[(type(v), v if v == v else "NaN") for v in row] for row in slow]
    assert got.columns == want.columns and len(got) == len(want)
    pd.testing.assert_frame_equal(got.frame(), want.frame(), check_dtype=True, check_exact=True)
