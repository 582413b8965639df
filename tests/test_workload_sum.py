"""Workload mode with SUMs of clamped columns: each column's SUMs are measured by their own
strategy with the clamp's sensitivity, answered consistently by least squares, inside the one
charge; their intervals cover and explain's expected errors are the errors seen."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.workload import plan_workload

from tests.support import BASE_POLICY, make_people

LEAST_SQUARES = "least squares from the workload's strategy"
INCOME = [  # income is clamped to [0, 1000]; people has at most m = 2 rows per unit
    "SELECT state, SUM(income) AS total FROM people GROUP BY state",
    "SELECT sick, SUM(income) AS total FROM people GROUP BY sick",
    "SELECT state, sick, SUM(income) AS total FROM people GROUP BY state, sick",
]
MIXED = ["SELECT state, COUNT(*) AS n FROM people GROUP BY state", *INCOME,
         "SELECT SUM(age) AS years FROM people WHERE sick",  # age is clamped to [0, 100]
         "SELECT SUM(income * 2) AS twice FROM people"]


@pytest.fixture
def people(tmp_path_factory):
    folder = tmp_path_factory.mktemp("workload_sum")
    data = make_people(folder / "people.duckdb", units=1500, seed=5)
    (folder / "policy.yaml").write_text(yaml.safe_dump(BASE_POLICY))
    return folder, data


def _open(folder, data, name="ledger.sqlite"):
    return PrivateDatabase.connect(data, folder / "policy.yaml", folder / name, create=True)


def test_sums_and_counts_share_one_charge_and_each_column_is_consistent(people):
    folder, data = people
    with _open(folder, data) as db:
        explained = db.explain_many(MIXED, epsilon=0.9)
        assert db.budget().spent_dp == 0.0 and db.history() == ()
        result = db.query_many(MIXED, epsilon=0.9)
        (entry,) = db.history()
        assert entry.epsilon == 0.9 and db.budget().spent_dp == result.epsilon_dp
        assert result.epsilon_dp == explained.epsilon_dp and result.cost == explained.cost
    count, state, sick, both, years, twice = result.answers
    assert [a.answered for a in result.answers[:5]] == [LEAST_SQUARES] * 5
    assert twice.answered == "alone: it is not one COUNT(*) or one SUM of a column"
    # the split: 1/6 of epsilon_dp per statement; the income SUMs' strategy gets 3/6
    n, share = len(MIXED), result.epsilon_dp / len(MIXED)
    assert all(a.epsilon_dp == pytest.approx(share) for a in result.answers)
    groups = {a.aggregates[0].function.split(" of ")[1]: a.aggregates[0]
              for a in (count, state, years)}
    assert groups["COUNT(*)"].epsilon_dp == pytest.approx(share)
    assert groups['SUM("income")'].epsilon_dp == pytest.approx(3 * share)
    assert groups['SUM("age")'].epsilon_dp == pytest.approx(share)
    spent = sum(i.epsilon_dp for i in groups.values()) + sum(i.epsilon_dp for i in twice.aggregates)
    assert spent == pytest.approx(result.epsilon_dp, rel=1e-12)
    # sensitivity: the strategy's L1 norm times the grouped SUM's 2 m max(|L|, |U|)
    work = plan_workload(db._preparer, MIXED, 0.9, None, None)
    by_label = {g.label: g for g in work.groups}
    assert groups['SUM("income")'].sensitivity == pytest.approx(
        by_label['SUM("income")'].solved.l1 * 2 * 2 * 1000.0)
    assert groups['SUM("age")'].sensitivity == pytest.approx(
        by_label['SUM("age")'].solved.l1 * 2 * 2 * 100.0)
    assert f"3/{n} of epsilon_dp" in result.strategy and 'SUM("age")' in result.strategy
    cells = {(r.state, r.sick): r.total for r in both.df.itertuples()}
    for r in state.df.itertuples():  # one least-squares table per column: sums agree
        assert r.total == pytest.approx(cells[(r.state, False)] + cells[(r.state, True)])
    for r in sick.df.itertuples():
        assert r.total == pytest.approx(sum(v for (_, s), v in cells.items() if s == r.sick))
    assert all((a.ci95.iloc[:, -1] > 0).all() for a in result.answers)


def test_explain_shows_the_sums_expected_errors_against_asking_separately(people):
    folder, data = people
    with _open(folder, data) as db:
        explained = db.explain_many(MIXED, epsilon=0.9)
        for error, sql in zip(explained.errors, MIXED, strict=True):
            info = db.explain(sql, epsilon=0.9 / len(MIXED)).aggregates[0]
            r = math.exp(-1.0 / info.scale)  # the count alone is discrete Laplace
            assert error.rmse_separate == pytest.approx(
                math.sqrt(2 * r) / (1 - r) if info.mechanism == "discrete_laplace"
                else math.sqrt(2) * info.scale)
        errors = dict(zip(MIXED, explained.errors, strict=True))
        for sql in INCOME:  # three SUMs of income measured together beat a sixth each alone
            assert errors[sql].rmse_workload < errors[sql].rmse_separate
        assert 'SUM("income")' in explained.strategy and explained.cost == pytest.approx(0.9)
        labels = {name.rsplit(" ", 1)[0] for name, _ in explained.candidates}
        assert {"COUNT(*)", 'SUM("income") weighted', 'SUM("age")'} <= labels


@pytest.mark.slow
def test_the_intervals_of_workload_sums_cover_and_explain_predicts_their_error(people):
    """300 runs of the income SUMs (14 cells each): per-cell 95% coverage within
    [0.935, 0.965] (cells of one run share noise, so wider than the ±0.007 of 4,200
    independent cells), mean error within 0.1 RMSE of 0 and the pooled RMSE within 8% of
    explain's expected RMSE."""
    folder, data = people
    runs = 300
    with _open(folder, data) as db:
        explained = db.explain_many(INCOME, epsilon=1.0)
        answers = [db.query_many(INCOME, epsilon=1.0) for _ in range(runs)]
        # the exact values: the engine's own exact clamped sums of the bounded copy
        work = plan_workload(db._preparer, INCOME, 1.0, None, None)
        (group,) = work.groups
        exact = db._backend.run(group.contingency.sql, len(group.contingency.plan.group_by))
        (m,) = group.contingency.plan.measurements
        x = np.asarray(exact.values[m.name], dtype=float)
        expected = [member.matrix @ x for member in work.members if member.matrix is not None]
    covered = counted = 0
    squares = total = 0.0
    for result in answers:
        for answer, want in zip(result.answers, expected, strict=True):
            error = answer.df.iloc[:, -1].to_numpy(dtype=float) - want
            covered += int((np.abs(error) <= answer.ci95.iloc[:, -1].to_numpy()).sum())
            squares += float(np.square(error).sum())
            total += float(error.sum())
            counted += error.size
    assert counted == runs * 14
    assert 0.935 <= covered / counted <= 0.965
    promised = math.sqrt(sum(e.rmse_workload ** 2 * len(w)
                             for e, w in zip(explained.errors, expected, strict=True)) / counted
                         * runs)
    assert abs(total / counted) <= 0.1 * promised
    assert math.sqrt(squares / counted) == pytest.approx(promised, rel=0.08)


def test_a_workload_with_sums_asked_by_accuracy_meets_it_on_every_cell(people):
    folder, data = people
    statements = MIXED[:4]  # the counts by state and the income SUMs, whose cells are widest
    with _open(folder, data) as db:
        result = db.query_many(statements, accuracy=20_000.0)
        widest = max(float(a.ci95.iloc[:, -1].max()) for a in result.answers)
        assert widest <= 20_000.0
        assert db.budget().spent_dp == pytest.approx(result.epsilon_dp)
        # a little less epsilon misses it: the income SUM cells set the epsilon
        again = db.query_many(statements, epsilon=result.epsilon * 0.99)
        assert max(float(a.ci95.iloc[:, -1].max()) for a in again.answers) > 20_000.0


def test_one_unit_moves_a_sum_groups_measurement_by_at_most_its_sensitivity(people):
    """A unit's at most m = 2 rows, each clamped into [0, 1000], removed from some cells and
    added to others: the strategy's answers move by at most the group's sensitivity, and the
    worst move (m rows of the largest value) reaches it up to the strategy's L1 norm."""
    folder, data = people
    with _open(folder, data) as db:
        work = plan_workload(db._preparer, INCOME, 1.0, None, None)
    (group,) = work.groups
    cells = math.prod(group.solved.sizes)
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 50_000, cells)
    worst = 0.0
    for _ in range(2000):
        moved = x.copy()
        for sign in (-1.0, 1.0):
            rows = rng.integers(0, 3)
            np.add.at(moved, rng.integers(0, cells, rows), sign * rng.choice([0.0, 1000.0], rows)
                      * rng.uniform(0.5, 1.0, rows) ** rng.integers(0, 2))
        move = float(np.abs(group.solved.measure(moved) - group.solved.measure(x)).sum())
        assert move <= group.sensitivity * (1 + 1e-12)
        worst = max(worst, move)
    extreme = x.copy()
    extreme[0] -= 2 * 1000.0
    extreme[1] += 2 * 1000.0
    move = float(np.abs(group.solved.measure(extreme) - group.solved.measure(x)).sum())
    assert move == pytest.approx(group.sensitivity)  # the identity's bound is reached
    assert group.solved.name == "identity" and worst <= move
