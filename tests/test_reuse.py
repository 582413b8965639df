"""Answers for free from released ones: the same query asked again by the same analyst, at most
as accurately as an answer already released to them, is that answer at cost 0, says where it
came from, and charges nothing; anything else is charged as before (docs/theory.md §22).
Reuse is on by default in every front end (Python, CLI, HTTP, client, Postgres wire); each one
turns it off to ask fresh noise and a charge (`reuse=False`, `--no-reuse`, `"reuse": false`,
`SET dpsql.reuse = off`)."""

from __future__ import annotations

import contextlib
import json
import sqlite3

import pandas as pd
import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting import reuse_index

from tests.support import cli_paths, run_cli

SQL = "SELECT state, COUNT(*) AS n, SUM(income) AS total FROM people GROUP BY state"


def _charges(ledger) -> int:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


def test_the_same_query_twice_costs_once_and_gives_the_released_answer(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
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
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(SQL, epsilon=0.5)
        larger = db.query(SQL, epsilon=1.0)
        assert larger.cost > 0 and larger.derived_from == ()
        smaller = db.query(SQL, epsilon=0.25)
        assert smaller.derived_from == (larger.id,), "the most accurate released answer"
        assert smaller.epsilon_dp == larger.epsilon_dp
    assert _charges(setup.ledger) == 2


def test_another_analysts_identical_query_is_charged(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(SQL, epsilon=1.0, analyst="alice")
        bob = db.query(SQL, epsilon=1.0, analyst="bob")
        assert bob.derived_from == () and bob.cost > 0
        assert db.query(SQL, epsilon=1.0, analyst="bob").derived_from == (bob.id,)
    assert _charges(setup.ledger) == 2


def test_another_mode_or_query_is_charged(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        first = db.query(SQL, epsilon=1.0)
        assert db.query(SQL.replace("SUM(income)", "SUM(age)"), epsilon=1.0).derived_from == ()
        assert db.query(SQL, epsilon=1.0, mode="theorem2").derived_from == ()
        # Another name for the same cells is post-processing: answered from them.
        renamed = db.query(SQL.replace("COUNT(*) AS n", "COUNT(*) AS m"), epsilon=1.0)
        assert renamed.derived_from == (first.id,) and list(renamed.df["m"]) == list(first.df["n"])
    assert _charges(setup.ledger) == 3


def test_a_restarted_process_still_reuses(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        first = db.query(SQL, epsilon=1.0)
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        again = db.query(SQL, epsilon=1.0)
    assert again.derived_from == (first.id,) and _charges(setup.ledger) == 1
    pd.testing.assert_frame_equal(again.df, first.df)


def test_a_ledger_written_before_the_index_opens_and_reuses_nothing_old(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(SQL, epsilon=1.0)
    with contextlib.closing(sqlite3.connect(setup.ledger)) as conn:
        conn.execute("DROP TABLE reusable")  # as a ledger written before this index
        conn.execute("DROP TABLE summable")
        conn.commit()
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        old = db.query(SQL, epsilon=1.0)
        assert old.derived_from == () and old.cost > 0, "an unindexed answer is charged afresh"
        assert db.query(SQL, epsilon=1.0).derived_from == (old.id,)
    assert _charges(setup.ledger) == 2


def test_without_reuse_the_same_query_is_charged_again_with_fresh_noise(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=False) as db:
        first = db.query(SQL, epsilon=1.0)
        again = db.query(SQL, epsilon=1.0)
        assert db.explain(SQL, epsilon=1.0).cost > 0, "explain prices what query would charge"
    assert again.derived_from == () and again.cost > 0 and again.id == first.id + 1
    assert not first.df.equals(again.df), "fresh noise (equal draws in 12 cells: p < 1e-6)"
    assert _charges(setup.ledger) == 2
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        assert db.query(SQL, epsilon=1.0).derived_from == (again.id,), "indexed all along"


def test_one_query_may_ask_fresh_noise_on_a_database_with_reuse_on(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        assert db.reuse, "on by default"
        first = db.query(SQL, epsilon=1.0)
        assert db.explain(SQL, epsilon=1.0, reuse=False).derived_from == ()
        fresh = db.query(SQL, epsilon=1.0, reuse=False)
        assert fresh.derived_from == () and fresh.cost > 0 and fresh.id == first.id + 1
        assert db.query(SQL, epsilon=1.0).derived_from in ((first.id,), (fresh.id,))
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, reuse=False) as db:
        assert db.query(SQL, epsilon=1.0, reuse=True).derived_from != (), "asked per query"
    assert _charges(setup.ledger) == 2


def test_the_command_line_asks_fresh_noise_with_no_reuse(capsys, setup):
    for _ in range(2):
        code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                                 "--no-reuse", "--format", "json", SQL)
        assert code == 0, err
        assert "derived_from" not in json.loads(out) and json.loads(out)["cost"] > 0
    code, out, err = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "1",
                             "--no-reuse", "--format", "json", SQL)
    assert code == 0 and json.loads(out)["cost"] > 0 and "derived_from" not in json.loads(out)
    assert _charges(setup.ledger) == 2


def test_every_front_end_has_reuse_on_by_default():
    import inspect

    from dpsql.engine import commands_analyst, commands_owner
    from dpsql.engine.service import server
    from dpsql.engine.service.app import Ask

    assert inspect.signature(PrivateDatabase.connect).parameters["reuse"].default is True
    assert inspect.signature(server.serve).parameters["reuse"].default is True
    serve = next(o for o in commands_owner.serve.params if o.name == "reuse")
    assert serve.default is True and serve.secondary_opts == ["--no-reuse"]
    for command in (commands_analyst.query, commands_analyst.explain):  # unset: on
        option = next(o for o in command.params if o.name == "reuse")
        assert option.default is None and option.secondary_opts == ["--no-reuse"]
    assert Ask(sql="x").reuse is None, "a request without it: the service's setting"


def test_the_lookup_uses_the_index_not_a_scan(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query(SQL, epsilon=1.0)
    with contextlib.closing(sqlite3.connect(setup.ledger)) as conn:
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + reuse_index.LOOKUP,
                                                 ["analyst", "key", 1.0])]
    assert plan[0].startswith("SEARCH r USING PRIMARY KEY (analyst=? AND key=?"), plan
    assert not any(step.startswith("SCAN") for step in plan), plan


def test_explain_says_it_would_cost_nothing_and_why(capsys, setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        before = db.explain(SQL, epsilon=1.0)
        first = db.query(SQL, epsilon=1.0)
        after = db.explain(SQL, epsilon=1.0)
        assert before.cost > 0 and before.derived_from == ()
        assert after.cost == 0.0 and after.admissible and after.derived_from == (first.id,)
        assert after.to_dict()["derived_from"] == [first.id]
        assert "derived_from" not in before.to_dict()
    code, out, err = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "1", SQL)
    assert code == 0, err
    assert f"derived from answer {first.id}; cost 0" in out


def test_the_cli_says_where_the_answer_came_from(capsys, setup):
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", SQL)
    assert code == 0, err and "derived from" not in out
    code, again, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", SQL)
    assert code == 0, err
    assert "derived from answer 1; cost 0" in again
    code, printed, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                                 "--format", "json", SQL)
    assert code == 0, err
    answer = json.loads(printed)
    assert answer["derived_from"] == [1] and answer["cost"] == 0
    assert _charges(setup.ledger) == 1


def test_a_service_with_reuse_answers_each_analyst_from_their_own_answers(tmp_path):
    from dpsql.engine.service.client import Client

    from tests.test_service import start

    service = start(tmp_path)  # the service's default
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
            assert client.explain(SQL, epsilon=0.5).cost == 0
            assert client.explain(SQL, epsilon=0.5, reuse=False).cost > 0
            fresh = client.query(SQL, epsilon=0.5, reuse=False)
            assert fresh.id is not None and fresh.cost > 0 and fresh.derived_from == ()
        fresh = ana.post("/v1/query", json={"sql": SQL, "epsilon": 0.5, "reuse": False})
        assert "derived_from" not in fresh.json() and "Dpsql-Answer-Id" in fresh.headers
    finally:
        service.stop()
    assert _charges(service.ledger) == 4


def test_a_service_started_with_no_reuse_charges_unless_a_request_asks_reuse(tmp_path):
    from tests.test_service import start

    service = start(tmp_path, opener=lambda db, policy, ledger: PrivateDatabase.connect(
        db, policy, ledger, reuse=False))
    try:
        ana = service.client("ana")
        ask = {"sql": SQL, "epsilon": 0.5}
        first, second = (ana.post("/v1/query", json=ask) for _ in range(2))
        assert first.json()["cost"] > 0 and second.json()["cost"] > 0
        assert "derived_from" not in second.json()
        again = ana.post("/v1/query", json=ask | {"reuse": True})
        assert again.json()["derived_from"] == [int(second.headers["Dpsql-Answer-Id"])]
    finally:
        service.stop()
    assert _charges(service.ledger) == 2


def test_a_notebook_shows_where_a_derived_answer_came_from(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        first = db.query(SQL, epsilon=1.0)
        again = db.query(SQL, epsilon=1.0)
    assert "derived from" not in first._repr_html_()
    assert f"derived from answer {first.id}; cost 0" in again._repr_html_()


def test_postgres_clients_are_told_a_derived_answer_cost_nothing(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    from tests.test_service_pgwire import start

    pg = start(tmp_path)  # the service's default
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
            derived = notices[-1]
            conn.execute("SET dpsql.reuse = off")
            assert conn.execute("SHOW dpsql.reuse").fetchone() == ("off",)
            conn.execute(SQL).fetchall()
            fresh = int(conn.execute("SHOW dpsql.answer_id").fetchone()[0])
            charged = notices[-1]
            fresh_plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + SQL).fetchall())
            with pytest.raises(psycopg.Error, match="dpsql.reuse must be on or off"):
                conn.execute("SET dpsql.reuse = maybe")
    finally:
        pg.stop()
    assert f"derived from answer {ident}: cost 0, nothing charged to ana" in derived
    assert "cost: 0.0" in plan and f"derived_from: {ident}" in plan
    assert fresh == ident + 1 and charged.startswith(f"answer {fresh} charged to ana")
    assert "derived_from" not in fresh_plan
    assert _charges(pg.ledger) == 2
