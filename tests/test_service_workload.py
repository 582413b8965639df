"""Workloads and asking by accuracy through `dpsql serve`: the statements answered together and
charged once as locally, their explanation and the epsilon an accuracy asks spending nothing,
and the Python client's objects equal to the local API's."""

from __future__ import annotations

import json
import math

import pytest
from dpsql.engine import InputError, PrivateDatabase

import dpsql
from tests.support import create_ledger, run_cli
from tests.test_service import start

MARGINALS = [
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state",
    "SELECT sick, COUNT(*) AS n FROM people GROUP BY sick",
    "SELECT state, sick, COUNT(*) AS n FROM people GROUP BY state, sick",
]
SQL = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"


@pytest.fixture
def service(tmp_path):
    running = start(tmp_path, policy={"budget": {"epsilon": 10.0}})
    yield running
    running.stop()


def _spent(service) -> float:
    with dpsql.connect(service.url, token=service.tokens["ana"]) as client:
        return client.budget().total.spent_ip


def test_a_workload_is_answered_together_and_charged_once_as_locally(service):
    with dpsql.connect(service.url, token=service.tokens["ana"]) as client:
        explained = client.explain_many(MARGINALS, epsilon=1.0)
        assert _spent(service) == 0.0  # the explanation spent nothing
        result = client.query_many(MARGINALS, epsilon=1.0)
        history = client.history(result.id)
    assert explained.strategy and explained.strategy == result.strategy
    assert len(explained.errors) == len(MARGINALS)
    assert [a.sql for a in result.answers] == MARGINALS
    assert [len(a.df) for a in result.answers] == [4, 2, 8]
    assert result.epsilon == 1.0 and result.cost == pytest.approx(explained.cost)
    assert _spent(service) == pytest.approx(result.level_after)
    assert len(history) == 1 and history[0].id == result.id  # one charge, stored and re-fetchable
    for answer in result.answers:
        assert answer.answered.startswith("least squares")
        assert (answer.ci95["n"] > 0).all()
    # Consistent, as least squares from one strategy: the marginals sum to the same total.
    totals = [a.df["n"].sum() for a in result.answers]
    assert max(totals) - min(totals) < 1e-6 * max(1.0, abs(totals[0]))

    # The same workload on a local ledger of the same policy: the same explanation.
    local_ledger = create_ledger(service.ledger.with_name("local.sqlite"), service.policy)
    with PrivateDatabase.connect(service.db, service.policy, local_ledger) as local:
        mine = local.explain_many(MARGINALS, epsilon=1.0)
    assert mine.strategy == explained.strategy and mine.cost == pytest.approx(explained.cost)
    assert mine.admitted == explained.admitted > 0
    assert [e.rmse_workload for e in mine.errors] == pytest.approx(
        [e.rmse_workload for e in explained.errors])


def test_asking_by_accuracy_finds_the_smallest_epsilon_and_keeps_every_cell_within_it(service):
    with dpsql.connect(service.url, token=service.tokens["ana"]) as client:
        plan = client.epsilon_for(SQL, 20.0)
        assert _spent(service) == 0.0
        assert plan.halfwidth <= 20.0 and plan.epsilon > 0
        explained = client.explain(SQL, accuracy=20.0)
        assert explained.epsilon == plan.epsilon
        result = client.query(SQL, accuracy=20.0)
        assert result.epsilon == plan.epsilon
        assert (result.ci95["n"] <= 20.0).all()
        workload = client.epsilon_for(MARGINALS, 20.0)
        answered = client.query_many(MARGINALS, accuracy=20.0)
    assert answered.epsilon == workload.epsilon
    assert all((a.ci95["n"] <= 20.0).all() for a in answered.answers)


def test_accuracy_beside_an_epsilon_is_refused_with_one_line_and_spends_nothing(service):
    ana = service.client("ana")
    for path, body in (("/v1/query", {"sql": SQL, "accuracy": 20.0, "epsilon": 1.0}),
                       ("/v1/workload", {"statements": MARGINALS, "accuracy": 20.0, "cost": 1.0})):
        response = ana.post(path, json=body)
        assert response.status_code == 400, response.text
        assert response.json()["type"] == "InputError"
        assert response.json()["error"].startswith("ask by accuracy, epsilon or cost: exactly one")
    response = ana.post("/v1/epsilon", json={"sql": SQL, "statements": MARGINALS, "ci95": 5.0})
    assert response.status_code == 400 and "exactly one" in response.json()["error"]
    response = ana.post("/v1/workload", json={"statements": "SELECT 1", "epsilon": 1.0})
    assert response.status_code == 400 and "statements" in response.json()["error"]
    assert _spent(service) == 0.0
    with dpsql.connect(service.url, token=service.tokens["ana"]) as client, \
            pytest.raises(InputError, match="exactly one"):
        client.query_many(MARGINALS, epsilon=1.0, accuracy=5.0)
    assert not math.isnan(_spent(service)) and _spent(service) == 0.0


def test_an_accountant_cannot_spend_on_a_workload(service):
    response = service.client("acc").post("/v1/workload", json={"statements": MARGINALS,
                                                                "epsilon": 1.0})
    assert response.status_code == 403 and response.json()["type"] == "WrongRole"


def test_the_command_line_asks_a_service_for_a_workload_and_by_accuracy(service, tmp_path, capsys):
    workload = tmp_path / "marginals.sql"
    workload.write_text(";\n".join(MARGINALS) + ";\n")
    token = service.tokens["ana"]
    code, out, _ = run_cli(capsys, "query", "--server", service.url, "--token", token, "--file",
                           str(workload), "--epsilon", "1", "--format", "json")
    assert code == 0, out
    answered = json.loads(out)
    assert [a["sql"] for a in answered["answers"]] == MARGINALS and answered["epsilon"] == 1.0
    assert _spent(service) == pytest.approx(answered["transcript_level_after"])
    code, out, err = run_cli(capsys, "query", "--server", service.url, "--token", token, "--ci95",
                             "20", "--yes", "--format", "json", SQL)
    assert code == 0, err
    with dpsql.connect(service.url, token=token) as client:
        assert json.loads(out)["epsilon"] == client.epsilon_for(SQL, 20.0).epsilon
    assert "the widest 95% half-width is then" in err
    code, _, err = run_cli(capsys, "query", "--server", service.url, "--file", str(workload),
                           "--epsilon", "1")
    assert code == 2 and "needs your token" in err
