"""Budgets a user can spend: the binding is read in every charge, the owner's mode binds,
the largest epsilon shown is the largest admitted, costs add up to the budget, and a ledger
is only created explicitly."""

from __future__ import annotations

import contextlib
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dpsql.calibration import DependenceModel, calibrate, guarantee, mode_dominates
from dpsql.engine import BudgetExhausted, InputError, LedgerError, PrivateDatabase
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import charge_count, create_ledger, run_cli, write_policy

ROOT = Path(__file__).resolve().parents[1]
COUNT = "SELECT COUNT(*) AS n FROM people"



def _charges(ledger: Path) -> int:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


def _policy(path: Path, budget: float, k: int = 1, eta: float = 0.0, mode: str = "auto") -> Path:
    return write_policy(path, {"budget": {"epsilon": budget},
                               "dependence": {"k": k, "eta": eta, "mode": mode}})


# --- the binding is read inside every charge ---------------------------------------------

def test_a_connection_opened_before_the_owner_tightens_is_held_to_the_tighter_budget(
        tmp_path, setup):
    loose = _policy(tmp_path / "loose.yaml", 4.0)
    tight = _policy(tmp_path / "tight.yaml", 1.0)
    ledger = create_ledger(tmp_path / "l.sqlite", loose)
    with PrivateDatabase.connect(setup.db, loose, ledger, reuse=False) as early:
        subprocess.run([sys.executable, "-c", "import sys; from dpsql.engine import PrivateDatabase; "
                        "PrivateDatabase.connect(*sys.argv[1:4]).close()",
                        str(setup.db), str(tight), str(ledger)], cwd=ROOT, check=True)
        refusals = []
        for _ in range(3):
            try:
                early.query(COUNT, epsilon=1.0)
            except BudgetExhausted as exc:
                refusals.append(exc)
        assert _charges(ledger) == 1 and len(refusals) == 2
        assert all(r.largest_epsilon == 0.0 for r in refusals)
        assert early.budget().total == 1.0 and early.budget().largest_epsilon == 0.0


def test_a_tightened_model_recalibrates_an_old_connection(tmp_path, setup):
    """The owner raises eta: an old connection's answers are calibrated to the stricter model."""
    loose = _policy(tmp_path / "loose.yaml", 100.0, k=4, eta=0.05)
    strict = _policy(tmp_path / "strict.yaml", 100.0, k=4, eta=0.5)
    ledger = create_ledger(tmp_path / "l.sqlite", loose)
    with PrivateDatabase.connect(setup.db, loose, ledger) as early:
        PrivateDatabase.connect(setup.db, strict, ledger).close()
        result = early.query(COUNT, epsilon=1.0)
    assert result.epsilon_dp == calibrate(1.0, DependenceModel(4, 0.5)).epsilon_dp
    assert result.epsilon_dp < calibrate(1.0, DependenceModel(4, 0.05)).epsilon_dp


# --- the owner's mode binds ----------------------------------------------------------------

def test_an_analyst_may_ask_a_more_conservative_mode_never_a_looser_one(tmp_path, setup):
    policy = _policy(tmp_path / "group.yaml", 100.0, k=4, eta=0.05, mode="group")
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger) as db:
        for looser, epsilon in (("tight", 1.0), ("auto", 1.0), ("theorem2", 2.0)):
            with pytest.raises(InputError, match=f"mode {looser} is looser than the policy's"):
                db.query(COUNT, epsilon=epsilon, mode=looser)
            with pytest.raises(InputError, match="looser"):
                db.explain(COUNT, epsilon=epsilon, mode=looser)
        assert _charges(ledger) == 0
        default = db.query(COUNT, epsilon=1.0)
        conservative = db.query(COUNT, epsilon=0.8, mode="theorem2")  # 0.107 < group's 0.2
    assert default.mode == "group" and default.epsilon_dp == 0.25
    assert conservative.mode == "theorem2" and conservative.epsilon_dp < 0.8 / 4


def test_the_accountant_uses_the_policys_map(tmp_path, setup):
    """Under mode: group the transcript level is k * S, not the tight map's smaller value."""
    policy = _policy(tmp_path / "group.yaml", 100.0, k=4, eta=0.05, mode="group")
    with PrivateDatabase.connect(setup.db, policy, create_ledger(tmp_path / "l.sqlite", policy), reuse=False) \
            as db:
        first = db.query(COUNT, epsilon=1.0)
        second = db.query(COUNT, epsilon=1.0)
    assert first.level_after == 1.0 and second.level_after == 2.0
    assert second.budget.spent_ip == 4 * second.budget.spent_dp


def test_a_change_of_mode_binds_like_the_other_fields(tmp_path):
    path = tmp_path / "l.sqlite"
    create_ledger(path, LedgerBinding(4.0, 4, 0.05, "auto"))
    Ledger(path, LedgerBinding(4.0, 4, 0.05, "tight")).close()  # the same map
    Ledger(path, LedgerBinding(4.0, 4, 0.05, "group")).close()  # stricter: recorded
    for looser in ("auto", "tight", "theorem2"):
        with pytest.raises(LedgerError, match=rf"more lenient \(mode 'group' -> '{looser}'\)"):
            Ledger(path, LedgerBinding(4.0, 4, 0.05, looser))
    Ledger(path, LedgerBinding(4.0, 4, 0.5, "theorem2")).close()  # eta >= 1/2: above group
    with contextlib.closing(sqlite3.connect(path)) as conn:
        modes = [row[0] for row in conn.execute("SELECT mode FROM bindings ORDER BY id")]
    assert modes == ["auto", "tight", "group", "theorem2"]


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 40), eta=st.floats(0, 1),
       new=st.sampled_from(["auto", "tight", "group", "theorem2", "independent"]),
       old=st.sampled_from(["auto", "tight", "group", "theorem2", "independent"]))
def test_mode_order_holds_pointwise(k, eta, new, old):
    """Whenever mode_dominates says yes, the new map is >= the old at every eps_dp checked."""
    model = DependenceModel(k, eta)
    if "independent" in (new, old) and not model.is_independent:
        return
    if not mode_dominates(new, old, model):
        return
    for x in np.geomspace(1e-9, 50, 400):
        assert guarantee(new, x, model) >= guarantee(old, x, model) * (1 - 1e-12) - 1e-15


def test_mode_order_is_not_too_strict_where_maps_cross():
    model = DependenceModel(4, 0.05)
    low, high = 0.01, 10.0
    assert guarantee("group", low, model) < guarantee("theorem2", low, model)
    assert guarantee("group", high, model) > guarantee("theorem2", high, model)
    assert not mode_dominates("group", "theorem2", model)
    assert not mode_dominates("theorem2", "group", model)


# --- what is left is what can be spent ---------------------------------------------------

MODELS = [(1, 0.0, "auto"), (4, 0.05, "auto"), (4, 0.05, "group"), (10, 0.001, "theorem2"),
          (10, 0.5, "tight")]


@pytest.mark.parametrize(("k", "eta", "mode"), MODELS)
@pytest.mark.parametrize("spent_asks", [[], [0.5], [1.3, 0.2, 0.7]])
def test_the_largest_epsilon_shown_is_admitted_and_a_little_more_is_refused(
        tmp_path, setup, k, eta, mode, spent_asks):
    policy = _policy(tmp_path / "p.yaml", 4.0, k=k, eta=eta, mode=mode)
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger, reuse=False) as db:
        for epsilon in spent_asks:
            if epsilon > math.log(2) or mode != "theorem2":
                db.query(COUNT, epsilon=epsilon)
        largest = db.budget().largest_epsilon
        assert largest > 0
        assert db.explain(COUNT, epsilon=largest).budget.largest_epsilon == largest
        assert not db.explain(COUNT, epsilon=largest * 1.001).admissible
        with pytest.raises(BudgetExhausted, match="^over budget") as info:
            db.query(COUNT, epsilon=largest * 1.001)
        assert info.value.asked == largest * 1.001 and info.value.largest_epsilon == largest
        assert info.value.cost > 4.0 - db.budget().spent_ip
        answer = db.query(COUNT, epsilon=largest)
        assert answer.budget.spent_ip == pytest.approx(4.0, rel=1e-9)
        assert answer.budget.largest_epsilon == 0.0
        with pytest.raises(BudgetExhausted, match="nothing more can be asked"):
            db.query(COUNT, epsilon=1.0)


def test_the_cost_of_an_answer_is_the_rise_of_the_level_and_explain_shows_it(tmp_path, setup):
    policy = _policy(tmp_path / "p.yaml", 4.0, k=10, eta=0.001)
    with PrivateDatabase.connect(setup.db, policy, create_ledger(tmp_path / "l.sqlite", policy), reuse=False) \
            as db:
        db.query(COUNT, epsilon=0.5)
        ex = db.explain(COUNT, epsilon=0.5)
        answer = db.query(COUNT, epsilon=0.5)
    assert ex.cost == answer.cost == answer.level_after - answer.level_before
    assert answer.cost > 0.5, "convexity: the second answer at 0.5 raises the level by more"
    assert answer.to_dict()["cost"] == answer.cost


def test_costs_add_up_exactly_to_the_budget(tmp_path, setup):
    policy = _policy(tmp_path / "p.yaml", 4.0, k=10, eta=0.001)
    with PrivateDatabase.connect(setup.db, policy, create_ledger(tmp_path / "l.sqlite", policy), reuse=False) \
            as db:
        answers = [db.query(COUNT, cost=cost) for cost in (1.0, 0.5, 2.0, 0.5)]
        with pytest.raises(BudgetExhausted, match="asks cost 0.001"):
            db.query(COUNT, cost=1e-3)
    for answer, asked in zip(answers, (1.0, 0.5, 2.0, 0.5), strict=True):
        assert answer.cost == pytest.approx(asked, rel=1e-9) and answer.cost <= asked * (1 + 1e-12)
        assert answer.epsilon <= asked, "the answer alone is at most cost-private"
    assert math.fsum(a.cost for a in answers) == pytest.approx(4.0, rel=1e-9)
    assert answers[-1].budget.spent_ip == pytest.approx(4.0, rel=1e-9)


def test_cli_shows_cost_and_largest_epsilon_and_asks_by_cost(capsys, tmp_path, setup):
    policy = _policy(tmp_path / "p.yaml", 1.0)
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    args = ["--db", str(setup.db), "--policy", str(policy), "--ledger", str(ledger)]
    def run(*extra):
        code, out, err = run_cli(capsys, *extra)
        return code, " ".join(out.split()), err

    code, out, _ = run("query", *args, "--cost", "0.25", COUNT)
    assert code == 0 and "cost 0.25" in out and "largest epsilon this query can still ask: 0.75" in out
    code, out, _ = run("explain", *args, "--epsilon", "0.5", COUNT)
    assert code == 0 and "cost 0.5" in out and "largest epsilon this query can still ask: 0.75" in out
    code, _, err = run_cli(capsys, "query", *args, "--epsilon", "0.8", COUNT)
    assert code == 3 and err.startswith("error: over budget") and err.count("\n") == 1
    assert "largest epsilon you can still ask is 0.75" in err
    code, _, err = run_cli(capsys, "query", *args, COUNT)
    assert code == 2 and err.startswith("error: missing option --epsilon") and err.count("\n") == 1
    assert _charges(ledger) == 1


# --- ledgers are created explicitly ----------------------------------------------------------

def test_a_missing_ledger_is_refused_with_how_to_create_one(capsys, tmp_path, setup):
    typo = tmp_path / "ledgr.sqlite"
    for command in ("query", "explain"):
        code, out, err = run_cli(capsys, command, "--db", str(setup.db), "--policy",
                              str(setup.policy), "--ledger", str(typo), "--epsilon", "1", COUNT)
        assert code == 2 and out == "" and err.count("\n") == 1
        assert f"dpsql ledger init --ledger {typo} --policy POLICY" in err
    with pytest.raises(LedgerError, match="create=True"):
        PrivateDatabase.connect(setup.db, setup.policy, typo)
    assert not typo.exists() and list(tmp_path.glob("*ledgr*")) == []


def test_ledger_init_creates_once(capsys, tmp_path, setup):
    path = tmp_path / "new.sqlite"
    code, out, _ = run_cli(capsys, "ledger", "init", "--ledger", str(path), "--policy",
                        str(setup.policy))
    assert code == 0 and "created ledger" in out and path.is_file()
    with PrivateDatabase.connect(setup.db, setup.policy, path) as db:
        db.query(COUNT, epsilon=1.0)
    code, _, err = run_cli(capsys, "ledger", "init", "--ledger", str(path), "--policy",
                        str(setup.policy))
    assert code == 2 and "already exists" in err and _charges(path) == 1
    with pytest.raises(LedgerError, match="already exists"):
        PrivateDatabase.connect(setup.db, setup.policy, path, create=True)
    other = tmp_path / "python.sqlite"
    PrivateDatabase.connect(setup.db, setup.policy, other, create=True).close()
    assert other.is_file() and _charges(other) == 0


def test_the_report_shows_the_same_largest_epsilon(tmp_path, setup, capsys):
    policy = _policy(tmp_path / "p.yaml", 4.0, k=4, eta=0.05, mode="group")
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger) as db:
        db.query(COUNT, epsilon=1.0)
        shown = db.budget().largest_epsilon
        totals = db.report().totals
    assert shown == 3.0 and totals.largest_epsilon == shown and totals.mode == "group"
    assert totals.transcript_level == 1.0, "the report accounts with the policy's map too"
    code, out, _ = run_cli(capsys, "report", "--ledger", str(ledger))
    assert code == 0 and "largest ε a query reading no column (COUNT(*)) can still ask" in out


def test_a_cost_is_priced_against_the_spending_read_in_the_charge(tmp_path, setup):
    """Two connections ask by cost in turn: each answer's eps_dp is computed from the spending
    the charge reads (not from what the connection saw before), so the costs still add up."""
    policy = _policy(tmp_path / "p.yaml", 4.0, k=10, eta=0.001)
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy, ledger, reuse=False) as a, \
            PrivateDatabase.connect(setup.db, policy, ledger, reuse=False) as b:
        planned = a.explain(COUNT, cost=1.0).epsilon_dp
        first = b.query(COUNT, cost=1.0)
        second = a.query(COUNT, cost=1.0)
    assert first.epsilon_dp == planned and second.epsilon_dp < planned
    assert (first.cost, second.cost) == (pytest.approx(1.0, rel=1e-12), pytest.approx(1.0, rel=1e-12))
    assert second.budget.spent_ip == pytest.approx(2.0, rel=1e-12)


def test_an_analyst_over_budget_never_reaches_the_data(setup, monkeypatch):
    """With nothing left to spend, a query is refused before it runs on the data: its running
    time, or a cancellation at the time limit, would otherwise be a free signal."""
    write_policy(setup.policy, {"budget": {"epsilon": 1.0}})
    ledger = create_ledger(setup.ledger.with_name("small.sqlite"), setup.policy)
    with PrivateDatabase.connect(setup.db, setup.policy, ledger) as db:
        db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
        ran = []
        monkeypatch.setattr(db._backend, "run", lambda *args: ran.append(args))
        with pytest.raises(BudgetExhausted):
            db.query("SELECT COUNT(*) FROM people WHERE age > 30", epsilon=0.5)
    assert ran == [] and charge_count(ledger) == 1


def test_a_ledger_refuses_a_policy_with_other_privacy_units(setup, capsys):
    """Every epsilon a ledger recorded is about the individuals its policy identified; a policy
    that identifies them otherwise (here: rows instead of persons) needs a new ledger."""
    rows = write_policy(setup.policy.with_name("rows.yaml"), {"tables": {"people": {
        "columns": {"age": {"type": "int", "lower": 0, "upper": 100}}}}})
    with pytest.raises(LedgerError, match="privacy unit") as refused:
        PrivateDatabase.connect(setup.db, rows, setup.ledger)
    assert '"people": "person_id"' in str(refused.value) and '"people": null' in str(refused.value)
    code, _, err = run_cli(capsys, "query", "--db", str(setup.db), "--policy", str(rows),
                           "--ledger", str(setup.ledger), "--epsilon", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and "start a new ledger" in err and charge_count(setup.ledger) == 0
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:  # the same units
        db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
