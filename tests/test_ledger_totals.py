"""The ledger's running totals give exactly what a scan of every charge gives (the spending as
math.fsum of the charges, the union of the columns read, the spending per time point summed in
charge order), in total and per analyst; a version 5 ledger written before them is migrated in
place with identical figures and answers; a write the engine did not total is noticed."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from pathlib import Path

from dpsql.engine.accounting import chain
from dpsql.engine.accounting import totals as ledger_totals
from dpsql.engine.accounting.ledger import Charge, Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding
from dpsql.engine.report.ledger import read_ledger
from dpsql.engine.result import AnswerCost
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql import PrivateDatabase
from tests.support import create_ledger, make_people, record_charge, write_policy

BINDING = LedgerBinding(budget=1e6, k=2, eta=0.1)
V5_CHARGES = """CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL,
    analyst TEXT NOT NULL, sql TEXT NOT NULL, epsilon REAL NOT NULL,
    epsilon_dp REAL NOT NULL CHECK (epsilon_dp >= 0), mode TEXT NOT NULL, k INTEGER NOT NULL,
    eta REAL NOT NULL, aggregates TEXT NOT NULL, answer TEXT, columns TEXT, times TEXT)"""

eps = st.one_of(st.floats(0.0, 10.0), st.floats(1e-300, 1e-280), st.floats(1e10, 1e12),
                st.sampled_from([0.1, 0.2, 0.3, 5e-324]))
columns = st.one_of(st.none(), st.frozensets(st.sampled_from(["t.a", "t.b", "t.c"]), max_size=2))
times = st.one_of(st.none(), st.lists(st.integers(0, 4), max_size=3).map(tuple))
charges = st.lists(st.tuples(st.sampled_from(["ann", "bob"]), eps, columns, times), max_size=25)


def scanned(path: Path, analyst: str | None = None) -> tuple:
    """What a scan of every charge gives (the ledger's own reads before running totals)."""
    where, args = ("", []) if analyst is None else (" WHERE analyst = ?", [analyst])
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(f"SELECT epsilon_dp, columns, times FROM charges{where} ORDER BY id",
                            args).fetchall()
    spent = math.fsum(r[0] for r in rows)
    texts = [r[1] for r in rows]
    read = None if None in texts else frozenset(c for t in texts for c in json.loads(t))
    untimed = any(t is None and (c is None or c != "[]") for _, c, t in rows)
    spend: dict[int, float] | None = None if untimed else {}
    for eps_dp, _, text in rows:
        if spend is not None and text is not None:
            for t in json.loads(text):
                spend[t] = spend.get(t, 0.0) + eps_dp
    return spent, read, spend


def figures(ledger: Ledger, analysts: tuple[str, ...] = ("ann", "bob")) -> tuple:
    books = ledger.state().books
    mine = []
    for name in analysts:
        totals = ledger_totals.read(ledger._conn, ledger.path, name)
        mine.append((totals.spent(ledger.path), totals.read, totals.time_spend()))
    return (books.spent, books.read, books.times), mine


def _charge(analyst: str, eps_dp: float, cols, points, answer: dict | None = None) -> Charge:
    return Charge(analyst, "SELECT COUNT(*) FROM t", AnswerCost(1.0, eps_dp, "auto", 2, 0.1), (),
                  answer, cols, points)


@settings(max_examples=40, deadline=None)
@given(charges)
def test_running_totals_equal_a_scan_of_every_charge(tmp_path_factory, sequence):
    path = create_ledger(tmp_path_factory.mktemp("totals") / "ledger.sqlite", BINDING)
    with Ledger(path, BINDING) as ledger:
        for i, (analyst, eps_dp, cols, points) in enumerate(sequence):
            # Named, the analyst's totals are read with the ledger's in one statement.
            charge = _charge(analyst, eps_dp, cols, points)
            ledger.charge(lambda state, charge=charge: (charge, None), analyst if i % 2 else None)
        whole, mine = figures(ledger)
        assert whole == scanned(path)
        assert mine == [scanned(path, "ann"), scanned(path, "bob")]
        assert ledger.spent_dp() == math.fsum(e for _, e, _, _ in sequence)


def test_a_write_the_engine_did_not_total_is_read_from_the_charges(tmp_path):
    path = create_ledger(tmp_path / "ledger.sqlite", BINDING)
    with Ledger(path, BINDING) as ledger:
        for i in range(4):
            record_charge(ledger, _charge("ann", 0.25, frozenset({"t.a"}), (i,)))
    with contextlib.closing(sqlite3.connect(path)) as raw:
        raw.execute("UPDATE charges SET columns = NULL, times = NULL WHERE id = 2")
        raw.execute("DELETE FROM charges WHERE id = 3")
        raw.commit()
    with Ledger(path, BINDING) as ledger:
        assert figures(ledger, ("ann",)) == (scanned(path), [scanned(path, "ann")])
        assert ledger.state().books.spent == 0.75 and ledger.state().books.read is None
        record_charge(ledger, _charge("ann", 0.5, frozenset(), None))
        assert figures(ledger, ("ann",)) == (scanned(path), [scanned(path, "ann")])


def _as_version_5(path: Path, sequence: list) -> None:
    """Turn a new ledger back into version 5's layout (answers in the charges, no totals) and
    fill it with `sequence`, as the engine before running totals wrote it."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP TABLE charges")
        conn.execute("DROP TABLE answers")
        conn.execute("DROP TABLE totals")
        conn.execute("DROP TABLE links")  # version 5 predates the hash chain
        conn.execute(V5_CHARGES)
        conn.execute("DELETE FROM meta WHERE key = 'totals'")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        for i, (analyst, eps_dp, cols, points) in enumerate(sequence):
            conn.execute(
                "INSERT INTO charges (time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, "
                "aggregates, answer, columns, times) VALUES (?, ?, ?, 1.0, ?, 'auto', 2, 0.1, "
                "'[]', ?, ?, ?)",
                [f"2026-01-01T00:00:{i:02d}+00:00", analyst, f"SELECT {i}", eps_dp,
                 None if i % 3 == 0 else json.dumps({"answer": i}),
                 None if cols is None else json.dumps(sorted(cols)),
                 None if points is None else json.dumps(list(points))])
        conn.commit()


@settings(max_examples=15, deadline=None)
@given(charges)
def test_a_version_5_ledger_is_migrated_in_place_with_identical_figures(tmp_path_factory,
                                                                        sequence):
    path = create_ledger(tmp_path_factory.mktemp("v5") / "ledger.sqlite", BINDING)
    _as_version_5(path, sequence)
    before = (scanned(path), [scanned(path, "ann"), scanned(path, "bob")])
    report = read_ledger(path).answers
    with Ledger(path, BINDING) as ledger:
        assert figures(ledger) == before
        for analyst in ("ann", "bob"):
            assert [(e.sql, e.answer) for e in ledger.history(analyst)] == [
                (f"SELECT {i}", None if i % 3 == 0 else {"answer": i})
                for i, c in enumerate(sequence) if c[0] == analyst]
    assert read_ledger(path).answers == report
    with contextlib.closing(sqlite3.connect(path)) as conn:
        layout = [row[1] for row in conn.execute("PRAGMA table_info(charges)")]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        chained = chain.verify(conn)
    assert "answer" not in layout and {"answers", "totals", "charges_by_analyst"} <= tables
    assert (chained.problem, chained.records) == (None, len(sequence)), "chained when migrated"


def test_stored_answers_are_read_from_their_own_table(tmp_path):
    path = create_ledger(tmp_path / "ledger.sqlite", BINDING)
    with Ledger(path, BINDING) as ledger:
        record_charge(ledger, _charge("ann", 0.5, frozenset(), None, {"rows": [[1]]}))
        record_charge(ledger, _charge("bob", 0.5, frozenset(), None))
        assert [e.answer for e in ledger.history("ann")] == [{"rows": [[1]]}]
        assert [e.answer for e in ledger.history("bob", 2)] == [None]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT id, answer FROM answers").fetchall() == [
            (1, '{"rows": [[1]]}')]


def test_a_warm_query_costs_the_ledger_the_same_statements_however_many_answers_it_holds(
        tmp_path):
    """One charged query reads the ledger in one statement before the run and one under the
    write lock, then inserts its rows, links and totals and commits once: the same statements
    on a ledger of 1 and of 40 stored answers, from two analysts (twice as many before
    what a charge reads was read together)."""
    data, policy = make_people(tmp_path / "people.duckdb"), write_policy(tmp_path / "p.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    counted: list[list[str]] = []

    def trace(text: str) -> None:  # a statement, traced again as it runs a trigger: once
        if text.startswith("-- "):  # what a statement runs inside it (a pragma function's)
            return
        words = " ".join(text.split()[:3])
        if not counted[-1] or counted[-1][-1] != words:
            counted[-1].append(words)

    with PrivateDatabase.connect(data, policy, ledger, reuse=False) as db:
        db.ledger._conn.set_trace_callback(trace)
        for i in range(41):
            counted.append([])
            db.query("SELECT COUNT(*) AS n FROM people", epsilon=0.01,
                     analyst="ann" if i % 2 else "bob")
    first, last = counted[1], counted[-1]
    assert first == last
    assert len(last) <= 13 and last.count("COMMIT") == 1, "; ".join(last)
