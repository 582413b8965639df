"""`dpsql dependence eta`: exact eta per column set from a declared model, a conservative fit to
the data, the eps_dp each gives and a ready policy block; bad input gets one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml
from dpsql.calibration import DependenceModel, calibrate, column_set_eta
from dpsql.calibration.household import household_eta
from dpsql.engine.dependence_data import fit_sets
from dpsql.engine.dependence_model import parse_model
from dpsql.engine.errors import InputError
from dpsql.engine.policy import TableSpec
from dpsql.engine.policy_yaml import load_policy

from tests.support import run_cli, write_policy

MODEL = {
    "sizes": {1: 0.25, 2: 0.25, 3: 0.25, 4: 0.25},
    "factors": {"outbreak": [0.8, 0.2]},
    "columns": {
        "state": {"values": ["CA", "NY"], "marginal": [0.5, 0.5], "rho": 1},
        "sick": {"values": [False, True], "factor": "outbreak", "given": [[0.95, 0.05], [0.3, 0.7]]},
        "pets": {"values": [0, 1, 2], "marginal": [0.5, 0.3, 0.2], "rho": 0.4},
    },
}

TABLES = {"people": {"dependence_group": "household_id", "columns": {
    "state": {"type": "str", "domain": ["CA", "NY"]},
    "sick": {"type": "bool"},
    "pets": {"type": "int", "domain": [0, 1, 2]},
    "age": {"type": "int", "lower": 0, "upper": 120},
}}}


def policy_file(tmp_path: Path) -> Path:
    return write_policy(tmp_path / "policy.yaml", {"dependence": {"k": 4, "eta": 1.0},
                                                     "tables": TABLES})


def model_file(tmp_path: Path, model: dict = MODEL) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(model))
    return path


def draw(path: Path, households: int, rho: float, marginal: list[float], seed: int,
         shared_state: bool = True) -> Path:
    """Households of 2-4 drawn from the rho model for pets; state shared (or per person)."""
    with duckdb.connect(str(path)) as conn:
        draw_into(conn, households, rho, marginal, seed, shared_state)
    return path


def draw_into(conn: duckdb.DuckDBPyConnection, households: int, rho: float, marginal: list[float],
              seed: int, shared_state: bool = True) -> None:
    """draw's people table, (re)created on an open connection."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 5, households)
    house = np.repeat(np.arange(households), sizes)
    latent = rng.choice(3, households, p=marginal)[house]
    pets = np.where(rng.random(house.size) < rho, latent, rng.choice(3, house.size, p=marginal))
    state = rng.choice(["CA", "NY"], households if shared_state else house.size)
    state = state[house] if shared_state else state
    conn.execute("CREATE OR REPLACE TABLE people AS SELECT unnest($1) AS person_id, unnest($2) "
                 "AS household_id, unnest($3) AS state, unnest($4) AS pets, unnest($5) AS sick, "
                 "unnest($6) AS age",
                 [list(range(house.size)), house.tolist(), state.tolist(), pets.tolist(),
                  (rng.random(house.size) < 0.1).tolist(), [30] * house.size])


def test_model_etas_are_the_exact_ones(tmp_path: Path, capsys) -> None:
    code, out, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                             "--model", str(model_file(tmp_path)), "--columns", "sick,pets",
                             "--columns", "pets, sick", "--epsilon", "0.5", "--format", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    model = parse_model(MODEL)
    rows = {tuple(r["columns"]): r for r in report["sets"]}
    assert list(rows) == [("state",), ("sick",), ("pets",), ("age",), ("sick", "pets")]
    for columns in [("state",), ("sick",), ("pets",), ("sick", "pets")]:
        assert rows[columns]["eta_model"] == pytest.approx(column_set_eta(model, columns), abs=1e-15)
        eta = rows[columns]["eta"]
        assert eta >= rows[columns]["eta_model"] and eta - rows[columns]["eta_model"] < 1e-4
        assert rows[columns]["epsilon_dp"] == pytest.approx(
            calibrate(0.5, DependenceModel(4, eta)).epsilon_dp)
    assert rows[("state",)]["shared"] and rows[("state",)]["eta"] == 1.0
    assert rows[("age",)]["eta"] is None and "age not in model" in rows[("age",)]["why_missing"]
    assert report["epsilon_dp_record"] == pytest.approx(0.5 / 4)  # eta = 1: group privacy
    assert report["epsilon_dp_unshared"] == pytest.approx(0.5)
    # The ready block lists every set whose eta is below the record-level one, in the form.
    assert report["block"] == {"dependence": {"k": 4, "eta": 1.0, "mode": "auto", "eta_by_columns": [
        {"columns": list(c), "eta": rows[c]["eta"]} for c in [("sick",), ("pets",), ("sick", "pets")]]}}


def test_table_output_shows_costs_and_the_block(tmp_path: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                           "--model", str(model_file(tmp_path)))
    assert code == 0
    text = " ".join(out.split())
    assert "4.00x the noise of an unshared, independent column" in text
    block = yaml.safe_load(out.split("Ready policy block:")[1])
    assert block["dependence"]["eta_by_columns"][0]["columns"] == ["sick"]


@pytest.mark.parametrize(("change", "message"), [
    ({"sizes": {0: 1.0}}, "sizes: expected sizes that are integers from 1 to 64, got 0"),
    ({"sizes": {2: 0.5}}, "sizes must sum to 1"),
    ({"colour": 1}, "colour: unknown field (allowed: columns, factors, sizes)"),
    ({"columns": {"sick": {"values": [0, 1], "factor": "flu", "given": [[1, 0]]}}},
     "columns.sick.factor must name a declared factor (outbreak), got 'flu'"),
    ({"columns": {"pets": {"values": [0, 1], "marginal": [0.5, 0.5], "rho": 1.5}}},
     "columns.pets.rho: expected a probability in [0, 1], got 1.5"),
    ({"columns": {"pets": {"values": [0, 1], "marginal": [1.0]}}},
     "columns.pets.marginal must give one probability per value (2), got 1"),
    ({"columns": {"sick": {"values": [0, 1], "factor": "outbreak", "given": [[1, 0]]}}},
     "columns.sick.given must have one row per value of outbreak (2), got 1"),
])
def test_bad_model_files_get_one_line_errors(tmp_path: Path, capsys, change: dict, message: str) -> None:
    model = {**MODEL, **change}
    code, out, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                             "--model", str(model_file(tmp_path, model)))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize(("args", "message"), [
    ([], "give --model (a household model file), --db (data to fit), or both"),
    (["--model", "nowhere.yaml"], "model file not found: nowhere.yaml"),
    (["--model", "M", "--columns", "sick,colour"],
     "--columns 'sick,colour': expected comma-separated columns of table people (state, sick, pets, age)"),
    (["--model", "M", "--epsilon", "0"], "epsilon must be a finite number > 0"),
])
def test_bad_arguments_get_one_line_errors(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    args = [str(model_file(tmp_path)) if a == "M" else a for a in args]
    code, out, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)), *args)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err


def test_eta_grows_with_the_correlation() -> None:
    """The fit bounds rho above and computes eta at the bound: sound because eta increases in rho."""
    for marginal in ([0.5, 0.5], [0.9, 0.1], [0.5, 0.3, 0.2]):
        for k in (2, 3, 5):
            etas = [household_eta(k, rho, marginal) for rho in np.linspace(0, 1, 101)]
            assert all(b >= a - 1e-15 for a, b in zip(etas, etas[1:], strict=False))


def test_fit_upper_bound_covers_the_true_correlation(tmp_path: Path) -> None:
    """200 data sets of 400 households (rho = 0.5): the 95% upper bound must cover rho in at least
    180 (a correct 95% bound fails that with probability about 0.001; Hoeffding is conservative)."""
    table = load_policy(policy_file(tmp_path)).tables["people"]
    rho, marginal = 0.5, [0.6, 0.3, 0.1]
    truth = max(household_eta(k, rho, marginal) for k in (2, 3, 4))
    covered, covered_eta, points, uppers = 0, 0, [], []
    conn = duckdb.connect()  # in memory: a file per data set would take most of the time
    for seed in range(200):
        draw_into(conn, 400, rho, marginal, seed)
        fit = fit_sets(conn, table, 4, [("pets",)], 0.95).sets[0]
        covered += fit.rho_upper >= rho
        covered_eta += fit.eta_upper >= truth
        points.append(fit.rho)
        uppers.append(fit.rho_upper)
    conn.close()
    assert covered >= 180 and covered_eta >= 180
    assert abs(np.mean(points) - rho) < 0.02  # the point estimate is close to the truth
    assert np.mean(uppers) < 0.75  # and the bound is informative, not 1 (measured: 0.71)


def test_fit_flags_a_shared_column_and_its_sets(tmp_path: Path, capsys) -> None:
    db = draw(tmp_path / "d.duckdb", 300, 0.0, [0.5, 0.3, 0.2], seed=1)
    code, out, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                             "--db", str(db), "--columns", "pets,state", "--format", "json")
    assert (code, err) == (0, "")
    rows = {tuple(r["columns"]): r for r in json.loads(out)["sets"]}
    assert rows[("state",)]["shared"] and rows[("state",)]["eta_fit"] == 1.0
    assert rows[("state", "pets")]["shared"] and rows[("state", "pets")]["eta_fit"] == 1.0
    assert not rows[("pets",)]["shared"] and rows[("pets",)]["eta_fit"] < 0.5
    assert rows[("age",)]["eta_fit"] is None and "no public values" in rows[("age",)]["why_missing"]
    assert json.loads(out)["check"]["largest"] == 4


def test_fit_needs_one_record_per_unit(tmp_path: Path) -> None:
    spec = load_policy(policy_file(tmp_path)).tables["people"]
    table = TableSpec(spec.name, spec.privacy_unit, 2, spec.columns, spec.dependence_group)
    with duckdb.connect() as conn, pytest.raises(InputError, match="one record per unit"):
        fit_sets(conn, table, 4, [("pets",)], 0.95)


def test_independent_columns_need_no_values(tmp_path: Path, capsys) -> None:
    model = {**MODEL, "columns": {**MODEL["columns"], "age": {"per_person": True}}}
    code, out, _ = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                           "--model", str(model_file(tmp_path, model)), "--columns", "sick,age",
                           "--format", "json")
    rows = {tuple(r["columns"]): r for r in json.loads(out)["sets"]}
    assert code == 0 and rows[("age",)]["eta_model"] == 0.0
    assert rows[("sick", "age")]["eta_model"] == rows[("sick",)]["eta_model"]
    bad = {**MODEL, "columns": {"age": {"per_person": "yes"}}}
    code, _, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                           "--model", str(model_file(tmp_path, bad)))
    assert code == 2 and "columns.age.per_person: expected true" in err


def test_model_that_cannot_describe_the_policy_is_refused(tmp_path: Path, capsys) -> None:
    model = {**MODEL, "columns": {**MODEL["columns"],
                                  "state": {"values": ["CA", "TX"], "marginal": [0.5, 0.5], "rho": 1}}}
    code, out, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                             "--model", str(model_file(tmp_path, model)))
    assert (code, out) == (2, "")
    assert err == "error: model column state: its values ['CA', 'TX'] must be the policy's ['CA', 'NY']\n"
    # Too large to enumerate exactly: refused in one line, not an internal error.
    code, out, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                             "--model", str(model_file(tmp_path, {**MODEL, "sizes": {64: 1.0}})),
                             "--columns", "state,sick,pets")
    assert (code, out) == (2, "")
    assert err.startswith("error: model: 63 housemates over 12 projected records need ")


def test_a_table_with_a_privacy_unit_gets_no_column_sets(tmp_path: Path, capsys) -> None:
    tables = {"people": {**TABLES["people"], "privacy_unit": "person_id"}}
    policy = write_policy(tmp_path / "p.yaml", {"dependence": {"k": 4, "eta": 1.0}, "tables": tables})
    code, out, _ = run_cli(capsys, "dependence", "eta", "--policy", str(policy),
                           "--model", str(model_file(tmp_path)))
    assert code == 0 and "cover each unit's rows projected onto the set" in " ".join(out.split())
    assert yaml.safe_load(out.split("Ready policy block:")[1])["dependence"]["eta_by_columns"] == []


def test_the_ready_block_is_a_valid_policy(tmp_path: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                           "--model", str(model_file(tmp_path)), "--columns", "sick,pets",
                           "--format", "json")
    block = json.loads(out)["block"]
    path = write_policy(tmp_path / "ready.yaml", {**block, "tables": TABLES})
    policy = load_policy(path)
    assert policy.eta_for(frozenset({"people.sick"})).eta == block["dependence"]["eta_by_columns"][0]["eta"]


def test_a_set_is_declared_at_least_the_eta_of_its_subsets(tmp_path: Path, capsys) -> None:
    # The data's pets are more correlated (rho 0.5) than the model says (0.4): the fit raises
    # {pets}, and every set holding pets must follow, or a query reading pets alone would use
    # the smaller eta of a superset (the smallest declaration among supersets applies).
    db = draw(tmp_path / "d.duckdb", 2000, 0.5, [0.5, 0.3, 0.2], seed=3)
    code, out, _ = run_cli(capsys, "dependence", "eta", "--policy", str(policy_file(tmp_path)),
                           "--model", str(model_file(tmp_path)), "--db", str(db), "--columns",
                           "state,pets,sick", "--columns", "pets,sick", "--format", "json")
    rows = [r for r in json.loads(out)["sets"] if r["eta"] is not None]
    pets = next(r for r in rows if r["columns"] == ["pets"])
    assert code == 0 and pets["eta_fit"] > pets["eta_model"]
    pairs = [(small, large) for small in rows for large in rows
             if set(small["columns"]) < set(large["columns"])]
    assert len(pairs) == 6  # {state}, {sick}, {pets}, {pets, sick} under their supersets
    for small, large in pairs:
        assert large["eta"] >= small["eta"], (small, large)


def test_the_several_columns_snippet_in_choosing_k_eta() -> None:
    from dpsql.calibration import Column, Factor, HouseholdColumns

    model = HouseholdColumns(
        sizes=(0.25, 0.25, 0.25, 0.25),
        columns=(Column("state", ("CA", "NY", "TX", "WA"), (0.25,) * 4, rho=1.0),
                 Column("sick", (False, True), factor="outbreak", given=((0.95, 0.05), (0.3, 0.7)))),
        factors=(Factor("outbreak", (0.8, 0.2)),))
    assert column_set_eta(model, ["state"]) == 1.0
    assert column_set_eta(model, ["sick"]) == pytest.approx(0.5851, abs=5e-5)
    cal = calibrate(0.5, DependenceModel(4, 0.5851))
    assert cal.mode == "tight" and cal.epsilon_dp == pytest.approx(0.1704, abs=5e-5)
    text = (Path(__file__).resolve().parents[1] / "docs" / "choosing_k_eta.md").read_text()
    assert 'given=((0.95, 0.05), (0.3, 0.7))' in text and "eps_dp = 0.1704" in text


def test_fit_needs_the_group_column_in_the_policy(tmp_path: Path, capsys) -> None:
    db = draw(tmp_path / "d.duckdb", 50, 0.5, [0.5, 0.3, 0.2], seed=2)
    tables = {"people": {k: v for k, v in TABLES["people"].items() if k != "dependence_group"}}
    policy = write_policy(tmp_path / "p.yaml", {"dependence": {"k": 4, "eta": 1.0}, "tables": tables})
    code, out, err = run_cli(capsys, "dependence", "eta", "--policy", str(policy), "--db", str(db))
    assert (code, out) == (2, "")
    assert err == ("error: tables.people.dependence_group is not set: name the column that identifies "
                   "dependence groups (e.g. household_id) in the policy\n")
