"""Budget reports: totals, the transcript level, per-analyst subtotals, errors, consistency."""

from __future__ import annotations

import math
import multiprocessing
import sqlite3
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from dpsql.calibration import DependenceModel, calibrate, dp_budget, transcript_level
from dpsql.engine import LedgerError, PrivateDatabase, load_policy
from dpsql.engine.accounting.ledger import Charge, Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding
from dpsql.engine.report.build import build_report
from dpsql.engine.report.values import ENTRY_COLUMNS
from dpsql.engine.result import AggregateRecord, AnswerCost
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import create_ledger, record_charge, write_policy

DEPENDENT = LedgerBinding(budget=4.0, k=10, eta=0.001)
AGGREGATE = {"column": "n", "function": "COUNT(*)", "mechanism": "discrete_laplace",
             "sensitivity": 2.0, "epsilon_dp": 0.1, "scale": 20.0}
RECORD = AggregateRecord(**AGGREGATE)


def write_ledger(path: Path, asks: list[tuple[str, float, str]],
                 binding: LedgerBinding = DEPENDENT) -> Path:
    """A ledger bound to `binding`, one charge per (analyst, epsilon, mode) calibrated as the engine does."""
    model = DependenceModel(binding.k, binding.eta)
    book = Ledger(create_ledger(path, binding), binding)
    try:
        for i, (analyst, epsilon, mode) in enumerate(asks):
            cal = calibrate(epsilon, model, mode)
            cost = AnswerCost(epsilon, cal.epsilon_dp, cal.mode, binding.k, binding.eta)
            record_charge(book, Charge(analyst, f"SELECT COUNT(*) AS n FROM people -- {i}", cost,
                                       (replace(RECORD, epsilon_dp=cal.epsilon_dp),)))
    finally:
        book.close()
    return path


def test_empty_ledger_reports_nothing_spent_and_the_whole_budget_left(tmp_path):
    report = build_report(write_ledger(tmp_path / "l.sqlite", []))
    t = report.totals
    assert (t.answers, t.spent_dp, t.epsilon_asked, t.transcript_level) == (0, 0.0, 0.0, 0.0)
    assert t.remaining == DEPENDENT.budget
    assert t.remaining_dp == pytest.approx(dp_budget(4.0, DependenceModel(10, 0.001)))
    assert t.difference is None
    assert list(report.entries.columns) == ENTRY_COLUMNS and report.entries.empty
    assert report.analysts.empty
    assert any("no answers yet" in note for note in report.notes())


def test_totals_are_the_sums_of_the_entries(tmp_path):
    asks = [("alice", 0.5, "auto"), ("bob", 0.3, "tight"), ("alice", 0.2, "group"), ("carol", 0.1, "auto")]
    report = build_report(write_ledger(tmp_path / "l.sqlite", asks))
    entries, t = report.entries, report.totals
    assert t.answers == len(entries) == 4
    assert t.spent_dp == math.fsum(entries["epsilon_dp"])
    assert t.epsilon_asked == math.fsum(entries["epsilon"]) == pytest.approx(1.1)
    assert entries["cumulative_epsilon_dp"].iloc[-1] == pytest.approx(t.spent_dp)
    assert entries["transcript_level"].iloc[-1] == pytest.approx(t.transcript_level)
    assert entries["transcript_level"].is_monotonic_increasing
    analysts = report.analysts
    assert list(analysts["analyst"]) == ["alice", "bob", "carol"]
    assert analysts["answers"].sum() == t.answers
    assert math.fsum(analysts["spent_dp"]) == pytest.approx(t.spent_dp)
    assert math.fsum(analysts["share_dp"]) == pytest.approx(1.0)


def test_transcript_level_is_the_calibration_transcript_function(tmp_path):
    report = build_report(write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto"), ("b", 0.5, "auto")]))
    t, model = report.totals, DependenceModel(10, 0.001)
    assert t.transcript_level == transcript_level(t.spent_dp, model)
    assert t.information_nats == t.transcript_level
    assert t.information_bits == pytest.approx(t.transcript_level / math.log(2))
    assert t.dp_budget == dp_budget(4.0, model)
    assert t.remaining == pytest.approx(4.0 - t.transcript_level)
    assert t.remaining_dp == pytest.approx(t.dp_budget - t.spent_dp)
    # Two answers at 0.5 are together far more than 1.0-IP with dependent records.
    assert t.transcript_level > 2.0
    assert "above" in t.difference and "DP terms" in t.difference


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["ann", "ben"]), st.floats(0.01, 0.4),
                          st.sampled_from(["auto", "tight", "group"])), max_size=6),
       st.sampled_from([DEPENDENT, LedgerBinding(2.0, 3, 0.2), LedgerBinding(5.0, 1, 0.0)]))
def test_totals_and_level_match_the_accountant_for_any_ledger(asks, binding):
    with tempfile.TemporaryDirectory() as folder:
        report = build_report(write_ledger(Path(folder) / "l.sqlite", asks, binding))
    model = DependenceModel(binding.k, binding.eta)
    t = report.totals
    assert t.spent_dp == math.fsum(a.cost.epsilon_dp for a in report.answers)
    assert t.transcript_level == transcript_level(t.spent_dp, model)
    for sub in report.subtotals:
        assert sub.own_level == transcript_level(sub.spent_dp, model)
    assert (t.difference is None) == math.isclose(t.epsilon_asked, t.transcript_level,
                                                  rel_tol=1e-9, abs_tol=1e-9)


def test_level_below_the_sum_asked_is_explained(tmp_path):
    # Group-mode answers spend epsilon/k each; the tighter map for the whole transcript certifies less.
    report = build_report(write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "group"), ("a", 0.5, "group")]))
    assert report.totals.transcript_level < report.totals.epsilon_asked
    assert "below" in report.totals.difference


def test_independent_records_have_no_difference_to_explain(tmp_path):
    binding = LedgerBinding(budget=3.0, k=1, eta=0.0)
    report = build_report(write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto"), ("b", 0.25, "auto")],
                                       binding))
    assert report.totals.transcript_level == pytest.approx(0.75)
    assert report.totals.difference is None


def test_a_ledger_over_its_budget_says_so(tmp_path):
    report = build_report(write_ledger(tmp_path / "l.sqlite", [("a", 2.0, "auto")] * 3))
    assert report.totals.transcript_level > report.totals.budget
    assert (report.totals.remaining, report.totals.remaining_dp) == (0.0, 0.0)
    assert any("over the budget of 4" in note for note in report.notes())
    assert not any("over the budget" in note for note in build_report(
        write_ledger(tmp_path / "ok.sqlite", [("a", 2.0, "auto")])).notes())


def test_analyst_filter_shows_their_answers_and_keeps_global_totals(tmp_path):
    path = write_ledger(tmp_path / "l.sqlite", [("alice", 0.5, "auto"), ("bob", 0.5, "auto")])
    whole, alice = build_report(path), build_report(path, analyst="alice")
    assert list(alice.entries["analyst"]) == ["alice"]
    assert list(alice.analysts["analyst"]) == ["alice"]
    assert alice.totals.answers == 2 and alice.totals.spent_dp == whole.totals.spent_dp
    assert alice.analysts["own_level"].iloc[0] == pytest.approx(0.5)
    assert alice.entries["transcript_level"].iloc[0] == whole.entries["transcript_level"].iloc[0]
    assert any("only the 1 answer(s) of analyst alice out of 2" in note for note in alice.notes())
    nobody = build_report(path, analyst="zoe")
    assert nobody.entries.empty
    assert any("analysts in this ledger: alice, bob" in note for note in nobody.notes())


def test_a_matching_policy_is_accepted_and_a_different_one_refused(tmp_path):
    path = write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto")])
    same = write_policy(tmp_path / "same.yaml", {"budget": {"epsilon": 4.0},
                                                 "dependence": {"k": 10, "eta": 0.001}})
    assert build_report(path, policy=load_policy(same)).totals.answers == 1
    other = write_policy(tmp_path / "other.yaml", {"budget": {"epsilon": 4.0},
                                                   "dependence": {"k": 5, "eta": 0.001}})
    with pytest.raises(LedgerError, match="bound to a policy with k = 10, but the given policy has k = 5"):
        build_report(path, policy=load_policy(other))


def test_missing_ledger_is_an_error_and_is_not_created(tmp_path):
    path = tmp_path / "absent.sqlite"
    with pytest.raises(LedgerError, match="ledger file not found"):
        build_report(path)
    assert not path.exists()


@pytest.mark.parametrize("content, message", [
    (b"this is not a database at all" * 100, "cannot read ledger"),
    (b"", "not a dpsql ledger"),
])
def test_corrupt_or_foreign_file_is_a_one_line_error(tmp_path, content, message):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(content)
    with pytest.raises(LedgerError, match=message) as info:
        build_report(path)
    assert "\n" not in str(info.value)


def test_damaged_row_is_named(tmp_path):
    path = write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto")])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE charges SET aggregates = 'not json'")
    with pytest.raises(LedgerError, match="answer 1: aggregates must be a JSON list"):
        build_report(path)


def test_report_never_writes_the_ledger(tmp_path):
    path = write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto")])
    before = path.read_bytes()
    build_report(path)
    assert path.read_bytes() == before


def test_all_reads_happen_in_one_read_only_transaction(tmp_path, monkeypatch):
    path = write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto")])
    opened, statements = [], []
    connect = sqlite3.connect

    def traced(target, *args, **kwargs):
        opened.append(target)
        conn = connect(target, *args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    build_report(path)
    assert len(opened) == 1 and opened[0].endswith("?mode=ro")
    assert statements[0] == "BEGIN" and statements[-1] == "COMMIT"
    assert all(s.startswith("SELECT") for s in statements[1:-1]) and len(statements) > 3


def test_uncommitted_charge_is_neither_seen_nor_waited_for(tmp_path):
    path = write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto")])
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO charges (time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, aggregates)"
                   " SELECT time, 'ghost', sql, epsilon, epsilon_dp, mode, k, eta, aggregates FROM charges")
    try:
        started = time.monotonic()
        report = build_report(path)
        assert time.monotonic() - started < 5
        assert report.totals.answers == 1 and "ghost" not in set(report.entries["analyst"])
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def _charge_in_pairs(path: str, pairs: int) -> None:
    """Commit `pairs` transactions of two charges each, as a concurrent writer."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    row = conn.execute("SELECT time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, aggregates "
                       "FROM charges LIMIT 1").fetchone()
    for _ in range(pairs):
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(2):
            conn.execute("INSERT INTO charges (time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, "
                         "aggregates) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        conn.execute("COMMIT")
    conn.close()


def test_reports_stay_consistent_while_another_process_charges(tmp_path):
    path = write_ledger(tmp_path / "l.sqlite", [("a", 0.1, "auto"), ("b", 0.1, "auto")])
    writer = multiprocessing.get_context("spawn").Process(target=_charge_in_pairs, args=(str(path), 150))
    writer.start()
    seen = set()
    try:
        while writer.is_alive() or not seen:
            report = build_report(path)
            t = report.totals
            assert t.answers % 2 == 0, "a report saw half of a committed transaction"
            assert t.answers == len(report.entries) == sum(s.answers for s in report.subtotals)
            assert t.spent_dp == math.fsum(report.entries["epsilon_dp"])
            seen.add(t.answers)
    finally:
        writer.join(60)
    assert writer.exitcode == 0
    assert build_report(path).totals.answers == 302


def test_private_database_report_lists_the_answers_it_released(setup):
    write_policy(setup.policy, {"budget": {"epsilon": 6.0}, "dependence": {"k": 4, "eta": 0.01}})
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, analyst="dana") as db:
        db.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon=0.5)
        db.query("SELECT AVG(income) AS mean FROM people", epsilon=1.0, mode="group")
        report = db.report()
    entries = report.entries
    assert list(entries["sql"]) == ["SELECT state, COUNT(*) AS n FROM people GROUP BY state",
                                    "SELECT AVG(income) AS mean FROM people"]
    assert list(entries["epsilon"]) == [0.5, 1.0] and list(entries["mode"]) == ["tight", "group"]
    assert set(entries["analyst"]) == {"dana"} and set(entries["k"]) == {4}
    assert "discrete_laplace" in entries["aggregates"].iloc[0]
    assert "laplace, sensitivity 2,000" in entries["aggregates"].iloc[1]
    assert report.totals.spent_dp == pytest.approx(math.fsum(entries["epsilon_dp"]))
    assert report.totals.transcript_level == transcript_level(report.totals.spent_dp,
                                                              DependenceModel(4, 0.01))
