"""One record of an aggregate's metadata: what a result shows, the ledger stores and a report
reads back are the same AggregateRecord."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields

from dpsql.engine import PrivateDatabase
from dpsql.engine.report.build import build_report
from dpsql.engine.result import AggregateInfo, AggregateRecord, AnswerCost


def test_result_ledger_and_report_share_the_aggregate_record(setup):
    sql = "SELECT state, COUNT(*) AS n, AVG(income) AS mean FROM people GROUP BY state"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query(sql, epsilon=1.0)
    assert all(isinstance(a, AggregateInfo) and isinstance(a, AggregateRecord) for a in result.aggregates)
    with sqlite3.connect(setup.ledger) as conn:
        stored = json.loads(conn.execute("SELECT aggregates FROM charges").fetchone()[0])
    assert stored == [a.record() for a in result.aggregates]
    assert list(stored[0]) == [f.name for f in fields(AggregateRecord)]  # no interval in the ledger
    (answer,) = build_report(setup.ledger).answers
    assert answer.aggregates == tuple(AggregateRecord.from_record(a.record()) for a in result.aggregates)
    assert [a.describe() for a in answer.aggregates] == [a.describe() for a in result.aggregates]


def test_result_ledger_and_report_share_the_answer_cost(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query("SELECT COUNT(*) FROM people", epsilon=0.75, mode="group")
    cost = result.answer_cost
    assert isinstance(cost, AnswerCost)
    assert (cost.epsilon, cost.epsilon_dp, cost.mode) == (result.epsilon, result.epsilon_dp, "group")
    with sqlite3.connect(setup.ledger) as conn:
        row = conn.execute("SELECT epsilon, epsilon_dp, mode, k, eta FROM charges").fetchone()
    assert AnswerCost(*row) == cost
    (answer,) = build_report(setup.ledger).answers
    assert answer.cost == cost
