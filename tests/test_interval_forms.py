"""Every noisy cell's interval as users see it: an AVG's that never collapses to a point, an
expression's over the aggregates it computes from, and each clamped to what the statistic can
be."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.aggregates import AVG
from dpsql.engine.aggregates.base import Operand
from dpsql.engine.display import number
from dpsql.engine.result import QueryResult

from tests.support import cli_paths, run_cli


@dataclass(frozen=True)
class _Noise:
    """A measurement's noise with a fixed 95%-style half-width, whatever alpha."""

    width: float

    def accuracy(self, alpha: float) -> float:
        return self.width

    def sum_accuracy(self, terms: int, alpha: float) -> float:
        return self.width * terms


def test_an_avg_whose_noisy_sum_is_below_every_possible_sum_keeps_its_width():
    """Incomes in [0, 1000], 100 rows counted, a noisy SUM of -5,000 with a SUM interval of
    ±2,000: the mean is clamped to 0, and its interval must still be as wide as the box the SUM
    and COUNT intervals span (about 40), not 0 ± 0."""
    operand = Operand("income", "float", None, (), 0.0, 1000.0)  # type: ignore[arg-type]
    frame = pd.DataFrame({"s": [-5000.0, 5000.0, 1.2e6], "c": [100.0, 100.0, 100.0]})
    noise = {"s": _Noise(2000.0), "c": _Noise(5.0)}
    halfwidths = AVG.halfwidths(("s", "c"), operand, frame, noise, 0.05)
    box = (-5000 + 2000) / 95 - (-5000 - 2000) / 105
    assert halfwidths[0] >= box - 1e-9
    # Above every possible SUM: as wide as the box, up to the whole range [0, 1000].
    assert halfwidths[2] == min((1.2e6 + 2000) / 95 - (1.2e6 - 2000) / 105, 1000.0)
    # A box inside the bounds is unchanged: from the clamped mean to its far corner.
    assert np.isclose(halfwidths[1], max(50 - 3000 / 105, 7000 / 95 - 50))


def test_a_noisy_value_under_arithmetic_or_case_gets_its_interval(setup):
    """`a + b·AGG` has |b| times the aggregate's half-width; `1 + AVG(age)` the AVG's own; a
    CASE surely taking one branch that branch's; none is printed bare."""
    sql = ("SELECT COUNT(*) AS n, COUNT(*) * 5 AS n5, 3 - COUNT(*) / 2 AS m, AVG(age) AS a, "
           "1 + AVG(age) AS a1, CASE WHEN SUM(age) > 90 THEN 90 ELSE SUM(age) END AS capped, "
           "ROUND(SUM(age) / 10) AS r FROM people")
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query(sql, epsilon=1)
    ci = result.ci95.iloc[0]
    assert ci["n5"] == pytest.approx(5 * ci["n"]) and ci["m"] == pytest.approx(ci["n"] / 2)
    assert ci["a1"] == pytest.approx(ci["a"])
    # Hundreds of rows aged 0 to 100: the noisy SUM is surely above 90, so the value is 90.
    assert result.df["capped"][0] == 90 and ci["capped"] == 0
    assert ci["r"] > 0 and not result.ci95.iloc[0].isna().any()
    assert result.no_interval == ()


def test_a_noisy_value_without_an_interval_says_so_in_every_format(setup, capsys):
    sql = "SELECT state, COUNT(*) > 100 AS big, COUNT(*) AS n FROM people GROUP BY state"
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", sql)
    assert code == 0, err
    assert out.count("(no interval)") == 4 and "big: no interval: a condition on noisy values" in out
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--format",
                             "json", sql)
    answer = json.loads(out)
    assert [row[1] for row in answer["ci95"]] == [None] * 4
    assert answer["no_interval"] == {"big": "no interval: a condition on noisy values is true or "
                                            "false, not a number"}
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--format",
                             "csv", sql)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [row["big_ci95"] for row in rows] == ["no interval"] * 4
    assert all(float(row["n_ci95"]) > 0 for row in rows)


def test_an_interval_is_cut_to_what_the_statistic_can_be(setup):
    """An empty group's count is shown within [0, ...], never below 0; a MIN at ε = 0.05 (its
    interval the whole column range [0, 100]) says there were too few rows."""
    sql = "SELECT state, COUNT(*) AS n, MIN(age) AS youngest FROM people WHERE age < 0 GROUP BY state"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query(sql, epsilon=0.05)
    assert result.possible == (None, (0.0, math.inf), (0.0, 100.0))
    for row, bounds, shown in zip(result.df.itertuples(index=False), result.bounds(result.ci95),
                                  result.cells(result.ci95), strict=True):
        assert bounds[1][0] >= 0 and bounds[2] == [0.0, 100.0]
        assert shown[2].endswith("[0 to 100] (too few rows)")
        if row.n - result.ci95["n"][0] < 0:
            assert f"[0 to {number(row.n + result.ci95['n'][0])}]" in shown[1] and "±" not in shown[1]
    assert json.loads(json.dumps(result.to_dict()))["possible"] == [None, [0.0, None], [0.0, 100.0]]
    again = QueryResult.from_dict(result.to_dict())
    assert again.possible == result.possible and again.cells(again.ci95) == result.cells(result.ci95)


def test_explain_gives_an_avg_its_own_expected_error_not_its_sums(setup, capsys):
    """explain's SUM of an AVG is labelled a part of it, and the AVG's expected error is its
    own: the answer's half-width over the group's rows and mean, within 10%."""
    sql = "SELECT AVG(income) AS mean_income, COUNT(*) AS n FROM people"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        explained = db.explain(sql, epsilon=5)
        result = db.query(sql, epsilon=5)
    mean, n = explained.errors
    assert (mean.column, mean.function, n.column, n.halfwidth) == (
        "mean_income", "AVG(income)", "n", result.ci95["n"][0])
    rows = result.df["n"][0]  # COUNT(*) = COUNT(income) here: income is never NULL
    expected = mean.at(rows, result.df["mean_income"][0])
    assert expected == pytest.approx(result.ci95["mean_income"][0], rel=0.1)
    total = next(a for a in explained.aggregates if a.function == "SUM(income)")
    assert total.ci95_halfwidth > 10 * expected and explained.owner(total) == "part of mean_income"
    code, out, err = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "5", sql)
    text = " ".join(out.split())
    assert code == 0 and "mean_income = AVG(income): expected 95% error ±(" in text
    assert "- mean_income: SUM(income)" not in text and "- part of mean_income: SUM(income)" in text
    assert "mean_income = AVG(income)" in explained._repr_html_()


def test_the_notebook_view_shows_the_largest_epsilon_still_askable(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query("SELECT COUNT(*) AS n FROM people", epsilon=1)
    page = result._repr_html_()
    assert f"largest epsilon this query can still ask: {number(result.largest_epsilon)}" in page
    assert "remaining" not in page
