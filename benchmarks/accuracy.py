"""Accuracy at the same guarantee: RMSE of COUNT and SUM under group, theorem2 and tight calibration.

Noise comes from the engine's own path (plan, sensitivity, OpenDP mechanism, release); the
empirical RMSE over many draws is set beside the analytic one and divided by group privacy's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from dpsql.calibration import CalibrationError, DependenceModel, calibrate
from dpsql.engine.noise import Mechanism, build_mechanism, release
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select

from benchmarks.workload import policy_dict

EPSILONS = (0.5, 1.0, 2.0)
KS = (2, 5, 10, 50)
ETAS = (0.5, 0.1, 0.01, 0.001)
MODES = ("group", "theorem2", "tight")
QUERIES = {"COUNT": ("SELECT COUNT(*) FROM people", 10_000),
           "SUM": ("SELECT SUM(income) FROM people", 500_000_000.0)}
"""Aggregate -> (SQL on the row-level benchmark table, the exact value the noise is added to)."""


@dataclass(frozen=True)
class AccuracyRow:
    """One (epsilon, k, eta, aggregate, mode): RMSE measured and predicted, and vs group."""

    epsilon: float
    k: int
    eta: float
    aggregate: str
    mode: str
    epsilon_dp: float | None
    rmse: float | None
    analytic_rmse: float | None
    ratio_to_group: float | None
    analytic_ratio_to_group: float | None


def analytic_rmse(mechanism: Mechanism) -> float:
    """Laplace: sqrt(2)·scale; discrete Laplace: sqrt(2a)/(1 - a) with a = exp(-1/scale)."""
    if mechanism.mechanism == "laplace":
        return math.sqrt(2.0) * mechanism.scale
    a = math.exp(-1.0 / mechanism.scale)
    return math.sqrt(2.0 * a) / (1.0 - a)


def _cell(epsilon: float, model: DependenceModel, mode: str, aggregate: str,
          draws: int) -> tuple[float | None, float | None, float | None]:
    """(epsilon_dp, empirical RMSE, analytic RMSE), or Nones where the mode cannot certify."""
    try:
        eps_dp = calibrate(epsilon, model, mode).epsilon_dp
    except CalibrationError:
        return None, None, None
    sql, exact = QUERIES[aggregate]
    plan = build_plan(parse_select(sql), parse_policy(policy_dict("row_level")), sql)
    measurement = plan.measurements[0]
    mechanism = build_mechanism(measurement, sensitivity(measurement, plan), eps_dp)
    noisy = np.asarray(release(mechanism, [exact] * draws), dtype=float)
    rmse = float(np.sqrt(np.mean((noisy - exact) ** 2)))
    return eps_dp, rmse, analytic_rmse(mechanism)


def run(draws: int) -> list[dict]:
    """The whole grid; ratios are to group privacy at the same (epsilon, k, eta, aggregate)."""
    rows = []
    for epsilon in EPSILONS:
        for k in KS:
            for eta in ETAS:
                model = DependenceModel(k, eta)
                for aggregate in QUERIES:
                    cells = {mode: _cell(epsilon, model, mode, aggregate, draws) for mode in MODES}
                    _, group_rmse, group_analytic = cells["group"]
                    for mode, (eps_dp, rmse, analytic) in cells.items():
                        rows.append(asdict(AccuracyRow(
                            epsilon, k, eta, aggregate, mode, eps_dp, rmse, analytic,
                            None if rmse is None else rmse / group_rmse,
                            None if analytic is None else analytic / group_analytic,
                        )))
    return rows
