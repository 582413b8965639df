"""The histogram behind MEDIAN, QUANTILE_CONT, MIN and MAX is computed in one pass (one COUNT
grouped by each row's bin), and its counts are exactly those of the definition: bin i holds the
clamped values v with edge_i <= v < edge_i+1 (the first bin has no lower test, the last no upper
one; NULL in none, NaN clamped to the upper bound), for values at, just beside and outside
every edge, grouped or not, float or int operands, any number of bins, and edges merged by rounding."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest
from dpsql.engine.aggregates.quantile import grid, within_one
from dpsql.engine.backends.duckdb_execute import bound_units
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select

BOUNDS = (-3.0, 7.3)


def _policy(bins: int, bounds: tuple[float, float] = BOUNDS) -> dict:
    return {"budget": {"epsilon": 10.0}, "dependence": {"k": 1, "eta": 0.0},
            "limits": {"quantile_bins": bins, "max_noisy_values": 100000},
            "tables": {"t": {"columns": {
                "g": {"type": "str", "domain": ["a", "b", "c"]},
                "x": {"type": "float", "lower": bounds[0], "upper": bounds[1]},
                "n": {"type": "int", "lower": -4, "upper": 20}}}}}


def _values(edges: np.ndarray) -> list[float | None]:
    """Every edge, its two neighbouring doubles, the bounds' outsides, NaN, infinities, NULL."""
    near = [v for e in edges for v in (math.nextafter(e, -math.inf), float(e),
                                       math.nextafter(e, math.inf))]
    return [*near, -1e300, 1e300, math.inf, -math.inf, math.nan, None, 0.0, -0.0]


def _run(bins: int, sql: str, rows: list[tuple],
         bounds: tuple[float, float] = BOUNDS) -> tuple[list[tuple], object]:
    policy = parse_policy(_policy(bins, bounds))
    plan = build_plan(parse_select(sql), policy, sql)
    with duckdb.connect() as conn:
        conn.execute("CREATE TABLE t (g VARCHAR, x DOUBLE, n BIGINT)")
        if rows:
            conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        bound_units(conn, plan.table, "key")  # the table's own copy: every row
        return conn.execute(rewrite(plan).sql("duckdb")).fetchall(), plan


def _expected(values: list, cut, lower: float, upper: float) -> list[int]:
    counts = [0] * cut.bins
    for v in values:
        if v is None:
            continue
        clamped = upper if math.isnan(v) else min(max(v, lower), upper)
        counts[int(np.searchsorted(cut.edges[1:-1], clamped, side="right"))] += 1
    return counts


@pytest.mark.parametrize("bins", [2, 7, 64, 100])
def test_float_histogram_counts_match_the_definition_at_every_edge(bins):
    plan_cut = grid(_operand("x", bins), bins)
    values = _values(plan_cut.edges)
    groups = ["a", "b", "c", None]
    rows = [(groups[i % 4], v, 0) for i, v in enumerate(values)]
    answer, _ = _run(bins, "SELECT g, MEDIAN(x) FROM t GROUP BY g", rows)
    for key, *counts in answer:
        mine = [v for g, v, _ in rows if g == key]
        assert counts == _expected(mine, plan_cut, *BOUNDS), key
    (whole,), _ = _run(bins, "SELECT MIN(x) AS lo FROM t", rows)
    assert list(whole) == _expected(values, plan_cut, *BOUNDS)


@pytest.mark.parametrize("bins", [3, 25, 64])
def test_int_histogram_counts_match_the_definition(bins):
    cut = grid(_operand("n", bins), bins)
    values = list(range(-10, 30))
    rows = [("a", 0.0, v) for v in values] + [("b", 0.0, None)]
    (whole,), _ = _run(bins, "SELECT MAX(n) FROM t", rows)
    assert list(whole) == _expected([float(v) for v in values], cut, -4.0, 20.0)


def test_a_histogram_beside_other_aggregates_and_an_empty_table():
    rows = [("a", 1.0, 3), ("a", 2.0, 5), ("c", None, 7)]
    answer, plan = _run(8, "SELECT g, COUNT(*) AS k, MEDIAN(x) AS m, SUM(n) AS s, "
                           "QUANTILE_CONT(n, 0.2) AS q FROM t GROUP BY g", rows)
    names = [cell for m in plan.measurements for cell in m.cells]
    by_group = {row[0]: dict(zip(names, row[1:], strict=True)) for row in answer}
    assert [m.label for m in plan.measurements][0] == "COUNT(*)"
    assert by_group["a"][names[0]] == 2 and by_group["b"][names[0]] == 0
    assert by_group["c"][names[0]] == 1
    assert sum(v for k, v in by_group["a"].items() if k.startswith(plan.measurements[1].name)) == 2
    assert all(v == 0 for v in by_group["b"].values())
    empty, _ = _run(8, "SELECT MEDIAN(x) AS m, COUNT(*) AS k FROM t", [])
    assert empty == [tuple([0] * 9)]


def _operand(column: str, bins: int, bounds: tuple[float, float] = BOUNDS):
    sql = f"SELECT MEDIAN({column}) FROM t"
    plan = build_plan(parse_select(sql), parse_policy(_policy(bins, bounds)), sql)
    (m,) = plan.measurements
    return m.operand


def test_edges_that_rounding_merges_are_still_binned_by_the_definition():
    """Bounds far from zero with bins narrower than the doubles' spacing there: the arithmetic
    guess is off by more than one bin, and the binary search over the edges places the value."""
    bounds = (1e15 - 1.0, 1e15)
    cut = grid(_operand("x", 64, bounds), 64)
    assert len(set(cut.edges)) < len(cut.edges), "some edges are merged by rounding"
    values = _values(cut.edges) + [1e15 - step / 8 for step in range(40)]
    rows = [("a", v, 0) for v in values]
    (whole,), _ = _run(64, "SELECT MEDIAN(x) FROM t", rows, bounds)
    assert list(whole) == _expected(values, cut, *bounds)


@pytest.mark.parametrize("bounds", [(-3.0, 7.3), (1e9, 1e9 + 1.0), (-1e-300, 1e-300),
                                    (0.1, 0.7), (1e15 - 1.0, 1e15)])
def test_the_branch_free_bin_is_used_only_where_the_guess_is_within_one_bin(bounds):
    """Grids whose arithmetic guess is at most one bin off are binned by one comparison with
    each edge of the guessed bin (no search in the SQL), others by the search; both give the
    counts of the definition at, beside and between every edge."""
    cut = grid(_operand("x", 64, bounds), 64)
    near = within_one(cut.lower, cut.width, cut.bins)
    assert near == (len(set(cut.edges)) == len(cut.edges) and bounds[0] != 1e15 - 1.0)
    values = _values(cut.edges) + list(np.linspace(*bounds, 301))
    rows = [("a", v, 0) for v in values]
    sql = "SELECT MEDIAN(x) FROM t"
    (whole,), plan = _run(64, sql, rows, bounds)
    assert list(whole) == _expected(values, cut, *bounds)
    searched = rewrite(plan).sql("duckdb").count('_row" < CAST(') >= 63  # a test per edge
    assert searched != near


@pytest.mark.parametrize("bounds", [(1 / 3, 2 / 3), (-0.0, 1e-3), (5e-324, 1e-300),
                                    (-7.000000000000001, 1e12 + 0.1), (123456789.123, 123456789.9),
                                    (0.30000000000000004, 0.7), (134.36424411240122, 847.4337369372327),
                                    (-255.06044601142084, 495.435087091941)])
def test_values_at_and_below_the_lower_bound_are_in_the_first_bin(bounds):
    """The guess is capped only at the top: a clamped value is never below the first edge, for
    bounds whose SQL literals and grid edges are written differently (decimals of up to 17
    digits, which DuckDB reads as DECIMAL and converts to the same double; subnormals; a negative
    zero), so everything at or below the lower bound is counted in bin 0."""
    cut = grid(_operand("x", 64, bounds), 64)
    below = [v for v in (bounds[0], math.nextafter(bounds[0], -math.inf), bounds[0] - 1.0,
                         -1e308, -math.inf, -0.0) if v <= bounds[0]]
    rows = [("a", v, 0) for v in below + [None, math.nan, bounds[1]]]
    (whole,), _ = _run(64, "SELECT MEDIAN(x) FROM t", rows, bounds)
    assert list(whole) == _expected([v for _, v, _ in rows], cut, *bounds)
    assert whole[0] == len(below) and sum(whole) == len(below) + 2
