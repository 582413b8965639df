"""A declared Markov chain over a time column: per-time-point spending, checked by the exact
joint audit, and the engine's `model` mode with the ledger's time points (docs/theory.md §14)."""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
from functools import reduce
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml
from dpsql.calibration import DependenceModel, MarkovModel, exact_audit, exact_audit_vector
from dpsql.calibration.declared import tight_level
from dpsql.calibration.inversion import invert
from dpsql.calibration.model_maps import chain_level
from dpsql.calibration.model_markov import chain_eta
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_schema import SCHEMA_VERSION
from dpsql.engine.errors import InputError, PolicyError
from dpsql.engine.policy_yaml import parse_policy

from tests.support import create_ledger, run_cli

SLACK = 1e-9
DAYS = 4
CHAIN = {"kind": "markov", "table": "readings", "column": "on", "time": "day",
         "initial": [0.6, 0.4], "transition": [[0.8, 0.2], [0.3, 0.7]]}


def chain_pmf(model: MarkovModel, times: int) -> np.ndarray:
    """Joint pmf of one person's values X_1..X_T, one axis per time point (each an individual)."""
    matrix = model.matrix
    pmf = np.array(model.initial)
    for _ in range(times - 1):
        pmf = np.einsum("...a,ab->...ab", pmf, matrix)
    return pmf


def transcripts(domain: int, times: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Transcripts of per-time-point answers as vector queries (one eps_dp per coordinate) and
    the spend per time point each costs, in units of eps_dp (one coordinate changes by at most
    1 when one record changes, so a coordinate at time t adds 1 to E_t)."""
    shape = (domain,) * times
    points = np.array(list(itertools.product(range(domain), repeat=times)))
    top = (points == domain - 1).astype(int)
    low = (points == 0).astype(int)
    out = [("grouped by day", top, np.ones(times))]  # GROUP BY day: COUNT WHERE value = top
    pinned = np.stack([top[:, 1], top[:, 1]], axis=1)  # WHERE day = 1, twice
    spend = np.zeros(times)
    spend[1] = 2
    out.append(("day 1 pinned twice", pinned, spend))
    both = np.concatenate([top, low, top[:, -1:]], axis=1)  # GROUP BY day, value; last day again
    spend = np.full(times, 2.0)
    spend[-1] += 1
    out.append(("grouped by day and value, then the last day", both, spend))
    return [(name, values.reshape(shape + (values.shape[1],)), cost) for name, values, cost in out]


@pytest.mark.parametrize("times", [3, 4, 5])
@pytest.mark.parametrize("model", [MarkovModel.binary(0.2, 0.3),
                                   MarkovModel.binary(0.05, 0.6, initial=(0.9, 0.1)),
                                   MarkovModel((0.5, 0.3, 0.2),
                                               ((0.7, 0.2, 0.1), (0.2, 0.6, 0.2), (0.1, 0.3, 0.6)))])
@pytest.mark.parametrize("eps_dp", [0.3, 1.2])
def test_per_time_point_transcripts_never_exceed_the_chain_map(times, model, eps_dp) -> None:
    """Grouped-by-day and pinned-day answers, composed and audited jointly and exactly on one
    person's chain, are never above max_d markov_levels(E)_d at their per-time spending E."""
    domain = len(model.initial)
    if domain == 3 and times == 5:
        times = 4  # the vector audit's output box grows as (coordinates + 1)^...
    pmf = chain_pmf(model, times)
    for name, values, units in transcripts(domain, times):
        audited = exact_audit_vector(pmf, eps_dp, values).level
        bound = chain_level(model, tuple(float(u) * eps_dp for u in units))
        assert audited <= bound + SLACK, (name, audited, bound)


# ---- the engine ----------------------------------------------------------------------------

def policy(models: list | None = None, budget: float = 3.0, cap: float = 10.0) -> dict:
    chain = dict(CHAIN, cap=cap)
    return {"budget": {"epsilon": budget},
            "dependence": {"k": DAYS, "eta": 0.9, "mode": "model",
                           "models": [chain] if models is None else models},
            "tables": {"readings": {"columns": {
                "on": {"type": "bool"}, "day": {"type": "int", "lower": 0, "upper": DAYS - 1},
                "kind": {"type": "str", "domain": ["a", "b", "c"]}}}}}


def write_readings(path: Path, meters: int = 200, seed: int = 5) -> Path:
    rng = np.random.default_rng(seed)
    model = MarkovModel(tuple(CHAIN["initial"]), tuple(tuple(r) for r in CHAIN["transition"]))
    days, on = [], []
    for _ in range(meters):
        x = int(rng.random() < model.initial[1])
        for day in range(DAYS):
            days.append(day)
            on.append(bool(x))
            x = int(rng.random() < model.transition[x][1])
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE readings AS SELECT unnest($1) AS day, unnest($2) AS \"on\", "
                     "'a' AS kind", [days, on])
    return path


@pytest.fixture()
def setup(tmp_path):
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy()))
    write_readings(tmp_path / "readings.duckdb")
    create_ledger(tmp_path / "ledger.sqlite", tmp_path / "policy.yaml")
    return tmp_path


def connect(root: Path) -> PrivateDatabase:
    """Reuse off: these tests count what each answer charges to each time point (PINNED, one
    day of GROUPED, would otherwise be summed from GROUPED's released cell at no charge)."""
    return PrivateDatabase.connect(root / "readings.duckdb", root / "policy.yaml",
                                   root / "ledger.sqlite", reuse=False)


GROUPED = 'SELECT day, COUNT(*) FROM readings WHERE "on" GROUP BY day'
PINNED = 'SELECT COUNT(*) FROM readings WHERE "on" AND day = 2'


def test_chain_answers_are_charged_per_time_point_and_survive_a_restart(setup) -> None:
    chain = parse_policy(policy()).models[0].chain
    with connect(setup) as db:
        grouped = db.query(GROUPED, epsilon=0.8)
        pinned = db.query(PINNED, epsilon=0.5)
        assert grouped.mode == pinned.mode == "model"
        assert grouped.epsilon_dp > grouped.tight_epsilon_dp
        spend = [grouped.epsilon_dp] * DAYS
        spend[2] += pinned.epsilon_dp
        level = db.budget().spent_ip
        # the chain's map at the per-day spending, below the tight map at S
        assert level == pytest.approx(chain_level(chain, tuple(spend)), rel=1e-12)
        assert pinned.level_after == pytest.approx(level)
    with contextlib.closing(sqlite3.connect(setup / "ledger.sqlite")) as conn:
        rows = conn.execute("SELECT times FROM charges ORDER BY id").fetchall()
    assert rows == [("[0, 1, 2, 3]",), ("[2]",)]
    with connect(setup) as again:
        assert again.budget().spent_ip == pytest.approx(level)


def test_a_chain_answer_shows_what_it_can_still_ask(setup) -> None:
    """A chain answer's own largest epsilon (its time points, by bisection) is explain's for
    the same query next; the status's is that of a query reading no column, calibrated by the
    mode (it reads no time point) and admitted through the chain's capped map (§27): its
    admission threshold."""
    with connect(setup) as db:
        answers = [db.query(GROUPED, epsilon=0.8), db.query(PINNED, epsilon=0.5)]
        for result in answers:
            assert result.largest_epsilon is not None
        assert answers[1].largest_epsilon == pytest.approx(
            db.explain(PINNED, epsilon=0.5).largest_epsilon, rel=1e-9)
        star = db.explain("SELECT COUNT(*) FROM readings", epsilon=0.1)
        assert star.mode == "tight"
        assert db.budget().largest_epsilon == pytest.approx(star.largest_epsilon, rel=1e-12, abs=1e-12)
        figure = db.budget().largest_epsilon
        assert db.explain("SELECT COUNT(*) FROM readings", epsilon=figure * (1 - 1e-6)).admissible
        assert not db.explain("SELECT COUNT(*) FROM readings", epsilon=figure * 1.001).admissible
        assert db.explain(PINNED, epsilon=answers[1].largest_epsilon * (1 - 1e-5)).admissible
        assert not db.explain(PINNED, epsilon=answers[1].largest_epsilon * 1.01).admissible


def test_an_answer_over_several_days_is_a_series_answer_charged_to_each_day_it_reads(setup) -> None:
    """A count over a window of days stays in the model (§20): it is charged to each day the
    WHERE leaves possible, the ledger keeps them as a series, and the transcript's level is the
    quilt map's at the per-day spending; reading another column still leaves the model."""
    declared = parse_policy(policy()).models[0]
    query = DependenceModel(DAYS, 0.9)
    with connect(setup) as db:
        db.query(GROUPED, epsilon=0.8)
        assert db.explain('SELECT COUNT(*) FROM readings WHERE "on"', epsilon=0.05).mode == "model"
        window = db.query('SELECT COUNT(*) FROM readings WHERE "on" AND day > 1', epsilon=0.3)
        assert window.mode == "model"
        grouped_dp = db.history()[0].epsilon_dp
        spend = (grouped_dp, grouped_dp, grouped_dp + window.epsilon_dp,
                 grouped_dp + window.epsilon_dp)
        total = grouped_dp + window.epsilon_dp
        expected = min(tight_level(total, query), declared.capped(total, query, spend, True))
        assert db.budget().spent_ip == pytest.approx(expected, rel=1e-9)
        with pytest.raises(InputError, match="it reads readings.day, readings.kind"):
            db.explain("SELECT day, COUNT(*) FROM readings WHERE kind = 'a' GROUP BY day",
                       epsilon=0.5, mode="model")
    with contextlib.closing(sqlite3.connect(setup / "ledger.sqlite")) as conn:
        stored = [json.loads(t) for (t,) in conn.execute("SELECT times FROM charges ORDER BY id")]
    assert stored == [[0, 1, 2, 3], {"series": [2, 3]}]
    with connect(setup) as db:  # a restart rebuilds the same books
        assert db.budget().spent_ip == pytest.approx(expected, rel=1e-9)


def test_explain_moves_each_transition_probability(setup) -> None:
    with connect(setup) as db:
        shown = db.explain(PINNED, epsilon=0.5).to_dict()
    assert [c["change"] for c in shown["model_checks"]] == [
        "P(True | False) 0.15", "P(True | False) 0.25", "P(False | True) 0.25",
        "P(False | True) 0.35"]
    assert all(c["level"] > 0 for c in shown["model_checks"])
    assert shown["model"] == "Markov chain of readings.on over readings.day 0..3"


V4_CHARGES = """CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL,
    analyst TEXT NOT NULL, sql TEXT NOT NULL, epsilon REAL NOT NULL,
    epsilon_dp REAL NOT NULL CHECK (epsilon_dp >= 0), mode TEXT NOT NULL, k INTEGER NOT NULL,
    eta REAL NOT NULL, aggregates TEXT NOT NULL, answer TEXT, columns TEXT)"""


def test_a_version_4_ledger_is_migrated_and_its_charges_have_no_time_points(tmp_path) -> None:
    """A ledger as version 4 wrote it (no time points, no models) migrates in place to 6; its
    past charges read no single time point, so a chain never covers them."""
    plain = policy([]) | {"dependence": {"k": DAYS, "eta": 0.9}}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(plain))
    path = tmp_path / "ledger.sqlite"
    create_ledger(path, tmp_path / "policy.yaml")
    with contextlib.closing(sqlite3.connect(path)) as conn:  # back to version 4's layout
        conn.execute("DROP TABLE charges")
        conn.execute(V4_CHARGES)
        conn.execute("DELETE FROM meta WHERE key = 'models'")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        conn.execute("INSERT INTO charges (time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, "
                     "aggregates, answer, columns) VALUES ('t', 'a', 'SELECT 1', 0.5, 0.25, "
                     "'tight', 4, 0.9, '[]', NULL, '[\"readings.day\", \"readings.on\"]')")
        conn.commit()
    from dpsql.engine.accounting.ledger_binding import binding_of
    from dpsql.engine.policy_yaml import load_policy

    ledger = Ledger(path, binding_of(load_policy(tmp_path / "policy.yaml")))
    try:
        books = ledger.state().books
    finally:
        ledger.close()
    assert (books.spent, books.read, books.times) == (0.25, frozenset({"readings.day", "readings.on"}), None)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(charges)")]
    assert version == (SCHEMA_VERSION,) == ("6",) and columns[-1] == "times"


@pytest.mark.parametrize("change,message", [
    ({"time": "kind"}, "time: expected another int column with lower and upper bounds"),
    ({"initial": [0.5, 0.3, 0.2]}, "initial: expected 2 probabilities"),
    ({"transition": [[0.8, 0.3], [0.3, 0.7]]}, "transition row 0"),
    ({"time": "on"}, "time: expected another int column"),
    ({"column": "day"}, "a chain.s column needs a public domain"),
])
def test_bad_chain_declarations_are_refused_naming_the_field(change, message) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy(policy([dict(CHAIN, **change)]))


def test_a_chain_needs_k_of_its_time_points_and_its_eta() -> None:
    small = policy() | {"dependence": {"k": DAYS - 1, "eta": 0.9, "models": [CHAIN]}}
    with pytest.raises(PolicyError, match=f"the model implies k={DAYS} and eta=0.55"):
        parse_policy(small)
    low = policy() | {"dependence": {"k": DAYS, "eta": 0.5, "models": [CHAIN]}}
    with pytest.raises(PolicyError, match="but the policy declares k=4 and eta=0.5"):
        parse_policy(low)


def test_chain_pmf_is_the_chain() -> None:
    model = MarkovModel.binary(0.2, 0.3)
    pmf = chain_pmf(model, 3)
    assert pmf.sum() == pytest.approx(1.0)
    assert pmf[0, 1, 1] == pytest.approx(model.initial[0] * 0.2 * 0.7)
    assert reduce(lambda a, _: a.sum(axis=0), range(2), pmf) == pytest.approx(
        model.marginals(3)[2])


def test_the_report_accounts_the_chain_as_the_engine_does(setup) -> None:
    with connect(setup) as db:
        db.query(GROUPED, epsilon=0.8)
        db.query(PINNED, epsilon=0.5)
        level = db.budget().spent_ip
        report = db.report()
    assert report.totals.transcript_level == pytest.approx(level, rel=1e-12)
    assert report.levels[-1] == pytest.approx(level, rel=1e-12)


# ---- every declared column set holding the modelled column -----------------------------------

STICKY = MarkovModel((0.9, 0.1), ((0.99, 0.01), (0.01, 0.99)))


def sticky_policy(declarations: list) -> dict:
    model = dict(CHAIN, initial=list(STICKY.initial),
                 transition=[list(r) for r in STICKY.transition])
    out = policy([model])
    out["dependence"] = {"k": 6, "eta": 1.0, "models": [model], "eta_by_columns": declarations}
    out["tables"]["readings"]["columns"]["day"]["upper"] = 5
    return out


def test_a_set_holding_only_the_modelled_column_must_declare_the_chains_eta() -> None:
    """{on} alone carries the whole chain's dependence (each record's day is its own), so an
    eta below the chain's for it, or for any set naming it, is refused; sets without it and
    an eta at least the chain's are accepted."""
    implied = chain_eta(STICKY, 6)
    assert implied > 0.98
    for columns in (["on"], ["on", "kind"], ["on", "day"]):
        with pytest.raises(PolicyError, match=r"implies k=6 and eta=0\.98.*declares k=6 and eta=0 ")\
                as caught:
            parse_policy(sticky_policy([{"columns": columns, "eta": 0}]))
        assert caught.value.eta == pytest.approx(implied)
    accepted = parse_policy(sticky_policy([{"columns": ["kind"], "eta": 0},
                                           {"columns": ["on"], "eta": round(implied + 1e-4, 4)}]))
    assert accepted.eta_for(frozenset({"readings.on"})).eta >= implied


def test_the_sticky_count_is_private_only_at_the_chains_eta() -> None:
    """The exact audit of the hole: a COUNT of on over T = 6 days of the sticky chain at the
    tight map's eps_dp for eta 0 (the declaration now refused) is at level 2.23 > epsilon = 1;
    at the chain's own eta it meets 1."""
    pmf = chain_pmf(STICKY, 6)
    count = np.indices(pmf.shape).sum(axis=0)
    with_zero = invert("tight", 1.0, DependenceModel(6, 0.0))
    assert exact_audit(pmf, with_zero, count).level == pytest.approx(2.23, abs=0.005)
    honest = invert("tight", 1.0, DependenceModel(6, chain_eta(STICKY, 6)))
    assert exact_audit(pmf, honest, count).level <= 1.0 + SLACK


def test_the_owner_check_counts_rows_breaking_the_chains_assumptions(tmp_path, capsys) -> None:
    """`dpsql dependence check` passes the chain's readings and, with a meter column as the
    person, counts a day outside the bounds, a NULL value and a repeated (meter, day)."""
    write_readings(tmp_path / "readings.duckdb")
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy()))
    args = ("dependence", "check", "--db", str(tmp_path / "readings.duckdb"), "--policy",
            str(tmp_path / "policy.yaml"), "--format", "json")
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and json.loads(out)[0] | {"valid": True} == json.loads(out)[0]
    with duckdb.connect(str(tmp_path / "readings.duckdb")) as conn:
        conn.execute("ALTER TABLE readings ADD COLUMN meter INTEGER")
        conn.execute("UPDATE readings SET meter = (rowid // 4)")
        conn.execute("INSERT INTO readings VALUES (9, true, 'a', 1000), (1, NULL, 'a', 1001), "
                     "(2, false, 'a', 0)")
    grouped = policy()
    grouped["tables"]["readings"]["columns"]["meter"] = {"type": "int"}
    grouped["tables"]["readings"]["dependence_group"] = "meter"
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(grouped))
    code, out, _ = run_cli(capsys, *args)
    assert code == 2
    chain = next(c for c in json.loads(out) if "time" in c)
    assert (chain["outside_times"], chain["outside_values"], chain["repeated"]) == (1, 1, 1)
