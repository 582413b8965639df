"""Answers for free from released ones: the same query asked again by the same analyst, at most
as accurately as an answer already released to them, is that answer at cost 0, says where it
came from, and charges nothing; anything else is charged as before (docs/theory.md §22).
Reuse is asked for (`reuse=True`, `--reuse`); without it every query is charged."""

from __future__ import annotations

import contextlib
import json
import sqlite3

import pandas as pd
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting import reuse_index

from tests.support import cli_paths, run_cli

SQL = "SELECT state, COUNT(*) AS n, SUM(income) AS total FROM people GROUP BY state"


def _charges(ledger) -> int:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


def test_the_same_query_twice_costs_once_and_gives_the_released_answer(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        first = db.query(SQL, epsilon=1.0)
        spent = db.budget().spent_dp
        # The same query in another spelling: the engine's normalisation, not the raw text.
        again = db.query(SQL.replace("GROUP BY", "\n  group   by").lower(), epsilon=1.0)
        assert db.budget().spent_dp == spent, "the second answer charged nothing"
    assert _charges(setup.ledger) == 1
    assert again.cost == 0.0 and again.derived_from == (first.id,) and again.id is None
    assert again.level_after == again.level_before == first.level_after
    pd.testing.assert_frame_equal(again.df, first.df)
    pd.testing.assert_frame_equal(again.ci95, first.ci95)
    pd.testing.assert_frame_equal(again.ci95_simultaneous, first.ci95_simultaneous)
    assert again.epsilon_dp == first.epsilon_dp and first.derived_from == ()
    assert again.to_dict()["derived_from"] == [first.id]
    assert "derived_from" not in first.to_dict(), "a charged answer's JSON is as before"


def test_a_more_accurate_ask_is_charged_and_a_less_accurate_one_reuses_it(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        db.query(SQL, epsilon=0.5)
        larger = db.query(SQL, epsilon=1.0)
        assert larger.cost > 0 and larger.derived_from == ()
        smaller = db.query(SQL, epsilon=0.25)
        assert smaller.derived_from == (larger.id,), "the most accurate released answer"
        assert smaller.epsilon_dp == larger.epsilon_dp
    assert _charges(setup.ledger) == 2


def test_another_analysts_identical_query_is_charged(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        db.query(SQL, epsilon=1.0, analyst="alice")
        bob = db.query(SQL, epsilon=1.0, analyst="bob")
        assert bob.derived_from == () and bob.cost > 0
        assert db.query(SQL, epsilon=1.0, analyst="bob").derived_from == (bob.id,)
    assert _charges(setup.ledger) == 2


def test_another_mode_or_query_is_charged(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        first = db.query(SQL, epsilon=1.0)
        assert db.query(SQL.replace("SUM(income)", "SUM(age)"), epsilon=1.0).derived_from == ()
        assert db.query(SQL, epsilon=1.0, mode="theorem2").derived_from == ()
        # Another name for the same cells is post-processing: answered from them.
        renamed = db.query(SQL.replace("COUNT(*) AS n", "COUNT(*) AS m"), epsilon=1.0)
        assert renamed.derived_from == (first.id,) and list(renamed.df["m"]) == list(first.df["n"])
    assert _charges(setup.ledger) == 3


def test_a_restarted_process_still_reuses(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        first = db.query(SQL, epsilon=1.0)
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        again = db.query(SQL, epsilon=1.0)
    assert again.derived_from == (first.id,) and _charges(setup.ledger) == 1
    pd.testing.assert_frame_equal(again.df, first.df)


def test_a_ledger_written_before_the_index_opens_and_reuses_nothing_old(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        db.query(SQL, epsilon=1.0)
    with contextlib.closing(sqlite3.connect(setup.ledger)) as conn:
        conn.execute("DROP TABLE reusable")  # as a ledger written before this index
        conn.execute("DROP TABLE summable")
        conn.commit()
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        old = db.query(SQL, epsilon=1.0)
        assert old.derived_from == () and old.cost > 0, "an unindexed answer is charged afresh"
        assert db.query(SQL, epsilon=1.0).derived_from == (old.id,)
    assert _charges(setup.ledger) == 2


def test_without_reuse_the_same_query_is_charged_again_with_fresh_noise(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        first = db.query(SQL, epsilon=1.0)
        again = db.query(SQL, epsilon=1.0)
    assert again.derived_from == () and again.cost > 0 and again.id == first.id + 1
    assert _charges(setup.ledger) == 2
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        assert db.query(SQL, epsilon=1.0).derived_from == (again.id,), "indexed all along"


def test_the_lookup_uses_the_index_not_a_scan(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        db.query(SQL, epsilon=1.0)
    with contextlib.closing(sqlite3.connect(setup.ledger)) as conn:
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + reuse_index.LOOKUP,
                                                 ["analyst", "key", 1.0])]
    assert plan[0].startswith("SEARCH r USING PRIMARY KEY (analyst=? AND key=?"), plan
    assert not any(step.startswith("SCAN") for step in plan), plan


def test_explain_says_it_would_cost_nothing_and_why(capsys, setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        before = db.explain(SQL, epsilon=1.0)
        first = db.query(SQL, epsilon=1.0)
        after = db.explain(SQL, epsilon=1.0)
        assert before.cost > 0 and before.derived_from == ()
        assert after.cost == 0.0 and after.admissible and after.derived_from == (first.id,)
        assert after.to_dict()["derived_from"] == [first.id]
        assert "derived_from" not in before.to_dict()
    code, out, err = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "1", "--reuse", SQL)
    assert code == 0, err
    assert f"derived from answer {first.id}; cost 0" in out


def test_the_cli_says_where_the_answer_came_from(capsys, setup):
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--reuse", SQL)
    assert code == 0, err and "derived from" not in out
    code, again, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--reuse", SQL)
    assert code == 0, err
    assert "derived from answer 1; cost 0" in again
    code, printed, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                                 "--format", "json", "--reuse", SQL)
    assert code == 0, err
    answer = json.loads(printed)
    assert answer["derived_from"] == [1] and answer["cost"] == 0
    assert _charges(setup.ledger) == 1


def test_a_service_with_reuse_answers_each_analyst_from_their_own_answers(tmp_path):
    from dpsql.engine.service.client import Client

    from tests.test_service import start

    service = start(tmp_path, opener=lambda db, policy, ledger: PrivateDatabase.connect(
        db, policy, ledger, reuse=True))
    try:
        ana, bob = service.client("ana"), service.client("bob")
        first = ana.post("/v1/query", json={"sql": SQL, "epsilon": 0.5})
        assert first.status_code == 200, first.text
        again = ana.post("/v1/query", json={"sql": SQL, "epsilon": 0.5})
        assert again.json()["derived_from"] == [int(first.headers["Dpsql-Answer-Id"])]
        assert again.json()["rows"] == first.json()["rows"] and again.json()["cost"] == 0
        assert "Dpsql-Answer-Id" not in again.headers, "no new ledger entry to name"
        explained = bob.post("/v1/explain", json={"sql": SQL, "epsilon": 0.5}).json()
        assert "derived_from" not in explained and explained["cost"] > 0, "ana's answer is hers"
        assert bob.post("/v1/query", json={"sql": SQL, "epsilon": 0.5}).json()["cost"] > 0
        with Client(service.url, service.tokens["ana"]) as client:
            assert client.query(SQL, epsilon=0.5).id is None
    finally:
        service.stop()
    assert _charges(service.ledger) == 2


def test_a_notebook_shows_where_a_derived_answer_came_from(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=True) as db:
        first = db.query(SQL, epsilon=1.0)
        again = db.query(SQL, epsilon=1.0)
    assert "derived from" not in first._repr_html_()
    assert f"derived from answer {first.id}; cost 0" in again._repr_html_()


def test_postgres_clients_are_told_a_derived_answer_cost_nothing(tmp_path):
    from tests.test_service_pgwire import start

    pg = start(tmp_path, reuse=True)
    notices: list[str] = []
    try:
        with pg.connect("ana") as conn:
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            conn.execute("SET dpsql.epsilon = 0.5")
            first = conn.execute(SQL).fetchall()
            ident = int(conn.execute("SHOW dpsql.answer_id").fetchone()[0])
            assert conn.execute(SQL).fetchall() == first
            assert conn.execute("SHOW dpsql.answer_id").fetchone() == ("",), "no new entry"
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + SQL).fetchall())
    finally:
        pg.stop()
    assert f"derived from answer {ident}: cost 0, nothing charged to ana" in notices[-1]
    assert "cost: 0.0" in plan and f"derived_from: {ident}" in plan
    assert _charges(pg.ledger) == 1
