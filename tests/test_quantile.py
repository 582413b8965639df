"""MEDIAN, QUANTILE_CONT / PERCENTILE_CONT, MIN and MAX: one noisy histogram over the policy's
bins, quantiles and intervals read from it as post-processing (docs/theory.md §15)."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.aggregates.quantile import Grid, envelope, estimate, grid
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.backends.duckdb_execute import run
from dpsql.engine.errors import QueryTooLarge
from dpsql.engine.noise import build_mechanism, release_cells
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.postprocess import ALPHA, finish, noisy_frame, query_sql
from dpsql.engine.prepare import Preparer
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import BASE_POLICY, bound_plans, cli_paths, create_ledger, run_cli, write_policy

POLICY = parse_policy(BASE_POLICY)


def test_bins_come_from_the_policy_alone():
    """A float range is cut into limits.quantile_bins equal bins; a small int range has one bin
    per whole number, centred on it; a wide one is cut into quantile_bins bins."""
    age = build_plan(parse_select("SELECT MEDIAN(age) FROM people"), POLICY, "").measurements[0]
    income = build_plan(parse_select("SELECT MEDIAN(income) FROM people"), POLICY, "").measurements[0]
    assert age.operand is not None and income.operand is not None
    assert grid(income.operand, 64) == Grid(0.0, 1000 / 64, 64)
    assert grid(age.operand, 200) == Grid(-0.5, 1.0, 101)
    assert grid(age.operand, 64) == Grid(-0.5, 101 / 64, 64)
    assert age.cells == tuple(f"{age.name}_{i}" for i in range(64))
    assert sensitivity(age, build_plan(parse_select("SELECT MEDIAN(age) FROM people"), POLICY, "")) == 4


def test_quantiles_of_one_operand_share_one_histogram_and_explain_shows_it(setup):
    sql = ("SELECT state, MEDIAN(income) AS m, QUANTILE_CONT(income, 0.9) AS q9, "
           "PERCENTILE_CONT(0.1) WITHIN GROUP (ORDER BY income) AS q1, MIN(income), MAX(income) "
           "FROM people GROUP BY state")
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        explained = db.explain(sql, epsilon=1.0)
    (info,) = explained.aggregates
    assert info.function == "HISTOGRAM(income: 64 bins of 15.625 from 0 to 1000)"
    assert (info.mechanism, info.sensitivity, info.epsilon_dp) == ("discrete_laplace", 4, 1.0)
    assert info.scale == pytest.approx(4.0)
    # one pass: one COUNT grouped by the bin index, its counts read into the 64 cells
    assert explained.rewritten_sql.count('COUNT("__cell")') == 1
    assert explained.rewritten_sql.count('THEN "__count" END') == 64


def test_the_cli_explains_and_answers_a_median(setup, capsys):
    code, out, _ = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "1",
                           "SELECT MEDIAN(age) FROM people")
    assert code == 0 and "HISTOGRAM(age: 64 bins" in out
    code, out, _ = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--format", "csv",
                           "SELECT MEDIAN(age) AS m, MIN(age) AS lo FROM people")
    assert code == 0 and out.splitlines()[0].startswith("m,")


def test_bins_times_groups_count_against_the_noisy_value_limit(setup, tmp_path):
    policy = write_policy(tmp_path / "own.yaml", {"limits": {"max_noisy_values": 255,
                                                                "quantile_bins": 64}})
    ledger = create_ledger(tmp_path / "own.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger) as db:
        with pytest.raises(QueryTooLarge) as info:
            db.explain("SELECT state, MEDIAN(income) FROM people GROUP BY state", epsilon=1.0)
        assert "it would release 256 noisy values (4 group(s) x 64 noisy values, a histogram's " \
               "bins counting one each)" in str(info.value)
        assert (info.value.noisy_values, info.value.limit) == (256, 255)
        explained = db.explain("SELECT MEDIAN(income) FROM people", epsilon=1.0)
        # one pass: one COUNT grouped by the bin index, its counts read into the 64 cells
        assert explained.rewritten_sql.count('COUNT("__cell")') == 1
        assert explained.rewritten_sql.count('THEN "__count" END') == 64


def test_the_bins_knob_is_read_from_the_policy(setup, tmp_path):
    policy = write_policy(tmp_path / "own.yaml", {"limits": {"quantile_bins": 8}})
    ledger = create_ledger(tmp_path / "own.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger) as db:
        (info,) = db.explain("SELECT MEDIAN(income) FROM people", epsilon=1.0).aggregates
    assert info.function == "HISTOGRAM(income: 8 bins of 125 from 0 to 1000)"


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT QUANTILE_CONT(income, 1.5) FROM people",
     "QUANTILE_CONT(income, 1.5) refused: q must be in [0, 1], got 1.5; MEDIAN(expr) is q = 0.5"),
    ("SELECT QUANTILE_CONT(income, age) FROM people",
     "QUANTILE_CONT(income, age) refused: QUANTILE_CONT takes a number literal q in [0, 1], "
     "e.g. QUANTILE_CONT(income, 0.9)"),
    ("SELECT QUANTILE_CONT(income, [0.1, 0.9]) + 1 FROM people",
     "QUANTILE_CONT(income, [0.1, 0.9]) refused: a list of qs is a SELECT item of its own (one "
     "column per q); elsewhere write one QUANTILE_CONT(expr, q) for each (they read one noisy "
     "histogram, so several cost no more)"),
    ("SELECT MEDIAN(note) FROM people",
     "MEDIAN(note) refused: the column is str, not numeric (a condition counts as 0/1; or COUNT(note))"),
    ("SELECT MAX(income, age) FROM people",
     "MAX(income, age) refused: MAX takes one argument: MAX(expr) (the 1 quantile of a noisy histogram)"),
    ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY income DESC) FROM people",
     "WITHIN GROUP is supported as PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY expr), or write "
     "QUANTILE_CONT(expr, q)"),
])
def test_refusals_name_what_is_accepted(setup, sql, message):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(QueryRefused) as info:
            db.explain(sql, epsilon=1.0)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_unbounded_column_is_refused_naming_the_missing_bounds(setup, tmp_path):
    tables = {"people": {**BASE_POLICY["tables"]["people"], "columns": {
        **BASE_POLICY["tables"]["people"]["columns"], "income": {"type": "float"}}}}
    policy = write_policy(tmp_path / "own.yaml", {"tables": tables})
    ledger = create_ledger(tmp_path / "own.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger) as db:
        with pytest.raises(QueryRefused) as info:
            db.explain("SELECT MEDIAN(income) FROM people", epsilon=1.0)
    assert "MEDIAN(income) refused: the policy gives no lower/upper bounds for income" in str(info.value)


def _people(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, income DOUBLE, "
                 "sick BOOLEAN, note VARCHAR)")
    if rows:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, 'x')", rows)
    return conn


def test_the_sql_that_runs_is_the_same_on_neighbouring_data(setup, tmp_path, monkeypatch):
    """Which SQL runs (bins, their number, every group) is a function of the query text: the
    same on a dataset and on one where a unit's values moved to the extremes or vanished."""
    seen: list[str] = []
    real = execute.run
    monkeypatch.setattr(execute, "run", lambda conn, sql, keys: seen.append(sql) or real(conn, sql, keys))
    sql = "SELECT state, MEDIAN(income), MIN(age), MAX(age) FROM people GROUP BY state"
    dbs = []
    for name, update in (("same", None), ("extreme", "UPDATE people SET income = 1e300, age = -99 "
                                                     "WHERE person_id = 3"),
                         ("gone", "DELETE FROM people WHERE person_id = 3")):
        path = tmp_path / f"{name}.duckdb"
        with duckdb.connect(str(path)) as conn:
            conn.execute(f"ATTACH '{setup.db}' AS src (READ_ONLY)")
            conn.execute("CREATE TABLE people AS SELECT * FROM src.people")
            if update:
                conn.execute(update)
        dbs.append(path)
    for path in dbs:
        with PrivateDatabase.connect(path, setup.policy, setup.ledger, reuse=False) as db:
            db.query(sql, epsilon=0.5)
    assert len(seen) == 3 and seen[0] == seen[1] == seen[2]


def test_empty_groups_are_answered_from_noise_alone(setup):
    """Every key appears; a group with no rows gets a value from noise alone, inside the range,
    with an interval that does not pretend to know it."""
    sql = "SELECT state, MEDIAN(income) AS m, MIN(age) AS lo FROM people WHERE income > 5000 GROUP BY state"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query(sql, epsilon=1.0)
    assert list(result.df["state"]) == ["CA", "NY", "TX", "WA"]
    assert result.df["m"].between(0, 1000).all() and result.df["lo"].between(0, 100).all()
    assert (result.ci95["m"] >= 100).all()


def test_post_processing_is_total_on_extreme_counts():
    cut = Grid(0.0, 1.0, 4)
    extreme = np.array([[0, 0, 0, 0], [-5, -1e18, -3, -2], [2**62, 2**62, 2**62, 2**62],
                        [np.nan, np.inf, -np.inf, 1], [0, 0, 0, 7]], dtype=float)
    for q in (0.0, 0.3, 0.5, 1.0):
        value = estimate(extreme, cut, q, 3.0)
        low, high = envelope(extreme, cut, q, lambda terms: 3.0 * terms)
        assert np.isfinite(value).all() and np.isfinite(low).all() and np.isfinite(high).all()
        assert ((0 <= value) & (value <= 4) & (low <= high) & (0 <= low) & (high <= 4)).all()
    assert estimate(extreme, cut, 0.5, 3.0)[0] == 2.0  # no positive count: the middle
    assert estimate(extreme, cut, 1.0, 3.0)[4] == 4.0 and estimate(extreme, cut, 0.0, 3.0)[4] == 3.0


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(0, 9), min_size=1, max_size=40),
       noise=st.lists(st.integers(-3, 3), min_size=10, max_size=10), q=st.sampled_from(
           [0.0, 0.1, 0.25, 0.5, 0.77, 0.9, 1.0]))
def test_the_envelope_holds_the_exact_quantile_when_the_noise_is_within_its_bound(values, noise, q):
    """With the noise of every sum of j bins within its spread (here each bin's within 3, so
    3·j), the exact QUANTILE_CONT of the values (DuckDB's own) lies in [low, high]; whole
    numbers sit at bin centres."""
    cut = Grid(-0.5, 1.0, 10)
    counts = np.bincount(values, minlength=10) + np.array(noise)
    low, high = envelope(counts[None, :].astype(float), cut, q, lambda terms: 3.0 * terms)
    exact = duckdb.execute("SELECT QUANTILE_CONT(v, ?) FROM (SELECT UNNEST(?) AS v)", [q, values]).fetchone()[0]
    assert low[0] <= exact <= high[0]


def test_reported_medians_fall_inside_their_intervals_at_least_95_percent_of_the_time():
    """On a known distribution (ages ~ Normal(45, 15), incomes ~ Exponential(300), both beyond
    the bounds at times), grouped: over 200 draws of the engine's own noise and post-processing,
    the exact quantile of the clamped values (DuckDB) is inside the reported 95% interval at
    least 95% - 3 standard errors (about 90.4%) of the time, for MEDIAN, the 0.9 quantile,
    MIN and MAX."""
    rng = np.random.default_rng(5)
    n = 1500
    states = rng.choice(["CA", "NY", "TX", "WA"], n)
    ages = np.round(rng.normal(45, 15, n)).astype(int)
    incomes = rng.exponential(300, n)
    conn = _people([(i, s, int(a), float(x), False)
                    for i, (s, a, x) in enumerate(zip(states, ages, incomes, strict=True))])
    sql = ("SELECT state, MEDIAN(income), QUANTILE_CONT(age, 0.9), MIN(age), MAX(income) "
           "FROM people GROUP BY state")
    plan = build_plan(parse_select(sql), POLICY, sql)
    bound_plans(conn, [plan])
    exact = run(conn, rewrite(plan).sql("duckdb"), 1)
    truth = conn.execute(
        "SELECT state, QUANTILE_CONT(LEAST(GREATEST(income, 0), 1000), 0.5), "
        "QUANTILE_CONT(LEAST(GREATEST(age, 0), 100), 0.9), MIN(LEAST(GREATEST(age, 0), 100)), "
        "MAX(LEAST(GREATEST(income, 0), 1000)) FROM people GROUP BY state ORDER BY state").fetchall()
    post = duckdb.connect()
    mechanisms = {m.name: build_mechanism(m, sensitivity(m, plan), 0.5) for m in plan.measurements}
    runs, inside = 200, np.zeros((4, 4))
    for _ in range(runs):
        noisy = {cell: values for mech in mechanisms.values()
                 for cell, values in release_cells(mech, exact.values).items()}
        frame = noisy_frame(plan, exact.keys, noisy, mechanisms)
        answer, halfwidths = (table.frame() for table in finish(post, plan, query_sql(plan), frame)[:2])
        for g, row in enumerate(truth):
            for j in range(4):
                name = plan.outputs[j + 1].name
                inside[g, j] += abs(answer[name][g] - row[j + 1]) <= halfwidths[name][g] + 1e-9
    rate = inside / runs
    floor = 1 - ALPHA - 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs)
    assert (rate >= floor).all(), rate


def test_a_large_epsilon_gives_the_exact_quantiles_of_the_clamped_values(setup, tmp_path):
    """With little noise the answers are the exact quantiles to within a bin: ages are whole
    numbers, so MIN and MAX are the clamped extremes themselves."""
    policy = write_policy(tmp_path / "own.yaml", {"budget": {"epsilon": 1e6}})
    ledger = create_ledger(tmp_path / "own.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger) as db:
        result = db.query("SELECT MEDIAN(income) AS m, MIN(age) AS lo, MAX(age) AS hi FROM people",
                          epsilon=100.0)
    with duckdb.connect(str(setup.db), read_only=True) as conn:
        assert conn.execute("SELECT MIN(age), MAX(age) FROM people").fetchone() == (-5, 109)
    assert (result.df["lo"][0], result.df["hi"][0]) == (0, 100)
    assert result.ci95["m"][0] < 1000 / 64 * 2


def test_the_preparer_checks_quantile_post_processing_before_any_charge(setup):
    """Post-processing of a quantile query runs on zeros before the data is read (no failure can
    happen after a charge)."""
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        preparer: Preparer = db._preparer
        prepared = preparer.prepare("SELECT MEDIAN(income) AS m FROM people HAVING m > 1 ORDER BY m",
                                    1.0, None)
    assert prepared.post_sql in preparer._post_checked


@pytest.mark.parametrize(("sql", "mechanism"), [("SELECT COUNT(*) FROM people", "discrete_laplace"),
                                                ("SELECT SUM(income) FROM people", "laplace")])
def test_the_bound_on_a_sum_of_noise_draws_holds_and_is_at_least_opendps_own(sql, mechanism):
    """Chernoff's half-width for a sum of j draws: at j = 1 it is no tighter than OpenDP's exact
    accuracy; for j = 16 the share of 1000 sampled sums beyond it is at most alpha plus 3
    standard errors (alpha = 0.05: about 7%), and it is far below j times the one-draw bound."""
    alpha, terms, draws = 0.05, 16, 1000
    noise = build_mechanism(build_plan(parse_select(sql), POLICY, sql).measurements[0], 4, 1.0)
    assert (noise.mechanism, noise.scale) == (mechanism, pytest.approx(4.0))
    assert noise.sum_accuracy(1, alpha) >= noise.accuracy(alpha)
    bound = noise.sum_accuracy(terms, alpha)
    zeros = [0] * (terms * draws) if mechanism == "discrete_laplace" else [0.0] * (terms * draws)
    sums = np.asarray(noise.opendp_measurement(zeros), dtype=float).reshape(draws, terms).sum(axis=1)
    assert np.mean(np.abs(sums) > bound) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / draws)
    assert bound < terms * noise.accuracy(alpha) / 2


def test_a_histogram_is_released_as_one_opendp_draw_and_split_untouched():
    """All cells of all groups go to OpenDP in one vector (the one the sensitivity is stated
    for) and come back split per cell, each value OpenDP's own, in order."""
    import dataclasses

    sql = "SELECT state, MEDIAN(sick) FROM people GROUP BY state"
    (histogram,) = build_plan(parse_select(sql), POLICY, sql).measurements
    mechanism = build_mechanism(histogram, 4, 1.0)
    seen: list[list] = []
    markers = [object() for _ in range(8)]

    def fake(values):
        seen.append(values)
        return markers

    patched = dataclasses.replace(mechanism, opendp_measurement=fake)
    exact = {histogram.cells[0]: [1, 2, 3, 4], histogram.cells[1]: [5, 6, 7, 8]}
    released = release_cells(patched, exact)
    assert seen == [[1, 2, 3, 4, 5, 6, 7, 8]]
    assert released == {histogram.cells[0]: markers[:4], histogram.cells[1]: markers[4:]}
