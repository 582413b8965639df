"""The bundled example declares the dependence its own generator implies, checked exactly.

examples/households.py computes each household's exact joint pmf; these tests audit the
example's answers against that pmf at the calibration its declared policy gives, and check
the declaration against the data it writes.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml
from dpsql.calibration import DependenceModel, column_set_eta
from dpsql.engine import PrivateDatabase
from dpsql.engine.dependence_model import parse_model

from tests.support import create_ledger

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "households.py"
SLACK = 1e-9
"""Float rounding allowed on top of an audited level (the levels are exact up to it)."""


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("households_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def small_copy(example, tmp_path_factory):
    """The example's data (fewer households) and its declared policy, in a fresh folder."""
    root = tmp_path_factory.mktemp("households")
    example.generate(root / "people.duckdb", households=400)
    (root / "policy.yaml").write_text(yaml.safe_dump(example.policy(), sort_keys=False))
    create_ledger(root / "ledger.sqlite", root / "policy.yaml")
    return root


def test_declared_model_is_at_least_the_computed_one(example) -> None:
    declared = example.policy()["dependence"]
    implied = example.implied_model()
    assert declared["k"] >= implied.k and declared["eta"] >= implied.eta
    # Households of up to 4 sharing one state: one member's state gives the others' (eta = 1).
    assert (implied.k, implied.eta) == (4, 1.0)
    assert example.true_eta(("state",)) == 1.0
    by_columns = {tuple(d["columns"]): d["eta"] for d in declared["eta_by_columns"]}
    assert set(by_columns) == set(example.DECLARED_SETS)
    for columns, eta in by_columns.items():
        assert example.true_eta(columns) - example.FLOAT_ZERO <= eta <= example.true_eta(columns) + 1e-4
    assert by_columns[("sick",)] == 0.5851 and by_columns[("age", "income")] == 0.0


def test_the_model_file_gives_the_generators_etas(example) -> None:
    # Two independent computations agree: the model file's closed form (count vectors given
    # the hidden household state) and brute force on the example's exact joint pmf.
    model = parse_model(example.model_file())
    assert model.k == 4
    for columns in [("state",), ("sick",), ("sick", "age"), ("age", "income"), ("state", "sick")]:
        assert column_set_eta(model, columns) == pytest.approx(example.true_eta(columns), abs=1e-12)


def test_each_household_pmf_is_exact_and_matches_the_generator(example) -> None:
    for size in range(1, 5):
        pmf = example.household_pmf(size)
        assert pmf.shape == (16,) * size and pmf.sum() == pytest.approx(1.0, abs=1e-12)
    pair = example.household_pmf(2).reshape(4, 2, 2, 4, 2, 2)
    assert pair.sum(axis=(1, 2, 4, 5)) == pytest.approx(np.diag(example.HOUSEHOLD.state))
    sick_pair = pair.sum(axis=(0, 2, 3, 5))  # Pr[sick_1, sick_2]: the outbreak links them
    h = example.HOUSEHOLD
    both = h.outbreak * h.sick_in_outbreak**2 + (1 - h.outbreak) * h.sick_otherwise**2
    assert sick_pair[1, 1] == pytest.approx(both, abs=1e-12)


def test_the_written_data_shares_state_within_households(example, small_copy) -> None:
    # What the declaration rests on, read back from the table the example writes.
    with duckdb.connect(str(small_copy / "people.duckdb"), read_only=True) as conn:
        sizes, states = conn.execute(
            "SELECT MAX(n), MAX(s) FROM (SELECT household_id, COUNT(*) AS n, "
            "COUNT(DISTINCT state) AS s FROM people GROUP BY household_id)"
        ).fetchone()
    assert sizes <= example.policy()["dependence"]["k"] and states == 1


def _scales(example, small_copy) -> list[tuple[str | None, float, tuple]]:
    """(audited count, epsilon, aggregates) of each example query at its declared calibration."""
    root = small_copy
    with PrivateDatabase.connect(root / "people.duckdb", policy=root / "policy.yaml",
                                 ledger=root / "ledger.sqlite") as db:
        return [(count, epsilon, db.explain(sql, epsilon=epsilon).aggregates)
                for _, sql, epsilon, count in example.QUERIES]


def test_exact_audit_of_every_answer_stays_within_its_epsilon(example, small_copy) -> None:
    for count, epsilon, aggregates in _scales(example, small_copy):
        if count is None:
            # SUM and AVG of adult income: the noisy COUNT behind AVG is audited exactly; the
            # SUM reads only age and income, which the generator draws per person.
            (counter,) = [a for a in aggregates if a.function.startswith("COUNT")]
            assert example.audited_level("adults", 1.0 / counter.scale) <= epsilon + SLACK
            continue
        (aggregate,) = aggregates
        level = example.audited_level(count, 1.0 / aggregate.scale)
        assert level <= epsilon + SLACK, (count, level, epsilon)


def test_the_audit_sees_the_leak_plain_dp_would_make(example) -> None:
    # The same counts with plain DP noise (eps_dp = eps, no calibration) exceed eps: the
    # audit above can fail, so its passing says something.
    assert example.audited_level("sick", 0.5) > 0.5
    assert example.audited_level("states", 0.5 / 2) > 0.5


def test_age_and_income_add_no_dependence(example) -> None:
    # Others' adult flags are independent of a member's whole (state, sick, adult) record,
    # which is what the SUM/AVG argument (Proposition 4 on the columns read) needs.
    pmf = example.household_pmf(3).reshape((16,) + (4, 2, 2) * 2)
    joint = pmf.sum(axis=(1, 2, 4, 5))  # member 0's record, members 1 and 2's adult flags
    product = joint.sum(axis=(1, 2), keepdims=True) * joint.sum(axis=0, keepdims=True)
    assert np.abs(joint - product).max() < 1e-15


def test_the_example_runs_quickly_and_prints_both_models(tmp_path) -> None:
    started = time.monotonic()
    run = subprocess.run([sys.executable, str(EXAMPLE), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True)
    assert time.monotonic() - started < 60
    assert "The generator implies k = 4, record-level eta = 1" in run.stdout
    assert "eta{sick} = 0.5851" in run.stdout and "eta{age, income} = 0.0000" in run.stdout
    assert run.stdout.count("exact audit on the generator: level") == 3
    # The numbers README.md quotes from this run (they depend on the model, not on the noise).
    assert "level 0.3259 <= epsilon 0.5" in run.stdout and "level 0.3497 <= epsilon 0.5" in run.stdout
    assert run.stdout.count("epsilon_dp 0.1704 via tight; with record-level eta 1 (group privacy) "
                            "0.1250") == 2
    assert run.stdout.count("group privacy's noise scale is 1.36x this answer's") == 2
    assert "reads age, income: eta 0 from dependence.eta_by_columns" in run.stdout
    assert "Budget: 3.863 of 8.0 spent" in run.stdout
    declared = yaml.safe_load((tmp_path / "policy.yaml").read_text())["dependence"]
    assert DependenceModel(declared["k"], declared["eta"]) == DependenceModel(4, 1.0)
    assert parse_model(yaml.safe_load((tmp_path / "model.yaml").read_text())).k == 4
