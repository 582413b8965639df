"""Two-level aggregation (docs/theory.md §29): a CTE or FROM-subquery grouped by the privacy unit
feeding an outer aggregate. Sensitivities from the derived per-unit bounds and rows per unit,
refusals in one line, exact answers against plain DuckDB, hostile units over the bound, and the
coverage of the 95% intervals; an outer query filtering, ordering or computing columns of a
released table, as the one query it post-processes."""

from __future__ import annotations

import copy
import datetime as dt

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml
from dpsql.engine import PrivateDatabase, QueryRefused, postprocess
from dpsql.engine.backends.duckdb_execute import bound_units, run
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import read_columns, rewrite
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select

from tests.support import create_ledger

DAYS = [dt.date(2024, 3, 4) + dt.timedelta(days=i) for i in range(7)]
VISITS = {
    "budget": {"epsilon": 1e9},
    "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
    "tables": {"visits": {"privacy_unit": "VisitorId", "max_rows_per_unit": 4, "columns": {
        "day": {"type": "date", "lower": "2024-03-04", "upper": "2024-03-10"},
        "spent": {"type": "float", "lower": 0.0, "upper": 100.0},
        "items": {"type": "int", "lower": -5, "upper": 20},
        "shop": {"type": "str", "domain": ["a", "b"]},
        "note": {"type": "str"}}}},
}
POLICY = parse_policy(VISITS)
HISTOGRAM = ("WITH per AS (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId) "
             "SELECT n, COUNT(*) FROM per GROUP BY n")
PER_VISITOR = ("WITH per_visitor AS (SELECT VisitorId, day, SUM(spent) AS s FROM visits "
               "GROUP BY VisitorId, day) SELECT day, SUM(s) AS total FROM per_visitor GROUP BY day")


def _plan(sql: str, policy=POLICY):
    return build_plan(flatten(parse_select(sql), policy), policy, sql)


def _sensitivities(sql: str, policy=POLICY) -> dict[str, float]:
    plan = _plan(sql, policy)
    return {m.label: sensitivity(m, plan) for m in plan.measurements}


@pytest.mark.parametrize("sql, rows, expected", [
    # GROUP BY the unit alone: one outer row per unit; n in [0, 4], s in [0, 400].
    ("SELECT AVG(n) FROM (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId)", 1,
     {"SUM(n)": 4, "COUNT(n)": 1}),
    ("SELECT COUNT(*) FROM (SELECT VisitorId FROM visits GROUP BY VisitorId) AS u", 1, {"COUNT(*)": 1}),
    ("WITH u AS (SELECT VisitorId, SUM(spent) AS s, AVG(items) AS a, MIN(spent) AS lo FROM visits "
     "GROUP BY VisitorId) SELECT SUM(LEAST(s, 100)), SUM(a), SUM(lo), COUNT(DISTINCT VisitorId) FROM u",
     1, {"SUM(LEAST(s, 100))": 100, "SUM(a)": 25, "SUM(lo)": 100, "COUNT(DISTINCT unit)": 1}),
    # Days visited per visitor (PipelineDP's example): a distinct count in [0, m].
    ("SELECT AVG(n) FROM (SELECT VisitorId, COUNT(DISTINCT day) AS n FROM visits GROUP BY VisitorId)",
     1, {"SUM(n)": 4, "COUNT(n)": 1}),
    # HAVING keeps or drops a unit's group on its own values: the bounds and r are unchanged.
    ("SELECT day, SUM(s) FROM (SELECT VisitorId, day, SUM(spent) AS s FROM visits GROUP BY VisitorId, day "
     "HAVING COUNT(*) > 1) GROUP BY day", 4, {"SUM(s)": 800}),
    # items in [-5, 20]: a per-unit SUM lies in [-20, 80], so a SUM of it spans 100.
    ("SELECT SUM(s) FROM (SELECT VisitorId, SUM(items) AS s FROM visits GROUP BY 1)", 1, {"SUM(s)": 100}),
    # With the unit and a 2-value key: r = min(m, 2) = 2 rows per unit.
    ("SELECT shop, COUNT(*), SUM(s) FROM (SELECT VisitorId, shop, SUM(spent) AS s FROM visits "
     "GROUP BY VisitorId, shop) GROUP BY shop", 2, {"COUNT(*)": 4, "SUM(s)": 800}),
    ("SELECT COUNT(*), SUM(n * 2) FROM (SELECT VisitorId, shop, COUNT(*) AS n FROM visits "
     "GROUP BY VisitorId, shop)", 2, {"COUNT(*)": 2, "SUM(n * 2)": 16}),
    # GoogleSQL's per_visitor: 7 days, r = min(4, 7) = 4; SUM(s) as the row-level SUM(spent).
    (PER_VISITOR, 4, {"SUM(s)": 800}),
    ("SELECT EXTRACT(dow FROM d), COUNT(*) FROM (SELECT VisitorId, day AS d FROM visits "
     "WHERE day <= DATE '2024-03-05' GROUP BY VisitorId, d) GROUP BY 1", 2, {"COUNT(*)": 4}),
    # An outer GROUP BY on an integer per-unit value (§33): each of a unit's r rows is in one of
    # the groups 0..m, so a unit moves r rows out of and r rows into them.
    (HISTOGRAM, 1, {"COUNT(*)": 2}),
    ("SELECT n, COUNT(*), SUM(s) FROM (SELECT VisitorId, day, COUNT(*) AS n, SUM(spent) AS s FROM visits "
     "GROUP BY VisitorId, day) GROUP BY n", 4, {"COUNT(*)": 8, "SUM(s)": 800}),
    ("SELECT n, COUNT(*) FROM (SELECT VisitorId, COUNT(DISTINCT shop) AS n FROM visits GROUP BY 1) "
     "GROUP BY n", 1, {"COUNT(*)": 2}),
])
def test_sensitivity_from_the_derived_bounds_and_rows_per_unit(sql, rows, expected):
    assert _plan(sql).rows_per_unit == rows
    assert _sensitivities(sql) == expected


def test_sum_of_per_unit_sums_is_no_more_sensitive_than_the_row_level_sum():
    """§29: a unit's per-day sums add up to its kept rows' sum, so SUM(s) GROUP BY day moves as
    SUM(spent) GROUP BY day does, not r times more."""
    row_level = _sensitivities("SELECT day, SUM(spent) FROM visits GROUP BY day")
    assert _sensitivities(PER_VISITOR) == {"SUM(s)": row_level["SUM(spent)"]}


@pytest.mark.parametrize("sql, fragment", [
    ("WITH c AS (SELECT day, COUNT(*) AS n FROM visits GROUP BY day) SELECT day, SUM(n) FROM c GROUP BY day",
     "GROUP BY in an aggregate over the released rows of CTE c refused"),
    ("WITH c AS (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId HAVING VisitorId > 1) "
     "SELECT SUM(n) FROM c", "VisitorId in the HAVING of CTE c refused: it may read the query's GROUP "
     "BY keys (not the unit) and aggregates of its rows"),
    ("SELECT COUNT(*) FROM (SELECT VisitorId FROM visits GROUP BY VisitorId HAVING SUM(spent))",
     "HAVING of subquery in FROM must be a condition"),
    ("WITH c AS (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId) "
     "SELECT VisitorId, SUM(n) FROM c GROUP BY VisitorId", "column VisitorId is the privacy unit"),
    ("WITH c AS (SELECT VisitorId, AVG(items) AS n FROM visits GROUP BY VisitorId) "
     "SELECT n, COUNT(*) FROM c GROUP BY n", "GROUP BY n refused: n is a per-unit AVG of float values "
     "in CTE c, with no public set of values to group on"),
    ("SELECT s > 10, COUNT(*) FROM (SELECT VisitorId, SUM(spent) AS s FROM visits GROUP BY 1) GROUP BY 1",
     "GROUP BY 1 refused: s is a per-unit SUM of float values"),
    ("SELECT SUM(n) FROM (SELECT VisitorId, COUNT(*) FROM visits GROUP BY VisitorId)",
     "COUNT(*) in subquery in FROM refused: name it"),
    ("SELECT SUM(n) FROM (SELECT VisitorId, SUM(DISTINCT spent) AS n FROM visits GROUP BY VisitorId)",
     "in subquery in FROM refused: its SELECT may list the privacy unit"),
    ("SELECT SUM(n) FROM (SELECT VisitorId, COUNT(DISTINCT VisitorId) AS n FROM visits GROUP BY 1)",
     "it is 1 for every unit"),
    ("SELECT SUM(n) FROM (SELECT VisitorId, spent, COUNT(*) AS n FROM visits GROUP BY VisitorId)",
     "spent in subquery in FROM refused: its SELECT may list the privacy unit"),
    ("SELECT COUNT(*) FROM (SELECT VisitorId, note FROM visits GROUP BY VisitorId, note)",
     "GROUP BY note refused: the column has no public domain"),
    ("SELECT SUM(n) FROM (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId "
     "ORDER BY n LIMIT 3)", "ORDER BY in subquery in FROM refused"),
    ("SELECT SUM(__m0) FROM (SELECT VisitorId, COUNT(*) AS __m0 FROM visits GROUP BY VisitorId)",
     "names starting with __ are the engine's own"),
    ("SELECT SUM(s) FROM (SELECT VisitorId, SUM(note) AS s FROM visits GROUP BY VisitorId)",
     "the column is str, not numeric"),
    ("WITH a AS (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId), "
     "b AS (SELECT VisitorId, SUM(n) AS t FROM a GROUP BY VisitorId) SELECT SUM(t) FROM b",
     "one per-unit level is supported"),
    ("SELECT SUM(n) FROM (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId) "
     "WHERE VisitorId = 7", "column VisitorId is the privacy unit"),
])
def test_refusals_name_the_construct_in_one_line(sql, fragment):
    with pytest.raises(QueryRefused) as refused:
        _plan(sql)
    assert fragment in str(refused.value) and "\n" not in str(refused.value)


def _rows(seed: int, units: int = 400, heavy: bool = False) -> list[tuple]:
    """Visits within the bound of 4 rows per visitor (and, with `heavy`, one visitor of 60)."""
    rng = np.random.default_rng(seed)
    rows = []
    for visitor in range(units):
        for _ in range(int(rng.integers(1, 5))):
            rows.append((visitor, DAYS[int(rng.integers(0, 7))], round(float(rng.uniform(0, 100)), 2),
                         int(rng.integers(-5, 21)), "ab"[int(rng.integers(0, 2))], "x"))
    if heavy:
        rows += [(10_000, DAYS[0], 100.0, 20, "a", "x")] * 60
    return rows


def _load(conn: duckdb.DuckDBPyConnection, rows: list[tuple]) -> None:
    frame = pd.DataFrame(rows, columns=["VisitorId", "day", "spent", "items", "shop", "note"])
    conn.register("frame", frame)
    conn.execute("CREATE TABLE visits AS SELECT VisitorId::BIGINT AS VisitorId, day::DATE AS day, "
                 "spent::DOUBLE AS spent, items::BIGINT AS items, shop, note FROM frame")
    conn.unregister("frame")


def _exact(rows: list[tuple], sql: str) -> dict[str, list]:
    conn = duckdb.connect()
    _load(conn, rows)
    plan = _plan(sql)
    bound_units(conn, POLICY.tables["visits"], "key", read_columns(plan))
    return run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values


@pytest.mark.parametrize("sql, plain", [
    (PER_VISITOR, "SELECT day, SUM(spent) FROM visits GROUP BY day ORDER BY day"),
    ("SELECT shop, COUNT(*) FROM (SELECT VisitorId, shop, SUM(spent) AS s FROM visits "
     "GROUP BY VisitorId, shop) GROUP BY shop",
     "SELECT shop, COUNT(DISTINCT VisitorId) FROM visits GROUP BY shop ORDER BY shop"),
    ("SELECT SUM(n), COUNT(n) FROM (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId)",
     "SELECT COUNT(*), COUNT(DISTINCT VisitorId) FROM visits"),
    ("SELECT SUM(n) FROM (SELECT VisitorId, COUNT(DISTINCT day) AS n FROM visits GROUP BY VisitorId)",
     "SELECT COUNT(*) FROM (SELECT DISTINCT VisitorId, day FROM visits)"),
    ("WITH big AS (SELECT VisitorId, shop, SUM(spent) AS s FROM visits GROUP BY VisitorId, shop "
     "HAVING s > 50 AND COUNT(*) >= 2 AND shop = 'a') SELECT COUNT(*), SUM(s) FROM big",
     "SELECT COUNT(*), SUM(s) FROM (SELECT SUM(spent) AS s FROM visits WHERE shop = 'a' "
     "GROUP BY VisitorId HAVING SUM(spent) > 50 AND COUNT(*) >= 2)"),
    # Every key 0..m, a count of 0 where no unit has that many rows.
    (HISTOGRAM, "SELECT COUNT(u.n) FROM range(0, 5) AS k(n) LEFT JOIN (SELECT COUNT(*) AS n FROM "
     "visits GROUP BY VisitorId) AS u ON u.n = k.n GROUP BY k.n ORDER BY k.n"),
    ("SELECT n, COUNT(*) FROM (SELECT VisitorId, COUNT(DISTINCT shop) AS n FROM visits GROUP BY 1) "
     "GROUP BY n", "SELECT COUNT(u.n) FROM range(0, 3) AS k(n) LEFT JOIN (SELECT COUNT(DISTINCT shop) "
     "AS n FROM visits GROUP BY VisitorId) AS u ON u.n = k.n GROUP BY k.n ORDER BY k.n"),
    ("WITH u AS (SELECT VisitorId, MAX(items) AS top FROM visits GROUP BY VisitorId) "
     "SELECT SUM(top) FROM u WHERE top > 10",
     "SELECT SUM(m) FROM (SELECT MAX(items) AS m FROM visits GROUP BY VisitorId) WHERE m > 10"),
])
def test_exact_values_are_plain_duckdbs_on_data_within_the_bounds(sql, plain):
    rows = _rows(3)
    values = _exact(rows, sql)
    conn = duckdb.connect()
    _load(conn, rows)
    expected = conn.execute(plain).fetchall()
    got = list(zip(*values.values(), strict=True))
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        numbers = [v for v in theirs if isinstance(v, (int, float))]
        assert np.allclose([float(v) for v in mine], numbers, rtol=1e-9), (mine, theirs)


@pytest.mark.parametrize("sql, keys", [
    (HISTOGRAM, (0, 1, 2, 3, 4)),  # COUNT in [0, m]
    # COUNT(DISTINCT) of a 2-value domain column: at most 2, whatever m is.
    ("SELECT n, COUNT(*) FROM (SELECT VisitorId, COUNT(DISTINCT shop) AS n FROM visits GROUP BY 1) "
     "GROUP BY n", (0, 1, 2)),
    ("SELECT top, COUNT(*) FROM (SELECT VisitorId, MAX(items) AS top FROM visits GROUP BY 1) GROUP BY top",
     tuple(range(-5, 21))),
    ("SELECT n, COUNT(*) FROM (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY 1) WHERE n >= 2 "
     "GROUP BY n", (2, 3, 4)),
])
def test_an_integer_per_unit_value_groups_on_its_derived_bounds(sql, keys):
    """§33: the keys of an outer GROUP BY on a per-unit value are its derived bounds' integers,
    read from the policy (pruned by a WHERE on it as any int key)."""
    (key,) = _plan(sql).group_by
    assert key.keys == keys


def test_a_unit_over_the_bound_gives_at_most_its_derived_bounds():
    """One visitor with 60 rows of the largest values: its per-unit count is at most m = 4 and its
    per-unit sum at most 4 · 100, whatever its rows hold."""
    sql = ("SELECT SUM(n) AS n, SUM(s) AS s FROM (SELECT VisitorId, COUNT(*) AS n, SUM(spent) AS s "
           "FROM visits GROUP BY VisitorId)")
    light, heavy = _exact(_rows(5), sql), _exact(_rows(5, heavy=True), sql)
    cells = [m.name for m in _plan(sql).measurements]
    assert float(heavy[cells[0]][0]) - float(light[cells[0]][0]) == 4
    assert float(heavy[cells[1]][0]) - float(light[cells[1]][0]) == pytest.approx(400)


def test_the_plan_and_its_sql_depend_on_the_text_and_policy_only(tmp_path):
    """Explain (the rewritten SQL, the rows per unit, each sensitivity) is the same on two data
    sets, one with a unit far over the bound."""
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(VISITS))
    explained = []
    for name, rows in (("a", _rows(1)), ("b", _rows(2, heavy=True))):
        db_path = tmp_path / f"{name}.duckdb"
        with duckdb.connect(str(db_path)) as conn:
            _load(conn, rows)
        with PrivateDatabase.connect(db_path, policy_path, create_ledger(tmp_path / f"{name}.sqlite",
                                                                         policy_path)) as db:
            e = db.explain(PER_VISITOR, epsilon=1.0)
            explained.append((e.rewritten_sql, e.max_rows_per_unit,
                              [(a.function, a.sensitivity) for a in e.aggregates], e.columns_read))
    assert explained[0] == explained[1]
    assert explained[0][1] == 4 and explained[0][2] == [("SUM(s)", 800.0)]
    assert explained[0][3] == ("visits.day", "visits.spent")


def test_a_workload_answers_a_two_level_count_alone(tmp_path):
    """A workload's linear counts are row counts of the table: a count of per-unit rows is not one."""
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(VISITS))
    db_path = tmp_path / "v.duckdb"
    with duckdb.connect(str(db_path)) as conn:
        _load(conn, _rows(4, units=50))
    units = "SELECT COUNT(*) AS n FROM (SELECT VisitorId FROM visits GROUP BY VisitorId)"
    with PrivateDatabase.connect(db_path, policy_path, create_ledger(tmp_path / "l.sqlite",
                                                                     policy_path)) as db:
        result = db.query_many([units, "SELECT COUNT(*) AS n FROM visits"], epsilon=100.0)
    assert result.answers[0].answered.startswith("alone: it aggregates per-unit values")
    assert round(result.answers[0].df["n"][0]) == 50


def _coverage_db(tmp_path):
    policy = copy.deepcopy(VISITS)
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy))
    db_path = tmp_path / "v.duckdb"
    rows = _rows(7, units=300)
    with duckdb.connect(str(db_path)) as conn:
        _load(conn, rows)
        truth = conn.execute("SELECT AVG(n), SUM(s) FROM (SELECT COUNT(*) AS n, SUM(spent) AS s "
                             "FROM visits GROUP BY VisitorId)").fetchone()
    return db_path, policy_path, truth


def test_intervals_of_per_unit_aggregates_cover(tmp_path):
    """200 runs of AVG(n) and SUM(s) over per-visitor counts and sums: each 95% interval holds the
    exact value in at least 180 of 200 runs (10 misses expected, s.d. 3.1; 20 misses is 3.2
    deviations away)."""
    db_path, policy_path, (mean, total) = _coverage_db(tmp_path)
    sql = ("SELECT AVG(n) AS a, SUM(s) AS t FROM (SELECT VisitorId, COUNT(*) AS n, SUM(spent) AS s "
           "FROM visits GROUP BY VisitorId)")
    hits = np.zeros(2)
    with PrivateDatabase.connect(db_path, policy_path, create_ledger(tmp_path / "l.sqlite", policy_path),
                                 reuse=False) as db:  # fresh noise each run
        for _ in range(200):
            result = db.query(sql, epsilon=0.5)
            answer = result.df[["a", "t"]].to_numpy(dtype=float)[0]
            hits += np.abs(answer - [mean, total]) <= result.ci95[["a", "t"]].to_numpy(dtype=float)[0]
    assert (hits >= 180).all(), hits


@pytest.mark.parametrize("outer, single", [
    ("SELECT day, c FROM (SELECT day, COUNT(*) AS c FROM visits GROUP BY day) AS r WHERE c > 100 "
     "ORDER BY c DESC LIMIT 3",
     "SELECT day, COUNT(*) AS c FROM visits GROUP BY day HAVING COUNT(*) > 100 ORDER BY COUNT(*) DESC LIMIT 3"),
    ("WITH daily AS (SELECT shop, COUNT(*) AS c, SUM(spent) AS s FROM visits WHERE items > 0 GROUP BY shop "
     "HAVING SUM(spent) > 0) SELECT shop, s / c AS mean FROM daily WHERE c > 5",
     "SELECT shop, SUM(spent) / COUNT(*) AS mean FROM visits WHERE items > 0 GROUP BY shop "
     "HAVING SUM(spent) > 0 AND COUNT(*) > 5"),
    ("SELECT * FROM (SELECT shop, AVG(spent) AS a FROM visits GROUP BY shop)",
     "SELECT shop, AVG(spent) AS a FROM visits GROUP BY shop"),
])
def test_an_outer_query_over_released_rows_is_the_query_it_post_processes(outer, single):
    """Filtering, ordering and computing columns of the released rows is HAVING, ORDER BY and
    SELECT of the inner query on the same noisy values: the same measurements, sensitivities, SQL
    on the data and post-processing (one release, charged once)."""
    merged, written = _plan(outer), _plan(single)
    assert rewrite(merged).sql("duckdb") == rewrite(written).sql("duckdb")
    assert postprocess.query_sql(merged) == postprocess.query_sql(written)
    assert _sensitivities(outer) == _sensitivities(single)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT day FROM (SELECT day, COUNT(*) AS c FROM visits GROUP BY day) WHERE spent > 3",
     "column spent is not a column of subquery in FROM (its columns: day, c)"),
    ("SELECT day, c FROM (SELECT day, COUNT(*) AS c FROM visits GROUP BY day ORDER BY c LIMIT 2)",
     "ORDER in subquery in FROM refused: order and limit the released rows in the outer query"),
    ("SELECT AVG(c) FROM (SELECT day, COUNT(*) AS c FROM visits GROUP BY day HAVING COUNT(*) > 3)",
     "HAVING in subquery in FROM refused before an aggregate over its released rows"),
    ("SELECT x.c FROM (SELECT day, COUNT(*) AS c FROM visits GROUP BY day) AS r",
     "unknown table qualifier 'x'"),
])
def test_over_released_rows_refusals(sql, fragment):
    with pytest.raises(QueryRefused) as refused:
        _plan(sql)
    assert fragment in str(refused.value) and "\n" not in str(refused.value)
