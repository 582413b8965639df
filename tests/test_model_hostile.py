"""Hostile queries against the model mode: answers that read more than a declared model covers
(another column) must never be calibrated by the model, and answers reading several time
points behind one released value (a time column rewritten by a CTE too) are charged to every
time point they may read. Under the default mode they fall back to the tight
map; asked with mode model they are refused, naming the other modes. Every verdict is the
same on two data sets, so coverage is a function of the text and the policy (docs/theory.md §14)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dpsql.calibration.declared import SeriesPoints
from dpsql.engine.errors import InputError, QueryRefused

from tests import test_model_chain as chain
from tests import test_model_household as household
from tests.support import create_ledger

ALL = (0, 1, 2, 3)
CHAIN_SERIES = {
    'SELECT COUNT(*) FROM readings WHERE "on" AND (day = 2 OR day = 3)': ALL,
    'SELECT COUNT(*) FROM readings WHERE "on" AND day IN (2, 3)': (2, 3),
    'SELECT COUNT(*) FROM readings WHERE "on" AND day >= 2 AND day <= 3': (2, 3),
    'SELECT COUNT(*) FROM readings WHERE "on" AND NOT day <> 2': ALL,
    'SELECT COUNT(*) FROM readings WHERE "on" AND day = 2 OR "on"': ALL,
    'SELECT COUNT(*) FROM readings WHERE "on" AND day + 0 = 2': ALL,
    'SELECT COUNT(*) FROM readings WHERE "on" AND CAST(day AS DOUBLE) = 2': ALL,
    'SELECT COUNT(*) FROM readings WHERE "on" AND COALESCE(day, 3) = 2': ALL,
    'SELECT COUNT(*) FROM readings WHERE "on"': ALL,
    'SELECT SUM(day) FROM readings WHERE "on"': ALL,
    'SELECT FLOOR(day / 2) AS w, COUNT(*) FROM readings WHERE "on" GROUP BY w': ALL,
    'SELECT CASE WHEN day < 3 THEN 0 ELSE 1 END AS b, COUNT(*) FROM readings WHERE "on" GROUP BY b':
        ALL,
    'SELECT "on", COUNT(*) FROM readings GROUP BY "on"': ALL,
    'WITH t AS (SELECT * FROM readings WHERE day = 2 OR day = 3) SELECT COUNT(*) FROM t WHERE "on"':
        ALL,
    'SELECT COUNT(*) FROM (SELECT "on", day - 1 AS day FROM readings) WHERE "on" AND day = 2': ALL,
    'WITH t AS (SELECT "on", FLOOR(day / 2) AS day FROM readings) '
    'SELECT day, COUNT(*) FROM t WHERE "on" GROUP BY day': ALL,
}
"""Each releases values reading several time points together: the chain calibrates them as
series answers (§20), charged to every time point the WHERE leaves possible (a rewritten or
OR-ed time column prunes none)."""

CHAIN_OUTSIDE = [
    "SELECT COUNT(*) FROM readings WHERE \"on\" AND day = 2 AND kind = 'a'",
    'SELECT day, COUNT(*) FROM readings WHERE "on" GROUP BY day, kind',
    "SELECT day, COUNT(*) FILTER (WHERE kind = 'b') FROM readings GROUP BY day",
]
"""Each reads another column."""

CHAIN_INSIDE = [
    'SELECT day, COUNT(*) FROM readings WHERE "on" GROUP BY day',
    'SELECT day AS x, COUNT(*) FROM readings WHERE "on" GROUP BY 1',
    'SELECT COUNT(*) FROM readings WHERE "on" AND day = 2',
    'SELECT COUNT(*) FROM readings WHERE "on" AND 2 = day',
    'SELECT COUNT(*) FROM readings WHERE ("on" AND day BETWEEN 2 AND 2)',
    'SELECT day, SUM(CASE WHEN "on" THEN 1 ELSE 0 END) FROM readings GROUP BY day',
    'WITH t AS (SELECT * FROM readings WHERE "on") SELECT day, COUNT(*) FROM t GROUP BY day',
]
"""Each released value reads `on` at one time point: the chain calibrates them."""

HOUSEHOLD_OUTSIDE = [
    "SELECT COUNT(*) FROM people WHERE sick AND age > 40",
    "SELECT age, COUNT(*) FROM people WHERE sick GROUP BY age",
    "SELECT SUM(age) FROM people WHERE sick",
    "SELECT COUNT(*) FILTER (WHERE age > 3) FROM people WHERE sick",
    "SELECT COUNT(*) FROM people WHERE sick OR age < 10",
    "SELECT AVG(CASE WHEN sick THEN age ELSE 0 END) FROM people",
    "WITH t AS (SELECT * FROM people WHERE age > 20) SELECT COUNT(*) FROM t WHERE sick",
    "SELECT COUNT(*) FROM (SELECT sick OR age > 50 AS sick FROM people) WHERE sick",
    "SELECT sick, MEDIAN(age) FROM people GROUP BY sick",
    "SELECT COUNT(*) FROM units WHERE flag",
]
"""Each reads a column beyond `sick`, or a table the model is not declared for."""

HOUSEHOLD_INSIDE = [
    "SELECT COUNT(*) FROM people WHERE sick",
    "SELECT sick, COUNT(*) FROM people GROUP BY sick",
    "SELECT AVG(sick) FROM people",
    "SELECT SUM(CASE WHEN sick THEN 1 ELSE 0 END) FROM people",
    "SELECT COUNT(*) FROM people",
]
"""Each reads only `sick` (or no column) of people: the household model calibrates them."""


def _databases(tmp_path: Path, kind: str) -> list:
    """Two databases under one kind's model policy, on different data."""
    dbs = []
    for seed in (1, 2):
        root = tmp_path / f"{kind}{seed}"
        root.mkdir()
        module = chain if kind == "chain" else household
        (root / "policy.yaml").write_text(yaml.safe_dump(module.policy()))
        if kind == "chain":
            chain.write_readings(root / "readings.duckdb", seed=seed)
        else:
            household.write_people(root / "people.duckdb", sick_rate=0.05 * seed, seed=seed)
        create_ledger(root / "ledger.sqlite", root / "policy.yaml")
        dbs.append(module.connect(root))
    return dbs


def _verdict(db, sql: str, mode: str | None) -> str:
    try:
        return db.explain(sql, epsilon=0.5, mode=mode).mode
    except (InputError, QueryRefused) as exc:
        return f"refused: {exc}"


@pytest.mark.parametrize("kind,outside,inside", [("chain", CHAIN_OUTSIDE, CHAIN_INSIDE),
                                                 ("household", HOUSEHOLD_OUTSIDE, HOUSEHOLD_INSIDE)])
def test_the_model_never_calibrates_what_it_does_not_cover(tmp_path, kind, outside, inside) -> None:
    dbs = _databases(tmp_path, kind)
    try:
        for sql in outside:
            verdicts = {_verdict(db, sql, None) for db in dbs}
            assert verdicts == {"tight"}, (sql, verdicts)
            asked = {_verdict(db, sql, "model") for db in dbs}
            assert len(asked) == 1, (sql, asked)  # the same refusal on both data sets
            (message,) = asked
            assert message.startswith("refused: mode model cannot calibrate this query"), sql
            assert "ask mode tight" in message and "\n" not in message
        for sql in inside:
            assert {_verdict(db, sql, None) for db in dbs} == {"model"}, sql
    finally:
        for db in dbs:
            db.close()


def test_series_answers_are_charged_to_every_time_point_they_may_read(tmp_path) -> None:
    """The time points are read from the text and the policy: the same on two data sets."""
    dbs = _databases(tmp_path, "chain")
    try:
        for sql, points in CHAIN_SERIES.items():
            prepared = [db._prepare(sql, 0.5, None, None) for db in dbs]
            assert {p.mode for p in prepared} == {"model"}, sql
            assert {p.times for p in prepared} == {SeriesPoints(points)}, sql
    finally:
        for db in dbs:
            db.close()
