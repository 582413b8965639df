"""Every figure an analyst is shown (explain's admissible and largest epsilon, an answer's
largest epsilon and budget, the budget's) is admission's, for that analyst: the global budget
and their cap, the stricter, under each mode and the declared model's per-time-point count."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.errors import BudgetExhausted, InputError
from dpsql.engine.service import auth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import create_ledger
from tests.test_model_chain import GROUPED, PINNED, policy, write_readings

NO_COLUMN = "SELECT COUNT(*) FROM readings"
QUERIES = (GROUPED, PINNED, 'SELECT COUNT(*) FROM readings WHERE "on"', NO_COLUMN)


def make(root: Path, caps: dict[str, float | None], budget: float = 3.0) -> Path:
    """A chain-model policy, its readings and a ledger with `caps` registered."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "policy.yaml").write_text(yaml.safe_dump(policy(budget=budget)))
    if not (root / "readings.duckdb").exists():
        write_readings(root / "readings.duckdb", meters=40)
    create_ledger(root / "ledger.sqlite", root / "policy.yaml")
    with Ledger.reopen(root / "ledger.sqlite") as book:
        for name, cap in caps.items():
            auth.new_analyst(book, name, "analyst", cap)
    return root


def connect(root: Path, analyst: str) -> PrivateDatabase:
    """Reuse off: the figures shown are what a charged answer is admitted at, so no query here
    may be answered from a released one (at cost 0, admitted whatever is left)."""
    return PrivateDatabase.connect(root / "readings.duckdb", root / "policy.yaml",
                                   root / "ledger.sqlite", analyst=analyst, reuse=False)


def admitted(db: PrivateDatabase, sql: str, epsilon: float, mode: str | None) -> bool:
    """Whether a query at `epsilon` is admitted (it is then charged)."""
    try:
        db.query(sql, epsilon=epsilon, mode=mode)
    except BudgetExhausted:
        return False
    return True


def test_explain_and_answers_honour_the_cap(tmp_path) -> None:
    """Alice's cap of 1 bounds what explain, her answer and the budget show her, as admission
    bounds what she asks (before: explain said admissible at 3 with largest 1000s)."""
    root = make(tmp_path, {"alice": 1.0, "bob": None}, budget=1000.0)
    with connect(root, "alice") as db:
        shown = db.explain(PINNED, epsilon=3.0)
        assert not shown.admissible
        assert shown.largest_epsilon < 1.0 + 1e-9
        with pytest.raises(BudgetExhausted) as refused:
            db.query(PINNED, epsilon=3.0)
        assert shown.largest_epsilon == pytest.approx(refused.value.largest_epsilon, rel=1e-9)
        answer = db.query(PINNED, epsilon=0.5)
        cap = db.cap_status("alice")
        assert cap is not None
        assert answer.largest_epsilon == pytest.approx(
            db.explain(PINNED, epsilon=0.1).largest_epsilon, rel=1e-9)
        assert answer.budget.largest_epsilon == pytest.approx(cap.largest_epsilon, rel=1e-9)
        assert answer.largest_epsilon < 1.0
    with connect(root, "bob") as db:  # bob has no cap: the global budget's figure
        assert db.explain(PINNED, epsilon=3.0).admissible
        assert db.explain(PINNED, epsilon=3.0).largest_epsilon > 900


def test_a_tight_chain_answer_shows_what_admission_admits(tmp_path) -> None:
    """A chain answer asked under mode tight, under a model policy, shows the largest epsilon
    the per-time-point accounting admits for it next."""
    root = make(tmp_path, {})
    with connect(root, "analyst") as db:
        answer = db.query(PINNED, epsilon=0.5, mode="tight")
        f = answer.largest_epsilon
        assert f is not None and f > 0
        assert db.explain(PINNED, epsilon=0.5, mode="tight").largest_epsilon == pytest.approx(f)
        assert db.explain(PINNED, epsilon=f * (1 - 1e-6), mode="tight").admissible
        assert not db.explain(PINNED, epsilon=f * 1.001, mode="tight").admissible


def test_a_query_reading_no_column_shows_what_the_chain_admits(tmp_path) -> None:
    """Under a chain policy with budget 1, COUNT(*) (no column read: its level under the model
    is 0, docs/theory.md §19) is admitted at epsilon 10 through the chain's capped map; the
    figure shown is that threshold (before: 1, the mode's alone), before and after answers."""
    root = make(tmp_path, {}, budget=1.0)
    with connect(root, "analyst") as db:
        for ask in (None, PINNED, NO_COLUMN):
            if ask is not None:
                db.query(ask, epsilon=0.2)
            f = db.explain(NO_COLUMN, epsilon=0.1).largest_epsilon
            assert f is not None and f > (9.0 if ask is None else 0.0)
            assert db.budget().largest_epsilon == pytest.approx(f, rel=1e-9)
            assert not db.explain(NO_COLUMN, epsilon=f * 1.001).admissible
            assert db.explain(NO_COLUMN, epsilon=f * (1 - 1e-6)).admissible
        assert not admitted(db, NO_COLUMN, f * 1.001, None)
        assert admitted(db, NO_COLUMN, f * (1 - 1e-6), None)


asks = st.lists(st.tuples(st.sampled_from(["alice", "bob", "carol"]),
                          st.sampled_from(QUERIES),
                          st.sampled_from([None, "tight", "auto", "group"]),
                          st.floats(0.05, 3.0)), min_size=1, max_size=4)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(caps=st.tuples(st.sampled_from([None, 0.7, 2.0]), st.sampled_from([None, 1.5])),
       transcript=asks, probe=st.tuples(st.sampled_from(["alice", "bob", "carol"]),
                                        st.sampled_from(QUERIES),
                                        st.sampled_from([None, "tight"])))
def test_the_shown_figure_is_the_admission_threshold(tmp_path_factory, caps, transcript,
                                                     probe) -> None:
    root = make(tmp_path_factory.mktemp("t"),
                {"alice": caps[0], "bob": caps[1], "carol": None})
    for analyst, sql, mode, epsilon in transcript:
        with connect(root, analyst) as db:
            try:
                admitted(db, sql, epsilon, mode)
            except InputError:
                pass  # a mode looser than the policy's, or not for this query: refused, uncharged
    analyst, sql, mode = probe
    with connect(root, analyst) as db:
        try:
            f = db.explain(sql, epsilon=0.1, mode=mode).largest_epsilon
        except InputError:
            return
        assert f is not None
        if f <= 1e-9 or f * (1 - 1e-6) > 100:  # nothing left, or past the largest epsilon asked
            return
        assert db.explain(sql, epsilon=f * (1 - 1e-6), mode=mode).admissible
        if f * 1.001 <= 100:
            assert not db.explain(sql, epsilon=f * 1.001, mode=mode).admissible
            assert not admitted(db, sql, f * 1.001, mode)
        assert admitted(db, sql, f * (1 - 1e-6), mode)
