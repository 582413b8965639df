"""A declared household model of a binary column: its query-agnostic map, checked exactly, and
the engine's `model` mode from policy to answer (docs/theory.md §14)."""

from __future__ import annotations

import itertools
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml
from dpsql.calibration import DependenceModel, HouseholdModel, exact_audit_vector, guarantee, household_pmf
from dpsql.calibration.declared import DeclaredModel
from dpsql.calibration.model_household import household_level
from dpsql.calibration.model_maps import household_column_level
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting.transcript import ScopedAccountant
from dpsql.engine.errors import BudgetExhausted, InputError, LedgerError, PolicyError
from dpsql.engine.policy_yaml import parse_policy
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import create_ledger, run_cli

SLACK = 1e-9
"""Float rounding allowed on top of an exact level."""

HOUSEHOLD = {"kind": "household", "table": "people", "column": "sick", "sizes": {3: 1.0},
             "marginal": [0.9, 0.1], "rho": [0.2, 0.4]}


def policy(models: list | None = None, mode: str = "model", budget: float = 2.0,
           k: int = 3, eta: float = 0.5) -> dict:
    """Households of 3 sharing `sick` (the model's own eta at rho 0.4: 0.237)."""
    return {"budget": {"epsilon": budget},
            "dependence": {"k": k, "eta": eta, "mode": mode,
                           "models": [HOUSEHOLD] if models is None else models},
            "tables": {"people": {"columns": {"sick": {"type": "bool"},
                                              "age": {"type": "int", "lower": 0, "upper": 100}}},
                       "units": {"privacy_unit": "person", "columns": {"flag": {"type": "bool"}}}}}


def hypercube_extreme_rays(size: int) -> np.ndarray:
    """Every f = exp(eps h) that can be an extreme ray of the eps-DP cone on {0,1}^size.

    The cone {f > 0: f(x) <= e^eps f(x') for neighbours} has, on an extreme ray, tight
    constraints connecting every vertex (else it splits into two rays), so log f / eps is an
    integer h with |h(x) - h(x')| <= 1 on edges; returned as the integer h's, h(0) = 0."""
    points = list(itertools.product((0, 1), repeat=size))
    index = {p: j for j, p in enumerate(points)}
    edges = [(index[p], index[p[:i] + (1,) + p[i + 1:]]) for p in points for i in range(size)
             if p[i] == 0]
    rays = []
    for rest in itertools.product(range(-size, size + 1), repeat=len(points) - 1):
        h = np.array((0,) + rest)
        if all(abs(h[a] - h[b]) <= 1 for a, b in edges):
            rays.append(h)
    return np.array(rays)


def brute_force_level(size: int, rho: float, marginal: tuple[float, float], eps: float) -> float:
    """max over ALL eps-DP mechanisms (extreme rays of the LP) of Definition 3's level for
    a household of `size`: sup over i, t of sum_x P(x | X_i = t) f(x) / sum_x P(x) f(x)."""
    pmf = household_pmf(size, rho, np.array(marginal)).ravel()
    points = np.array(list(itertools.product((0, 1), repeat=size)))
    rays = np.exp(eps * hypercube_extreme_rays(size))  # (rays, 2^size)
    total = rays @ pmf
    best = 0.0
    for i in range(size):
        for t in (0, 1):
            given = np.where(points[:, i] == t, pmf, 0.0)
            given /= given.sum()
            best = max(best, float(np.log((rays @ given) / total).max()))
    return best


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("rho,marginal", [(0.3, (0.95, 0.05)), (0.6, (0.7, 0.3)), (0.1, (0.5, 0.5))])
@pytest.mark.parametrize("eps", [0.2, 1.0, 2.5])
def test_household_map_is_the_worst_of_all_dp_mechanisms(size, rho, marginal, eps) -> None:
    """The noisy COUNT of the 1s is the worst eps-DP mechanism on a binary household column:
    the LP over every mechanism (its extreme rays) reaches exactly household_level."""
    model = HouseholdModel.fixed(size, marginal, rho)
    exact = household_level(model, rho, (0, 1), eps)
    assert brute_force_level(size, rho, marginal, eps) == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_the_theory_numbers_of_the_household_map() -> None:
    """docs/theory.md §14: households of 10, rho 0.3, pi = (.95, .05)."""
    model = HouseholdModel.fixed(10, (0.95, 0.05), 0.3)
    levels = [household_column_level(model, eps) for eps in (0.2, 0.4659, 1.0)]
    assert levels == pytest.approx([0.3797, 0.99994, 2.1936], abs=5e-5)


def _transcripts(size: int) -> list[tuple[str, np.ndarray, int]]:
    """Transcripts of answers on the column as vector queries over {0,1}^size, with the DP
    level (in units of one answer's eps_dp) of the whole vector under substitution."""
    points = np.array(list(itertools.product((0, 1), repeat=size)))
    ones = points.sum(axis=1)
    zeros = size - ones
    first = points[:, 0]
    out = [
        ("count, count where not, sum", np.stack([ones, zeros, ones], axis=1), 3),
        ("grouped count by the column, then count", np.stack([zeros, ones, ones], axis=1), 3),
        ("count of one member's value, twice", np.stack([first, first], axis=1), 2),
        ("count where at least two are 1", np.stack([(ones >= 2).astype(int)] * 2, axis=1), 2),
    ]
    shape = (2,) * size
    return [(name, values.reshape(shape + (values.shape[1],)), level) for name, values, level in out]


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("rho", [0.2, 0.5])
@pytest.mark.parametrize("eps_dp", [0.1, 0.5, 1.5])
def test_composed_answers_never_exceed_the_map_of_their_total(size, rho, eps_dp) -> None:
    """Several answers on the column (different predicates and groupings), audited jointly and
    exactly, are never above L_model(S) at their total S: the map is query-agnostic."""
    marginal = (0.85, 0.15)
    model = HouseholdModel.fixed(size, marginal, rho)
    pmf = household_pmf(size, rho, np.array(marginal))
    for name, values, units in _transcripts(size):
        audited = exact_audit_vector(pmf, eps_dp, values).level
        bound = household_column_level(model, units * eps_dp)
        assert audited <= bound + SLACK, (name, audited, bound)


# ---- the engine ----------------------------------------------------------------------------

def write_people(path: Path, sick_rate: float = 0.1, rows: int = 300, seed: int = 3) -> Path:
    rng = np.random.default_rng(seed)
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE people AS SELECT unnest($1) AS sick, unnest($2) AS age",
                     [(rng.random(rows) < sick_rate).tolist(), rng.integers(0, 90, rows).tolist()])
        conn.execute("CREATE TABLE units AS SELECT 1 AS person, true AS flag")
    return path


@pytest.fixture()
def setup(tmp_path):
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy()))
    write_people(tmp_path / "people.duckdb")
    create_ledger(tmp_path / "ledger.sqlite", tmp_path / "policy.yaml")
    return tmp_path


def connect(root: Path, reuse: bool = True) -> PrivateDatabase:
    return PrivateDatabase.connect(root / "people.duckdb", root / "policy.yaml",
                                   root / "ledger.sqlite", reuse=reuse)


def test_model_mode_calibrates_charges_and_refuses_past_the_budget(setup) -> None:
    with connect(setup, reuse=False) as db:
        tight = db.explain("SELECT COUNT(*) FROM people WHERE sick", epsilon=0.5, mode="tight")
        first = db.query("SELECT COUNT(*) FROM people WHERE sick", epsilon=0.5)
        assert first.mode == "model" and first.epsilon_dp > 1.5 * tight.epsilon_dp
        assert first.tight_epsilon_dp == pytest.approx(tight.epsilon_dp)
        hm = parse_policy(policy()).models[0].household
        assert household_column_level(hm, first.epsilon_dp) <= 0.5 + SLACK
        answered = [first]
        with pytest.raises(BudgetExhausted):
            for _ in range(40):
                answered.append(db.query("SELECT sick, COUNT(*) FROM people GROUP BY sick",
                                         epsilon=0.5))
        spent = sum(r.epsilon_dp for r in answered)
        level = db.budget().spent_ip
        assert level <= 2.0 * (1 + 1e-12) and level == pytest.approx(answered[-1].level_after)
        # the level is the smaller of the tight map's and the model's capped map at S
        tight_map = DependenceModel(3, 0.5)
        expected = min(guarantee("tight", spent, tight_map),
                       max(household_column_level(hm, spent),
                           guarantee("tight", spent / 10.0, tight_map)))
        assert level == pytest.approx(expected, rel=1e-12)
        assert level < guarantee("tight", spent, tight_map) - 1.0  # the model saved budget
    with connect(setup) as again:  # a restart rebuilds the same level from the ledger
        assert again.budget().spent_ip == pytest.approx(level)
        assert again.budget().spent_dp == pytest.approx(spent)


def test_every_largest_epsilon_shown_is_what_the_next_query_can_ask(tmp_path) -> None:
    """Under mode model, the answer's own figure and the status's (a query reading no column,
    which the household model calibrates) are the largest epsilon that query is then admitted
    at: asking it passes, asking 0.1% more is refused quoting the same figure."""
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy(budget=5.0)))
    write_people(tmp_path / "people.duckdb")
    create_ledger(tmp_path / "ledger.sqlite", tmp_path / "policy.yaml")
    sick, star = "SELECT COUNT(*) FROM people WHERE sick", "SELECT COUNT(*) FROM people"
    with connect(tmp_path, reuse=False) as db:
        first = db.query(sick, epsilon=1.0)
        assert first.largest_epsilon == pytest.approx(db.explain(sick, epsilon=1.0).largest_epsilon,
                                                      rel=1e-12)
        status = db.budget().largest_epsilon
        assert first.budget.largest_epsilon == pytest.approx(status, rel=1e-12)
        assert db.explain(star, epsilon=1.0).mode == "model"
        assert status == pytest.approx(db.explain(star, epsilon=1.0).largest_epsilon, rel=1e-12)
        # the tight map alone would allow far more: the model's map levels off (theory.md §14)
        tight = db.explain(star, epsilon=1.0, mode="tight").largest_epsilon
        assert tight > 5 * status
        with pytest.raises(BudgetExhausted) as refused:
            db.query(sick, epsilon=status * 1.001)
        assert refused.value.largest_epsilon == pytest.approx(status, rel=1e-12)
        assert f"{status:.4g}" in str(refused.value)
        assert db.explain(sick, epsilon=status * (1 - 1e-6)).admissible
        assert db.report().totals.largest_epsilon == pytest.approx(status, rel=1e-12)
    with connect(tmp_path) as again:  # a restart gives the same figure from the ledger
        assert again.budget().largest_epsilon == pytest.approx(status, rel=1e-12)


def test_ledger_init_says_the_model_mode_and_its_fallback(tmp_path, capsys) -> None:
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy()))
    code, out, _ = run_cli(capsys, "ledger", "init", "--ledger", str(tmp_path / "l.sqlite"),
                           "--policy", str(tmp_path / "policy.yaml"))
    assert code == 0
    assert "mode model (tight where no declared model covers a query), 1 declared model(s)" in out


def test_the_model_never_gives_more_than_cap_times_the_tight_eps_dp(tmp_path) -> None:
    capped = dict(HOUSEHOLD, cap=1.5, marginal=[0.5, 0.5], rho=0.05)
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy([capped])))
    write_people(tmp_path / "people.duckdb")
    create_ledger(tmp_path / "ledger.sqlite", tmp_path / "policy.yaml")
    with connect(tmp_path) as db:
        model = db.explain("SELECT COUNT(*) FROM people WHERE sick", epsilon=1.0)
        assert model.epsilon_dp == pytest.approx(1.5 * model.tight_epsilon_dp, rel=1e-9)
        assert "capped" in model.justification


def test_a_query_outside_the_model_falls_back_to_tight_or_is_refused_when_asked(setup) -> None:
    with connect(setup) as db:
        fallback = db.explain("SELECT COUNT(*) FROM people WHERE age > 40", epsilon=0.5)
        assert fallback.mode == "tight" and "no declared model" in fallback.justification
        assert fallback.model == "" and fallback.model_checks == ()
        with pytest.raises(InputError, match="mode model cannot calibrate this query: it reads "
                                             "people.age.*ask mode tight"):
            db.explain("SELECT COUNT(*) FROM people WHERE age > 40 AND sick", epsilon=0.5,
                       mode="model")
        with pytest.raises(InputError, match="no model is declared for table units"):
            db.explain("SELECT COUNT(*) FROM units WHERE flag", epsilon=0.5, mode="model")
        # an answer outside the model takes the transcript out of it: the tight map again
        db.query("SELECT COUNT(*) FROM people WHERE sick", epsilon=0.5)
        inside = db.budget().spent_ip
        outside = db.query("SELECT COUNT(*) FROM people WHERE age > 40", epsilon=0.1)
        assert outside.level_before == pytest.approx(inside)
        assert outside.level_after > inside + 0.1  # the model's answer is re-priced by tight


def test_explain_shows_the_model_and_its_sensitivity_without_reading_data(tmp_path) -> None:
    answers = []
    for rate in (0.0, 0.9):
        root = tmp_path / str(rate)
        root.mkdir()
        (root / "policy.yaml").write_text(yaml.safe_dump(policy()))
        write_people(root / "people.duckdb", sick_rate=rate)
        create_ledger(root / "ledger.sqlite", root / "policy.yaml")
        with connect(root) as db:
            answers.append(db.explain("SELECT COUNT(*) FROM people WHERE sick", epsilon=0.7)
                           .to_dict())
    assert answers[0] == answers[1]
    shown = answers[0]
    assert shown["model"].startswith("household model of people.sick")
    assert [c["change"] for c in shown["model_checks"]] == ["rho 0.45", "rho 0.5"]
    levels = [c["level"] for c in shown["model_checks"]]
    assert 0.7 - 1e-6 < levels[0] < levels[1]  # a larger rho than declared: a larger level


def test_a_ledger_refuses_any_change_to_its_models(setup) -> None:
    with connect(setup) as db:
        db.query("SELECT COUNT(*) FROM people WHERE sick", epsilon=0.3)
    for changed in (policy([dict(HOUSEHOLD, rho=[0.2, 0.3])]), policy([]) | {
            "dependence": {"k": 3, "eta": 0.5}}):
        (setup / "policy.yaml").write_text(yaml.safe_dump(changed))
        with pytest.raises(LedgerError, match="a ledger's models never change"):
            connect(setup)


@pytest.mark.parametrize("change,message", [
    ({"column": "age"}, "household models need a two-valued column"),
    ({"table": "units", "column": "flag"}, "units has a privacy_unit"),
    ({"sizes": {4: 1.0}}, "the model implies k=4"),
    ({"rho": [0.2, 0.9]}, "the model implies k=3 and eta=0.87"),
    ({"rho": [0.5, 0.2]}, "rho_low must be <= rho_high"),
    ({"marginal": [0.9, 0.2]}, "marginal"),
    ({"cap": 0.5}, "cap: expected a number >= 1"),
    ({"kind": "latent"}, "kind: expected household, gaussian or markov"),
    ({"column": "nope"}, "unknown column 'nope'"),
])
def test_bad_household_declarations_are_refused_naming_the_field(change, message) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy(policy([dict(HOUSEHOLD, **change)]))


def test_mode_model_needs_a_declared_model() -> None:
    with pytest.raises(PolicyError, match="'model' needs at least one entry"):
        parse_policy(policy([]))


@settings(max_examples=60, deadline=None)
@given(size=st.integers(2, 6), rho=st.floats(0.0, 1.0), rare=st.floats(0.01, 0.5),
       budget=st.floats(0.05, 20.0), cap=st.floats(1.0, 50.0),
       spent=st.lists(st.floats(0.0, 3.0), max_size=4))
def test_the_accountant_admits_exactly_up_to_its_dp_budget(size, rho, rare, budget, cap,
                                                           spent) -> None:
    """With a household model covering the transcript, the DP budget is the boundary of the
    level (the smaller of the tight map and the capped model map): admitted up to it, refused
    just past it, and the level never decreases as spending grows."""
    model = HouseholdModel.fixed(size, (1 - rare, rare), rho)
    declared = DeclaredModel("household", "people", "sick", (False, True), cap, household=model)
    accountant = ScopedAccountant(budget, size, 1.0, "tight", models=(declared,)).at(
        frozenset({"people.sick"}))
    total = accountant.dp_budget()
    assert accountant.admits(0.0, total)
    assert not accountant.admits(0.0, total * 1.001 + 1e-12)
    levels = [accountant.level(s) for s in itertools.accumulate(sorted(spent))]
    assert levels == sorted(levels)
    assert all(accountant.level(s) <= guarantee("tight", s, DependenceModel(size, 1.0)) + SLACK
               for s in spent if s > 0)


def test_a_connection_opened_before_a_tightening_is_capped_by_the_tighter_policy(tmp_path) -> None:
    capped = dict(HOUSEHOLD, cap=1.5)
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy([capped])))
    write_people(tmp_path / "people.duckdb")
    create_ledger(tmp_path / "ledger.sqlite", tmp_path / "policy.yaml")
    with connect(tmp_path) as old:
        loose = old.explain("SELECT COUNT(*) FROM people WHERE sick", epsilon=1.0).epsilon_dp
        (tmp_path / "tight.yaml").write_text(yaml.safe_dump(policy([capped], eta=0.9)))
        with PrivateDatabase.connect(tmp_path / "people.duckdb", tmp_path / "tight.yaml",
                                     tmp_path / "ledger.sqlite") as new:
            strict = new.explain("SELECT COUNT(*) FROM people WHERE sick", epsilon=1.0).epsilon_dp
        answered = old.query("SELECT COUNT(*) FROM people WHERE sick", epsilon=1.0)
    assert strict < loose * 0.99 and answered.epsilon_dp == pytest.approx(strict)


def test_the_cli_asks_mode_model_and_explains_the_model(setup, capsys) -> None:
    args = ["--db", str(setup / "people.duckdb"), "--policy", str(setup / "policy.yaml"),
            "--ledger", str(setup / "ledger.sqlite")]
    code, out, _ = run_cli(capsys, "explain", *args, "--epsilon", "0.5", "--mode", "model",
                           "SELECT COUNT(*) FROM people WHERE sick")
    assert code == 0 and "declared model: household model of people.sick" in out
    assert "the answer's level if the model is off: rho 0.45:" in " ".join(out.split())
    code, _, err = run_cli(capsys, "query", *args, "--epsilon", "0.5", "--mode", "model",
                           "SELECT COUNT(*) FROM people WHERE age > 3")
    assert code == 2 and "mode model cannot calibrate this query" in err
