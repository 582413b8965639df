"""Answers for free from several released ones: a query whose every cell is an exact disjoint
union of released cells of one or more of the analyst's answers (the same table, WHERE but for
`key IN (...)` filters, mode and policy) is their sum, at cost 0, naming every answer used, with
the exact 95% interval of a sum of independent noises at their scales; anything else is charged
(docs/theory.md §22)."""

from __future__ import annotations

import contextlib
import sqlite3

import numpy as np
import pytest
from dpsql.engine import EngineHalted, PrivateDatabase
from dpsql.engine.backends import DataFailure
from dpsql.engine.noise import NoiseKind
from dpsql.engine.reuse_intervals import mixed_sum_halfwidth
from opendp.domains import atom_domain, vector_domain
from opendp.measurements import make_laplace
from opendp.metrics import l1_distance
from opendp.mod import enable_features

from tests.support import cli_paths, run_cli

CA = "SELECT COUNT(*) AS n FROM people WHERE state = 'CA'"
NY = "SELECT COUNT(*) AS n FROM people WHERE state = 'NY'"
BOTH = "SELECT COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY')"


def _charges(ledger) -> int:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


def test_a_total_of_kept_groups_is_the_sum_of_two_released_answers(setup, capsys):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        ca, ny = db.query(CA, epsilon=1.0), db.query(NY, epsilon=1.0)
        spent = db.budget().spent_dp
        explained = db.explain(BOTH, epsilon=0.5)
        both = db.query(BOTH, epsilon=0.5)
        assert db.budget().spent_dp == spent
    assert explained.cost == 0.0 and explained.derived_from == (ca.id, ny.id)
    assert both.cost == 0.0 and both.derived_from == (ca.id, ny.id) and both.id is None
    assert both.df["n"][0] == ca.df["n"][0] + ny.df["n"][0]
    scale = ca.aggregates[0].scale
    width = mixed_sum_halfwidth(NoiseKind.DISCRETE_LAPLACE, ((scale, 2),), 0.05)
    assert both.ci95["n"][0] == width and width > ca.ci95["n"][0], "the sum's own interval"
    assert "answers 1, 2" in both.aggregates[0].function and _charges(setup.ledger) == 2
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "0.5", BOTH)
    assert code == 0, err
    assert "derived from answers 1, 2; cost 0" in out and "±" in out


def test_cells_of_a_table_and_of_another_answer_add_up(setup):
    """sick counts over CA, NY and TX: the four CA/NY cells of a table keeping those two
    states, and the two cells of a TX answer; at different levels, so two scales."""
    table = ("SELECT state, sick, COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY') "
             "GROUP BY state, sick")
    texas = "SELECT sick, COUNT(*) AS n FROM people WHERE state = 'TX' GROUP BY sick"
    asked = ("SELECT COUNT(*) AS n, sick FROM people WHERE state IN ('TX', 'NY', 'CA') "
             "GROUP BY sick")
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        fine, tx = db.query(table, epsilon=1.0), db.query(texas, epsilon=2.0)
        summed = db.query(asked, epsilon=0.2)
    assert summed.derived_from == (fine.id, tx.id) and summed.cost == 0.0
    assert list(summed.df.columns) == ["n", "sick"] and list(summed.df["sick"]) == [False, True]
    for sick in (False, True):
        expected = fine.df[fine.df["sick"] == sick]["n"].sum() + tx.df[tx.df["sick"] == sick]["n"].sum()
        assert summed.df[summed.df["sick"] == sick]["n"].iloc[0] == expected
    terms = ((fine.aggregates[0].scale, 2), (tx.aggregates[0].scale, 1))
    assert terms[0][0] != terms[1][0]
    assert list(summed.ci95["n"]) == [mixed_sum_halfwidth(NoiseKind.DISCRETE_LAPLACE, terms, 0.05)] * 2


@pytest.mark.parametrize("released, asked", [
    ([CA, NY], "SELECT COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY', 'WA')"),  # WA missing
    (["SELECT COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY')",  # NY twice: no partition
      "SELECT COUNT(*) AS n FROM people WHERE state IN ('NY', 'TX')"],
     "SELECT COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY', 'TX')"),
    ([CA, NY], "SELECT COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY') AND sick"),  # WHERE
    ([CA, "SELECT SUM(age) AS n FROM people WHERE state = 'NY'"], BOTH),  # another statistic
    ([CA, NY], "SELECT COUNT(*) AS n FROM people"),  # TX, WA and keys outside the domain
])
def test_what_is_no_exact_sum_of_released_cells_is_charged(setup, released, asked):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        for sql in released:
            db.query(sql, epsilon=1.0)
        answer = db.query(asked, epsilon=0.1)
    assert answer.derived_from == () and answer.cost > 0
    assert _charges(setup.ledger) == len(released) + 1


def test_a_sum_noisier_than_a_fresh_answer_is_charged(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(CA, epsilon=0.5)
        db.query(NY, epsilon=0.5)
        assert db.explain(BOTH, epsilon=0.3).derived_from == (1, 2)
        assert db.query(BOTH, epsilon=0.5).derived_from == (), "two noises are wider than one"
    assert _charges(setup.ledger) == 3


def test_a_derivation_reads_released_answers_only(setup):
    """Once released, the data may fail or vanish: the derived answer is the released values
    summed, whatever the data now holds (a query reaching the data would halt here)."""
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        released = [db.query(CA, epsilon=1.0), db.query(NY, epsilon=1.0)]
        stored = [e.answer["rows"][0][0] for e in db.history()]

        def fails(*args):
            raise DataFailure("the data was read")

        db._backend.run = fails
        both = db.query(BOTH, epsilon=0.5)
        assert both.df["n"][0] == sum(stored) == sum(r.df["n"][0] for r in released)
        with pytest.raises(EngineHalted):  # and a query that is no sum does read it
            db.query("SELECT COUNT(*) AS n FROM people WHERE state = 'WA'", epsilon=0.5)


def test_another_analysts_answers_are_never_summed(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(CA, epsilon=1.0, analyst="ana")
        db.query(NY, epsilon=1.0, analyst="bob")
        assert db.query(BOTH, epsilon=0.5, analyst="bob").derived_from == ()


@pytest.mark.parametrize("kind, terms", [
    (NoiseKind.DISCRETE_LAPLACE, ((2.0, 2), (5.0, 1))),
    (NoiseKind.LAPLACE, ((1000.0, 3), (3000.0, 1))),
    pytest.param(NoiseKind.DISCRETE_LAPLACE, ((1.5, 6), (20.0, 2), (40.0, 1)),
                 marks=pytest.mark.slow),
])
def test_the_interval_of_a_sum_at_several_scales_covers_95_percent_of_opendp_noise(kind, terms):
    """50,000 sums of OpenDP's own draws at the scales given: the half-width covers 95% (within
    0.5%, 5 standard errors); a discrete sum's covers at least 95% and is the least integer
    that does (one less covers under 95%)."""
    enable_features("contrib")
    draws = 50_000
    total = np.zeros(draws)
    for scale, count in terms:
        if kind == NoiseKind.DISCRETE_LAPLACE:
            space = vector_domain(atom_domain(T="i64")), l1_distance(T="i64")
            noise = make_laplace(*space, scale=scale)([0] * (draws * count))
        else:
            space = vector_domain(atom_domain(T=float, nan=False)), l1_distance(T=float)
            noise = make_laplace(*space, scale=scale)([0.0] * (draws * count))
        total += np.asarray(noise, dtype=float).reshape(draws, count).sum(axis=1)
    width = mixed_sum_halfwidth(kind, terms, 0.05)
    covered = np.mean(np.abs(total) <= width)
    if kind == NoiseKind.DISCRETE_LAPLACE:
        assert covered > 0.95 - 0.005 and np.mean(np.abs(total) <= width - 1) < 0.95 + 0.005
    else:
        assert abs(covered - 0.95) < 0.005
