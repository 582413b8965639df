"""`dpsql serve` under one hostile analyst, over real HTTP on 127.0.0.1: a long request does not
hold up token checks, /healthz or another analyst's budget; forwarded headers are trusted only
from proxies the owner names; failed tokens from an address never lock out a valid token; a
huge explain is refused at once. Also two connections to one data file with a public CSV."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.errors import DpsqlError, QueryRefused
from dpsql.engine.service import server
from dpsql.engine.service.limits import Limits

from tests.support import (
    REGIONS,
    charge_count,
    create_ledger,
    make_people,
    run_cli,
    with_regions,
    write_policy,
)
from tests.test_planning_limits import MEDIANS
from tests.test_service import FAST, SQL, start

QUICK = 5.0  # seconds within which a request that does not need the worker must answer


@pytest.fixture
def blocked(monkeypatch):
    """PrivateDatabase.explain waits until the event is set: the planner is busy meanwhile."""
    release = threading.Event()
    real = PrivateDatabase.explain

    def slow(self, *args, **kwargs):
        release.wait(60)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PrivateDatabase, "explain", slow)
    yield release
    release.set()


def _post_in_background(url: str, token: str, path: str, body: dict, count: int) -> list:
    codes: list = []

    def send() -> None:
        with httpx.Client(base_url=url, timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            codes.append(http.post(path, json=body).status_code)

    threads = [threading.Thread(target=send, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return [codes, threads]


def test_tokens_health_and_budget_answer_while_the_worker_is_busy(tmp_path, blocked):
    """Today another analyst's GET /v1/budget waited 105 s behind one explain. Fifty explains
    wait for the planner here (more than the request thread pool holds)."""
    running = start(tmp_path, limits=Limits(rate=10_000, burst=10_000, queue=64),
                    policy={"budget": {"epsilon": 10.0}})
    try:
        codes, threads = _post_in_background(running.url, running.tokens["ana"], "/v1/explain",
                                             {"sql": SQL, "epsilon": 0.5}, 50)
        time.sleep(1.0)  # let them reach the worker's queue
        bob = httpx.Client(base_url=running.url, timeout=QUICK,
                           headers={"Authorization": f"Bearer {running.tokens['bob']}"})
        started = time.perf_counter()
        assert httpx.get(running.url + "/healthz", timeout=QUICK).json() == {"status": "ok"}
        budget = bob.get("/v1/budget")
        assert budget.status_code == 200 and budget.json()["analyst"] == "bob"
        assert budget.json()["largest_epsilon"] == pytest.approx(10)
        assert httpx.get(running.url + "/v1/budget", timeout=QUICK,
                         headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert bob.get("/v1/schema").json()["tables"]["people"]["privacy_unit"] == "person_id"
        assert bob.get("/v1/history").json() == []
        assert time.perf_counter() - started < QUICK
        assert codes == []  # every explain is still waiting for the planner
        blocked.set()
        for thread in threads:
            thread.join(120)
        assert codes == [200] * 50
        bob.close()
    finally:
        blocked.set()
        running.stop()


def test_explains_answer_while_a_query_holds_the_worker(tmp_path, monkeypatch):
    """Explains are planned on a database with the schema and no data, on a thread of their
    own: one waited behind every queued query. They say what the worker would: the same
    rewritten SQL and epsilon_dp, and the same refusal of a column outside the policy."""
    running_query, release = threading.Event(), threading.Event()
    real = PrivateDatabase.query

    def slow(self, *args, **kwargs):
        running_query.set()
        release.wait(60)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PrivateDatabase, "query", slow)
    running = start(tmp_path, limits=FAST)
    try:
        bob = running.client("bob")
        assert bob.post("/v1/explain", json={"sql": SQL, "epsilon": 0.5}).status_code == 200
        codes, threads = _post_in_background(running.url, running.tokens["ana"], "/v1/query",
                                             {"sql": SQL, "epsilon": 0.5, "reuse": False}, 1)
        assert running_query.wait(60)
        started = time.perf_counter()
        explained = bob.post("/v1/explain", json={"sql": SQL, "epsilon": 0.5})
        unknown = bob.post("/v1/explain", json={"sql": "SELECT COUNT(*) FROM people WHERE "
                                                       "secret > 1", "epsilon": 0.5})
        assert time.perf_counter() - started < QUICK
        assert codes == []  # the query still holds the worker
        release.set()
        for thread in threads:
            thread.join(120)
        assert codes == [200]
        with PrivateDatabase.connect(running.db, running.policy, running.ledger) as local:
            worker_said = local.explain(SQL, 0.5)
            with pytest.raises(DpsqlError) as refusal:
                local.explain("SELECT COUNT(*) FROM people WHERE secret > 1", 0.5)
        assert explained.status_code == 200 and explained.json()["admissible"] is True
        assert explained.json()["rewritten_sql"] == worker_said.rewritten_sql
        assert explained.json()["epsilon_dp"] == pytest.approx(worker_said.epsilon_dp)
        assert unknown.status_code == 400
        assert unknown.json()["error"] == str(refusal.value)
    finally:
        release.set()
        running.stop()


def test_one_analyst_s_many_requests_delay_another_s_by_at_most_one(tmp_path, monkeypatch):
    """Explains are served in turn from each analyst waiting: bob's one explain, sent after
    ana's six, is answered second (first in line after the one already running)."""
    release, served = threading.Event(), []
    real = PrivateDatabase.explain

    def recorded(self, sql, *args, **kwargs):
        release.wait(60)
        served.append("bob" if "> 2" in sql else "ana")
        return real(self, sql, *args, **kwargs)

    monkeypatch.setattr(PrivateDatabase, "explain", recorded)
    running = start(tmp_path, limits=FAST)
    try:
        ana = _post_in_background(running.url, running.tokens["ana"], "/v1/explain",
                                  {"sql": "SELECT COUNT(*) FROM people WHERE age > 1",
                                   "epsilon": 1}, 6)
        time.sleep(1.0)
        bob = _post_in_background(running.url, running.tokens["bob"], "/v1/explain",
                                  {"sql": "SELECT COUNT(*) FROM people WHERE age > 2",
                                   "epsilon": 1}, 1)
        time.sleep(1.0)
        release.set()
        for thread in ana[1] + bob[1]:
            thread.join(120)
        assert ana[0] == [200] * 6 and bob[0] == [200]
        assert served.index("bob") <= 1
    finally:
        release.set()
        running.stop()


def test_budget_read_off_the_worker_sees_every_charge(tmp_path):
    running = start(tmp_path, analysts={"ana": ("analyst", 2.0)}, limits=FAST)
    try:
        ana = running.client("ana")
        for spent in (0.5, 1.0):
            ask = {"sql": SQL, "epsilon": 0.5, "reuse": False}  # asked again: charged again
            assert ana.post("/v1/query", json=ask).status_code == 200
            budget = ana.get("/v1/budget").json()
            assert budget["global"]["spent_dp"] == pytest.approx(spent)
            assert budget["cap"]["spent_ip"] == pytest.approx(spent)
            assert budget["largest_epsilon"] == pytest.approx(2.0 - spent)
    finally:
        running.stop()


def test_failed_tokens_from_an_address_never_lock_out_a_valid_token(tmp_path):
    """Today the limit was checked before the token: 31 wrong tokens from one address gave
    every analyst behind it 429."""
    running = start(tmp_path, limits=Limits(rate=1000, burst=1000, failures_per_minute=5))
    try:
        wrong = [running.client(token=f"guess-{i}-{'z' * 30}").get("/v1/budget").status_code
                 for i in range(8)]
        assert wrong == [401] * 5 + [429] * 3
        for name in ("bob", "ana", "acc"):
            assert running.client(name).get("/v1/budget").status_code == 200
        bob = running.client("bob")
        assert bob.post("/v1/query", json={"sql": SQL, "epsilon": 0.5}).status_code == 200
        assert running.client(token="still-wrong").get("/v1/budget").status_code == 429
        assert charge_count(running.ledger) == 1
    finally:
        running.stop()


def _guesses(url: str, forged: bool) -> list[int]:
    codes = []
    for i in range(8):
        headers = {"Authorization": f"Bearer wrong-{i}"}
        if forged:
            headers["X-Forwarded-For"] = f"203.0.113.{i}"
        codes.append(httpx.get(url + "/v1/budget", headers=headers, timeout=30).status_code)
    return codes


def test_forwarded_headers_are_ignored_unless_the_owner_names_the_proxy(tmp_path):
    """Today uvicorn trusted X-Forwarded-For from loopback, so a local client chose the address
    the failed-token limit counts (40 forged guesses: all 401, never 429)."""
    limits = Limits(rate=1000, burst=1000, failures_per_minute=5)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    running = start(tmp_path / "a", limits=limits)
    try:
        assert _guesses(running.url, forged=True) == [401] * 5 + [429] * 3
    finally:
        running.stop()
    trusting = start(tmp_path / "b", limits=limits, trusted_proxies=("127.0.0.1",))
    try:
        # behind a proxy the owner named, each forwarded address is counted on its own
        assert _guesses(trusting.url, forged=True) == [401] * 8
    finally:
        trusting.stop()


def test_the_uvicorn_configuration_trusts_only_named_proxies():
    app = object()
    plain = server.uvicorn_config(app, "127.0.0.1", 8765)
    assert plain.proxy_headers is False
    named = server.uvicorn_config(app, "127.0.0.1", 8765, trusted_proxies=("10.0.0.1", "10.0.0.2"))
    assert named.proxy_headers is True and named.forwarded_allow_ips == ["10.0.0.1", "10.0.0.2"]


def test_a_huge_explain_is_refused_at_once_and_the_worker_goes_on(tmp_path):
    running = start(tmp_path, limits=FAST)
    try:
        ana = running.client("ana")
        started = time.perf_counter()
        refused = ana.post("/v1/explain", json={"sql": MEDIANS, "epsilon": 1})
        assert time.perf_counter() - started < QUICK  # it took 96 to 120 s
        assert refused.status_code == 400 and refused.json()["type"] == "ResourceLimitExceeded"
        assert refused.json()["limit"] == "limits.max_noisy_columns"
        assert "\n" not in refused.json()["error"]
        assert ana.post("/v1/query", json={"sql": MEDIANS, "epsilon": 1}).status_code == 400
        assert ana.post("/v1/query", json={"sql": SQL, "epsilon": 1}).status_code == 200
        assert charge_count(running.ledger) == 1
    finally:
        running.stop()


def test_two_connections_to_one_file_with_a_public_csv_table(tmp_path):
    """DuckDB shares one instance per file in a process, whose external access the first
    connection switched off: the second used to fail reading the public CSV file."""
    db = make_people(tmp_path / "people.duckdb")
    (tmp_path / "regions.csv").write_text(
        "state,region,population\n" + "".join(f"{s},{r},{p}\n" for s, r, p in REGIONS))
    section = with_regions()
    section["tables"]["regions"]["data"] = "regions.csv"
    policy = write_policy(tmp_path / "policy.yaml", section)
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    sql = ("SELECT region, COUNT(*) AS n FROM people JOIN regions ON people.state = regions.state "
           "GROUP BY region")
    first = PrivateDatabase.connect(db, policy, ledger, reuse=False)  # reads the data again
    try:
        with PrivateDatabase.connect(db, policy, ledger) as second:
            assert list(second.query(sql, epsilon=1).df["region"]) == ["East", "South", "West"]
        assert list(first.query(sql, epsilon=1).df["region"]) == ["East", "South", "West"]
        with PrivateDatabase.connect(db, policy, ledger) as third:  # after one closed, too
            assert third.explain(sql, epsilon=1).groups == 3
    finally:
        first.close()
    assert charge_count(ledger) == 2
    # the file stays unreadable to queries on every connection
    with PrivateDatabase.connect(db, policy, ledger) as again, pytest.raises(QueryRefused):
        again.query("SELECT COUNT(*) FROM read_csv_auto('regions.csv')", epsilon=1)


@pytest.mark.parametrize("options, trusted, allowed", [
    ((), False, None),
    (("--trusted-proxy", "192.0.2.7", "--trusted-proxy", "192.0.2.8"), True,
     ["192.0.2.7", "192.0.2.8"]),
])
def test_serve_trusts_forwarded_headers_only_from_trusted_proxy_options(
        tmp_path, monkeypatch, capsys, options, trusted, allowed):
    seen = {}

    def capture(self):
        seen.update(proxy_headers=self.config.proxy_headers, allowed=self.config.forwarded_allow_ips)

    monkeypatch.setattr(server.uvicorn.Server, "run", capture)
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    code, _, err = run_cli(capsys, "serve", "--db", str(db), "--policy", str(policy), "--ledger",
                           str(ledger), *options)
    assert code == 0, err
    assert seen["proxy_headers"] is trusted
    if allowed is not None:
        assert seen["allowed"] == allowed
