"""The Gaussian household model declared in a policy (docs/theory.md §21): parsed and refused
field by field, covering a plain SUM or AVG of its column over the whole table and nothing else,
recorded in the ledger's binding and charges, and its calibrations audited on the grid."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml
from dpsql.calibration import DependenceModel
from dpsql.calibration.declared import DeclaredModel, models_from_json
from dpsql.calibration.model_gaussian import (
    GaussianHousehold,
    gaussian_eta,
    gaussian_level,
    numerical_level,
)
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting.ledger_binding import binding_of
from dpsql.engine.errors import InputError, PolicyError
from dpsql.engine.policy_yaml import parse_policy
from scipy.stats import norm

from tests.support import create_ledger

GAUSSIAN = {"kind": "gaussian", "table": "families", "column": "height", "max_size": 3,
            "rho": 0.28, "mean": 170, "sd": 9}
"""Galton-like heights in cm: households of up to 3, correlation 0.28, on [140, 200]."""

TOLERANCE = 1e-3
"""How far (times eps_dp) the grid's level may sit above epsilon: the grid moves each value by
at most half a cell (tests/test_model_gaussian.py measures the same tolerance)."""


def policy(models: list | None = None, eta: float = 0.95, budget: float = 5.0) -> dict:
    """A families table (the model implies eta at most 0.821 for height; 0.95 is declared)."""
    return {"budget": {"epsilon": budget},
            "dependence": {"k": 3, "eta": eta, "mode": "model",
                           "models": [GAUSSIAN] if models is None else models},
            "tables": {"families": {"dependence_group": "family_id", "columns": {
                "family_id": {"type": "int"},
                "sex": {"type": "bool"},
                "age": {"type": "int", "lower": 0, "upper": 100},
                "weight": {"type": "float"},
                "height": {"type": "float", "lower": 140, "upper": 200}}}}}


def write_families(path: Path, households: int = 2000, seed: int = 5) -> Path:
    """Households of 1-3 members with equicorrelated Gaussian heights (rho 0.28), clamped."""
    rng = np.random.default_rng(seed)
    family, sex, height = [], [], []
    for f in range(households):
        n = int(rng.integers(1, 4))
        latent = np.sqrt(0.28) * rng.standard_normal() + np.sqrt(0.72) * rng.standard_normal(n)
        family += [f] * n
        sex += (rng.random(n) < 0.5).tolist()
        height += np.clip(170 + 9 * latent, 140, 200).tolist()
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE families AS SELECT unnest($1)::INT AS family_id, "
                     "unnest($2) AS sex, 40 AS age, 70.0 AS weight, unnest($3)::DOUBLE AS height",
                     [family, sex, height])
    return path


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy()))
    write_families(tmp_path / "families.duckdb")
    create_ledger(tmp_path / "ledger.sqlite", tmp_path / "policy.yaml")
    return tmp_path


def connect(root: Path) -> PrivateDatabase:
    return PrivateDatabase.connect(root / "families.duckdb", root / "policy.yaml",
                                   root / "ledger.sqlite")


def test_the_policy_declares_the_model_with_the_columns_bounds() -> None:
    (model,) = parse_policy(policy()).models
    assert model.gaussian == GaussianHousehold(3, 0.28, 0.28, 170.0, 9.0, 140.0, 200.0)
    assert model.columns == frozenset({"families.height"})
    assert "Gaussian household model of families.height" in model.describe()
    ranged = parse_policy(policy([dict(GAUSSIAN, rho=[0.1, 0.3], cap=2)])).models[0]
    assert (ranged.gaussian.rho_low, ranged.gaussian.rho_high, ranged.cap) == (0.1, 0.3, 2.0)
    assert models_from_json(json.dumps([model.record()])) == (model,)


@pytest.mark.parametrize("change,message", [
    ({"max_size": 0}, r"\.max_size: expected a whole number from 1"),
    ({"max_size": 2.5}, r"\.max_size: expected a whole number"),
    ({"rho": 1.0}, r"\.rho: expected a number in \[0, 1\)"),
    ({"rho": [0.4, 0.2]}, r"\.rho: expected .*low <= high"),
    ({"rho": [0.1, 0.2, 0.3]}, r"\.rho: expected a number or a range"),
    ({"rho": "high"}, r"\.rho: expected a finite number"),
    ({"sd": 0}, r"\.sd: expected a number > 0"),
    ({"mean": None}, r"\.mean: expected a finite number"),
    ({"column": "age"}, r"\.column: a gaussian model needs a float column with lower and upper"),
    ({"column": "weight"}, r"\.column: a gaussian model needs a float column"),
    ({"column": "shoe"}, r"\.column: unknown column 'shoe'"),
    ({"table": "people"}, r"\.table: unknown table 'people'"),
    ({"household": "family_id"}, r"\.household: unknown field"),
    ({"sd": None}, r"\.sd: expected a finite number"),
])
def test_every_field_is_checked_with_a_one_line_error(change, message) -> None:
    with pytest.raises(PolicyError, match=r"dependence\.models\[0\]" + message) as refused:
        parse_policy(policy([dict(GAUSSIAN, **change)]))
    assert "\n" not in str(refused.value)


def test_a_missing_field_and_a_small_declared_eta_are_refused() -> None:
    with pytest.raises(PolicyError, match=r"models\[0\]\.sd: required field is missing"):
        parse_policy(policy([{k: v for k, v in GAUSSIAN.items() if k != "sd"}]))
    implied = gaussian_eta(GaussianHousehold(3, 0.28, 0.28, 170.0, 9.0, 140.0, 200.0))
    assert 0.8 < implied < 0.85
    with pytest.raises(PolicyError, match=r"implies k=3 and eta=0\.82.*declares k=3 and eta=0\.5"):
        parse_policy(policy(eta=0.5))


def test_the_eta_bound_holds_against_the_mixtures_computed_on_a_grid() -> None:
    """The housemates' laws given the two atoms differ only along their sufficient statistic,
    N(c rho W, 1) mixed over each latent tail (unclamped: clamping only lowers the TV); that TV
    computed by quadrature is below `gaussian_eta` for several models."""
    for m, rho, lo, hi in ((2, 0.1, -1.0, 1.0), (3, 0.28, -3.33, 3.33), (5, 0.6, -0.5, 2.0)):
        model = GaussianHousehold(m, rho, rho, 0.0, 1.0, lo, hi)
        c = np.sqrt((m - 1) / ((1 - rho) * (1 + (m - 1) * rho)))
        x = np.linspace(-30, 30, 6001)
        w_up = np.linspace(hi, hi + 12, 1201)
        w_down = np.linspace(lo - 12, lo, 1201)
        up = np.trapezoid(norm.pdf(w_up)[:, None] * norm.pdf(x[None, :] - c * rho * w_up[:, None]),
                          w_up, axis=0) / norm.sf(hi)
        down = np.trapezoid(norm.pdf(w_down)[:, None]
                            * norm.pdf(x[None, :] - c * rho * w_down[:, None]), w_down,
                            axis=0) / norm.cdf(lo)
        tv = 0.5 * np.trapezoid(np.abs(up - down), x)
        assert tv <= gaussian_eta(model) + 1e-6, (m, rho, tv, gaussian_eta(model))


def test_a_whole_table_sum_gets_less_noise_than_the_base_map_and_explain_names_the_model(
        root) -> None:
    with connect(root) as db:
        model = db.explain("SELECT SUM(height) FROM families", epsilon=1.0)
        base = db.explain("SELECT SUM(height) FROM families", epsilon=1.0, mode="tight")
        assert model.mode == "model" and base.mode == "tight"
        assert "Gaussian household model of families.height" in model.model
        assert "Gaussian household model" in model.justification
        (scale,), (base_scale,) = ([a.scale for a in e.aggregates] for e in (model, base))
        assert scale < base_scale / 5  # 96.2 against 585.3 (s = 200, theory.md §21)
        assert model.tight_epsilon_dp == pytest.approx(base.epsilon_dp)
        assert [check.change for check in model.model_checks] == ["rho 0.33", "rho 0.38"]
        average = db.explain("SELECT AVG(height) FROM families", epsilon=1.0)
        assert average.mode == "model" and average.epsilon_dp == pytest.approx(model.epsilon_dp)
        both = db.explain("SELECT SUM(height), COUNT(*) FROM families", epsilon=1.0)
        assert both.mode == "model"


@pytest.mark.parametrize("sql", [
    "SELECT SUM(height) FROM families WHERE height > 170",
    "SELECT SUM(height) FROM families WHERE sex",
    "SELECT sex, SUM(height) FROM families GROUP BY sex",
    "SELECT COUNT(*) FROM families WHERE height > 170",
    "SELECT SUM(height * 2) FROM families",
    "SELECT SUM(height) FROM (SELECT * FROM families WHERE height < 190) AS t",
])
def test_anything_else_falls_back_to_the_base_map(root, sql) -> None:
    with connect(root) as db:
        fallback = db.explain(sql, epsilon=1.0)
        assert fallback.mode == "tight" and "no declared model" in fallback.justification
        assert "families.height" in fallback.justification and fallback.model == ""
        with pytest.raises(InputError, match="mode model cannot calibrate this query"):
            db.explain(sql, epsilon=1.0, mode="model")


def test_the_charge_and_the_binding_record_the_model_and_another_answer_reprices(root) -> None:
    with connect(root) as db:
        first = db.query("SELECT SUM(height) FROM families", epsilon=1.0)
        assert first.mode == "model" and 1.0 - 1e-5 < first.level_after <= 1.0
        second = db.query("SELECT AVG(height) FROM families", epsilon=0.5)
        level = db.budget().spent_ip
        total = first.epsilon_dp + second.epsilon_dp
        gaussian = parse_policy(policy()).models[0].gaussian
        assert level == pytest.approx(min(gaussian_level(gaussian, total), 3 * total), rel=1e-9)
        # the map at the total is a little above the sum of the answers' levels (the atoms'
        # terms are convex in eps_dp)
        assert 1.5 < level < 1.51
        # a filtered answer on the column would take the transcript out of the model: the
        # base map re-prices what was spent, past the budget, and nothing more can be asked
        outside = db.explain("SELECT COUNT(*) FROM families WHERE height > 170", epsilon=0.1)
        assert outside.level_before == pytest.approx(level)
        assert outside.level_after > 5.0 and not outside.admissible
        assert outside.largest_epsilon == 0.0
    with sqlite3.connect(root / "ledger.sqlite") as conn:
        rows = conn.execute("SELECT mode, times FROM charges ORDER BY id").fetchall()
        (stored,) = conn.execute("SELECT value FROM meta WHERE key = 'models'").fetchone()
    assert rows == [("model", "[]"), ("model", "[]")]  # plain SUMs: charged at no time point
    assert json.loads(stored) == [parse_policy(policy()).models[0].record()]
    assert json.loads(stored)[0]["kind"] == "gaussian"
    assert stored == binding_of(parse_policy(policy())).models
    with connect(root) as again:  # a restart rebuilds the same level from the ledger
        assert again.budget().spent_ip == pytest.approx(level)


@pytest.mark.parametrize("m,rho,epsilon,mean,sd,lower,upper", [
    (2, 0.1, 0.5, 170.0, 9.0, 140.0, 200.0),
    (3, 0.28, 1.0, 170.0, 9.0, 140.0, 200.0),
    (3, 0.28, 2.0, 0.0, 10.0, -30.0, 30.0),
    (4, 0.5, 1.0, 50.0, 10.0, 20.0, 80.0),
    (3, 0.8, 0.3, 50.0, 20.0, 20.0, 80.0),
])
def test_the_calibrated_eps_dp_meets_epsilon_on_the_grid(m, rho, epsilon, mean, sd, lower,
                                                         upper) -> None:
    """The audit of the claim: at the eps_dp the model calibrates (where it beats the tight
    map), the level computed on the grid is at most epsilon (+ TOLERANCE eps_dp)."""
    gaussian = GaussianHousehold(m, rho, rho, mean, sd, lower, upper)
    declared = DeclaredModel("gaussian", "t", "x", (), 10.0, gaussian=gaussian)
    query = DependenceModel(m, gaussian_eta(gaussian))
    eps_dp, tight = declared.calibrate(epsilon, query)
    assert eps_dp > tight
    grid = numerical_level(gaussian, eps_dp, cells=120, nodes=40, points=21)
    assert grid <= epsilon + TOLERANCE * eps_dp, (grid, epsilon, eps_dp)
    assert min(gaussian_level(gaussian, eps_dp), m * eps_dp) <= epsilon * (1 + 1e-9)
