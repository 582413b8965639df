"""Marginals for free: a COUNT or SUM grouped by fewer keys than a released table (or a total, or
the same statistic keeping some of its groups by `WHERE key IN (...)`) is summed from its
released cells at cost 0, with the exact 95% interval of a sum of independent noises, when that
interval is at most as wide as a fresh answer's; otherwise it is charged (docs/theory.md §22)."""

from __future__ import annotations

import contextlib
import sqlite3

import numpy as np
import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.noise import NoiseKind
from dpsql.engine.workload_intervals import sum_halfwidth
from opendp.domains import atom_domain, vector_domain
from opendp.measurements import make_laplace
from opendp.metrics import l1_distance
from opendp.mod import enable_features

FINE = "SELECT state, sick, COUNT(*) AS n, SUM(income) AS total FROM people GROUP BY state, sick"


def _charges(ledger) -> int:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


def _fresh_ci95(setup, sql: str, epsilon: float) -> dict[str, float]:
    """Each aggregate's 95% half-width were the query charged now (no reuse)."""
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=False) as db:
        return {a.column: a.ci95_halfwidth for a in db.explain(sql, epsilon=epsilon).aggregates}


def test_a_marginal_of_a_released_table_is_its_cells_summed_at_no_charge(setup):
    marginal = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        fine = db.query(FINE, epsilon=1.0)
        spent = db.budget().spent_dp
        explained = db.explain(marginal, epsilon=0.2)
        assert explained.cost == 0.0 and explained.derived_from == (fine.id,)
        answer = db.query(marginal, epsilon=0.2)
        assert db.budget().spent_dp == spent
    assert answer.cost == 0.0 and answer.derived_from == (fine.id,) and answer.id is None
    sums = fine.df.groupby("state", sort=True)["n"].sum()
    assert list(answer.df["state"]) == list(sums.index)
    assert list(answer.df["n"]) == list(sums.values)
    scale = next(a.scale for a in fine.aggregates if a.column == "n")
    width = sum_halfwidth(NoiseKind.DISCRETE_LAPLACE, scale, 2, 0.05)
    assert np.allclose(answer.ci95["n"], width) and answer.epsilon_dp == fine.epsilon_dp
    assert np.allclose(answer.ci95_simultaneous["n"],
                       sum_halfwidth(NoiseKind.DISCRETE_LAPLACE, scale, 2, 0.05 / 4))
    assert width <= _fresh_ci95(setup, marginal, 0.2)["n"], "at least as accurate as asked"
    assert "summed over 2 released cells of answer 1" in answer.aggregates[0].function
    assert answer.to_dict()["derived_from"] == [fine.id]
    assert _charges(setup.ledger) == 1


def test_a_total_of_released_counts_and_sums(setup):
    total = "SELECT COUNT(*) AS rows, SUM(income) AS income FROM people"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        fine = db.query(FINE, epsilon=1.0)
        answer = db.query(total, epsilon=0.1)
    assert answer.derived_from == (fine.id,) and answer.cost == 0.0
    assert answer.df["rows"].item() == fine.df["n"].sum()
    assert answer.df["income"].item() == pytest.approx(fine.df["total"].sum())
    fresh = _fresh_ci95(setup, total, 0.1)
    assert answer.ci95["rows"].item() <= fresh["rows"]
    assert answer.ci95["income"].item() <= fresh["income"]
    assert _charges(setup.ledger) == 1


def test_a_where_that_keeps_whole_released_groups(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        fine = db.query(FINE, epsilon=1.0)
        kept = db.query("SELECT sick, COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY') "
                        "GROUP BY sick", epsilon=0.2)
        one = db.query("SELECT state, sick, COUNT(*) AS n FROM people WHERE state = 'TX' "
                       "GROUP BY state, sick", epsilon=0.5)
    chosen = fine.df[fine.df["state"].isin(["CA", "NY"])].groupby("sick", sort=True)["n"].sum()
    assert kept.derived_from == (fine.id,) and list(kept.df["n"]) == list(chosen.values)
    texas = fine.df[fine.df["state"] == "TX"].reset_index(drop=True)
    assert one.derived_from == (fine.id,) and list(one.df["n"]) == list(texas["n"])
    assert np.allclose(one.ci95["n"], fine.ci95["n"].iloc[0]), "one cell: its own interval"
    assert _charges(setup.ledger) == 1


def test_a_marginal_less_accurate_than_a_fresh_answer_is_charged(setup):
    marginal = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(FINE, epsilon=1.0)
        for epsilon in (0.1, 0.3, 0.4, 1.0):
            derived = db.explain(marginal, epsilon=epsilon).derived_from != ()
            fresh = _fresh_ci95(setup, marginal, epsilon)["n"]
            scale = 8.0  # the released COUNT's: sensitivity 4 at epsilon_dp 0.5
            assert derived == (sum_halfwidth(NoiseKind.DISCRETE_LAPLACE, scale, 2, 0.05) <= fresh)
        assert db.query(marginal, epsilon=1.0).cost > 0
    assert _charges(setup.ledger) == 2


@pytest.mark.parametrize("sql", [
    "SELECT state, AVG(income) AS a FROM people GROUP BY state",  # not a sum of cells
    "SELECT state, COUNT(*) AS n FROM people WHERE age > 30 GROUP BY state",  # another WHERE
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING COUNT(*) > 5",
    "SELECT state, COUNT(DISTINCT person_id) AS u FROM people GROUP BY state",
    "SELECT COUNT(*) AS n FROM people WHERE note = 'row'",  # a filter on no released key
])
def test_what_is_not_a_sum_of_released_cells_is_charged(setup, sql):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(FINE, epsilon=5.0)
        answer = db.query(sql, epsilon=0.01)
    assert answer.derived_from == () and answer.cost > 0


def test_another_analysts_table_is_not_summed(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(FINE, epsilon=1.0, analyst="alice")
        answer = db.query("SELECT COUNT(*) AS n FROM people", epsilon=0.05, analyst="bob")
    assert answer.derived_from == ()


@pytest.mark.parametrize("kind, scale, terms", [
    (NoiseKind.DISCRETE_LAPLACE, 8.0, 2),
    pytest.param(NoiseKind.DISCRETE_LAPLACE, 2.0, 10, marks=pytest.mark.slow),
    pytest.param(NoiseKind.DISCRETE_LAPLACE, 40.0, 8, marks=pytest.mark.slow),
    pytest.param(NoiseKind.LAPLACE, 8000.0, 8, marks=pytest.mark.slow),
])
def test_a_sum_of_released_cells_interval_covers_95_percent_of_opendp_noise(kind, scale, terms):
    """50,000 sums of OpenDP's own draws: the half-width covers 95% (within 0.5%, 5 standard
    errors; a discrete sum's at least 95%, and it is the least integer that does:
    one less covers under 95%)."""
    enable_features("contrib")
    draws = 50_000
    if kind == NoiseKind.DISCRETE_LAPLACE:
        space = vector_domain(atom_domain(T="i64")), l1_distance(T="i64")
        noise = make_laplace(*space, scale=scale)([0] * (draws * terms))
    else:
        space = vector_domain(atom_domain(T=float, nan=False)), l1_distance(T=float)
        noise = make_laplace(*space, scale=scale)([0.0] * (draws * terms))
    sums = np.abs(np.asarray(noise, dtype=float).reshape(draws, terms).sum(axis=1))
    width = sum_halfwidth(kind, scale, terms, 0.05)
    covered = np.mean(sums <= width)
    if kind == NoiseKind.DISCRETE_LAPLACE:
        assert covered > 0.95 - 0.005 and np.mean(sums <= width - 1) < 0.95 + 0.005
    else:
        assert abs(covered - 0.95) < 0.005


def test_the_candidates_are_found_by_the_index_not_a_scan(setup):
    from dpsql.engine.accounting import reuse_index

    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(FINE, epsilon=1.0)
    with contextlib.closing(sqlite3.connect(setup.ledger)) as conn:
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + reuse_index.SUMMABLE,
                                                 ["analyst", "base", 32])]
    assert plan[0].startswith("SEARCH s USING PRIMARY KEY (analyst=? AND base=?"), plan
    assert not any(step.startswith("SCAN") for step in plan), plan


def test_the_command_line_says_a_marginal_was_summed_from_a_released_table(capsys, setup):
    from tests.support import cli_paths, run_cli

    code, _, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", FINE)
    assert code == 0, err
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "0.1",
                             "SELECT sick, COUNT(*) AS n FROM people GROUP BY sick")
    assert code == 0, err
    assert "derived from answer 1; cost 0" in out and "summed over 4 released cells" in out
    assert _charges(setup.ledger) == 1
