"""The noise really has the declared scale: empirical variance against the theoretical one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dpsql.engine import aggregates
from dpsql.engine.noise import build_mechanism, release
from dpsql.engine.plan import Measurement
from dpsql.engine.policy import ColumnSpec

DRAWS = 40_000


def _variance(measurement: Measurement, sensitivity, epsilon: float, centre) -> tuple[float, float]:
    mech = build_mechanism(measurement, sensitivity, epsilon)
    draws = np.asarray(release(mech, [centre] * DRAWS), dtype=float) - centre
    return float(np.var(draws)), mech.scale


def test_discrete_laplace_count_noise_matches_its_scale():
    # Discrete Laplace with scale s: variance 2 e^(-1/s) / (1 - e^(-1/s))^2.
    var, scale = _variance(Measurement(aggregates.COUNT, None, "__m0"), 2, 0.5, 1000)
    q = math.exp(-1 / scale)
    expected = 2 * q / (1 - q) ** 2
    # The sample variance of 40k Laplace-like draws has relative s.e. about sqrt(5/40000) = 1.1%;
    # 6% is more than 5 standard errors.
    assert var == pytest.approx(expected, rel=0.06)
    assert scale == pytest.approx(4.0)


def test_laplace_sum_noise_matches_its_scale():
    income = ColumnSpec("income", "float", 0.0, 1000.0)
    var, scale = _variance(Measurement(aggregates.SUM, income, "__m0"), 1000.0, 2.0, 12345.5)
    assert scale == pytest.approx(500.0)
    assert var == pytest.approx(2 * scale**2, rel=0.06)


def test_a_wrong_scale_would_be_detected():
    """The same check rejects noise at 0.8x the declared scale (variance 0.64x)."""
    var, scale = _variance(Measurement(aggregates.COUNT, None, "__m0"), 1, 1.25, 0)  # scale 0.8
    q = math.exp(-1 / 1.0)
    declared = 2 * q / (1 - q) ** 2  # what scale 1.0 would give
    assert abs(var / declared - 1) > 0.06


def test_opendp_privacy_map_never_exceeds_the_share():
    income = ColumnSpec("income", "float", 0.0, 777.7)
    for epsilon in (0.013, 0.37, 1.1, 3.3):
        mech = build_mechanism(Measurement(aggregates.SUM, income, "__m0"), 2 * 777.7, epsilon)
        assert mech.opendp_measurement.map(2 * 777.7) <= epsilon


def test_opendp_measurements_are_built_once_per_query_and_epsilon_and_draw_fresh_noise(tmp_path,
                                                                                       monkeypatch):
    """A repeated query reuses its OpenDP measurements (their construction dominates a small
    query's fixed cost), and each answer still draws its own noise."""
    from dpsql.engine import prepare
    from dpsql.engine.database import PrivateDatabase

    from tests.support import create_ledger, make_people, write_policy

    built = []
    original = prepare.build_mechanism
    monkeypatch.setattr(prepare, "build_mechanism",
                        lambda *args: built.append(args) or original(*args))
    db = make_people(tmp_path / "p.duckdb")
    policy = write_policy(tmp_path / "p.yaml")
    with PrivateDatabase.connect(db, policy, create_ledger(tmp_path / "l.sqlite", policy), reuse=False) as conn:
        values = [conn.query("SELECT COUNT(*) AS n FROM people", epsilon=0.1).df["n"][0]
                  for _ in range(40)]
        assert len(built) == 1
        conn.query("SELECT COUNT(*) AS n FROM people", epsilon=0.5)
        assert len(built) == 2
    # Discrete Laplace at scale 10 puts at most 5% on any value: 40 draws with fewer than 15
    # distinct values would be a miracle (or the same noise reused).
    assert len(set(values)) >= 15
