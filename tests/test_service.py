"""`dpsql serve` over real HTTP on 127.0.0.1: tokens, roles, caps, status codes, bad input,
the Python client and `dpsql query --server`. Also the helpers the other service tests use."""

from __future__ import annotations

import hmac
import json
import logging
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import uvicorn
from dpsql.calibration import DependenceModel
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.errors import AccessDenied, BudgetExhausted, QueryRefused
from dpsql.engine.service import auth
from dpsql.engine.service.app import create_app
from dpsql.engine.service.limits import Limits
from dpsql.engine.service.server import uvicorn_config

import dpsql
from tests.support import charge_count, create_ledger, make_people, run_cli, write_policy
from tests.test_limits import FAST_SQL, SLOW_SQL, _slow_policy, slow_db  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
SQL = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
FAST = Limits(rate=10_000, burst=10_000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Service:
    """A service running in a uvicorn thread on 127.0.0.1, with its files and tokens."""

    url: str
    db: Path
    policy: Path
    ledger: Path
    tokens: dict[str, str]
    server: uvicorn.Server
    thread: threading.Thread
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, name: str | None = None, token: str | None = None) -> httpx.Client:
        token = token if token is not None else (self.tokens[name] if name else None)
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=60)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.server.should_exit = True
        self.thread.join(30)


def add_analysts(ledger: Path, analysts: dict[str, tuple[str, float | None]]) -> dict[str, str]:
    """Register analysts (name: (role, cap)) and return their tokens."""
    tokens = {}
    with Ledger.reopen(ledger) as book:
        for name, (role, cap) in analysts.items():
            tokens[name] = auth.new_analyst(book, name, role, cap)[1]
    return tokens


def start(tmp_path: Path, analysts: dict[str, tuple[str, float | None]] | None = None,
          limits: Limits = FAST, policy: dict | None = None,
          opener: Callable[[Path, Path, Path], PrivateDatabase] | None = None,
          wait: bool = True, files: tuple[Path, Path] | None = None,
          trusted_proxies: tuple[str, ...] = ()) -> Service:
    """Files (the people table, or `files`: data and policy), analysts and a running service
    (waits until /healthz says ok unless `wait` is False)."""
    if files is None:
        db = make_people(tmp_path / "people.duckdb")
        policy_path = write_policy(tmp_path / "policy.yaml", policy)
    else:
        db, policy_path = files
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy_path)
    tokens = add_analysts(ledger, analysts if analysts is not None else
                          {"ana": ("analyst", None), "bob": ("analyst", None),
                           "acc": ("accountant", None)})
    open_db = (lambda: PrivateDatabase.connect(db, policy_path, ledger)) if opener is None else \
        (lambda: opener(db, policy_path, ledger))
    port = free_port()
    server = uvicorn.Server(uvicorn_config(create_app(open_db, limits), "127.0.0.1", port,
                                           trusted_proxies=trusted_proxies, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    service = Service(f"http://127.0.0.1:{port}", db, policy_path, ledger, tokens, server, thread)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(service.url + "/healthz").status_code == 200 or not wait:
                return service
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    service.stop()
    raise AssertionError("the service did not start within 60 s")


@pytest.fixture
def service(tmp_path):
    running = start(tmp_path, policy={"budget": {"epsilon": 10.0}})
    yield running
    running.stop()


def test_a_query_answers_the_cli_json_and_charges_the_token_s_analyst(service, capsys):
    ana = service.client("ana")
    response = ana.post("/v1/query", json={"sql": SQL, "epsilon": 0.5})
    assert response.status_code == 200, response.text
    answer = response.json()
    code, out, _ = run_cli(capsys, "query", "--db", str(service.db), "--policy", str(service.policy),
                           "--ledger", str(service.ledger.with_name("cli.sqlite")), "--format", "json",
                           "--epsilon", "0.5", SQL) if create_ledger(
        service.ledger.with_name("cli.sqlite"), service.policy) else (None, "", "")
    assert code == 0
    local = json.loads(out)
    assert list(answer) == list(local)  # the same object, key for key
    assert answer["columns"] == local["columns"] and len(answer["rows"]) == len(local["rows"])
    assert {k: answer[k] for k in ("epsilon", "epsilon_dp", "mode", "cost")} == \
        {k: local[k] for k in ("epsilon", "epsilon_dp", "mode", "cost")}
    ident = int(response.headers["Dpsql-Answer-Id"])
    # charged to the analyst the token names, whatever the request says
    stored = ana.get("/v1/history", params={"id": ident}).json()
    assert [(e["analyst"], e["answer"]) for e in stored] == [("ana", answer)]
    assert service.client("bob").get("/v1/history").json() == []
    assert ana.post("/v1/query", json={"sql": SQL, "epsilon": 0.5, "analyst": "bob"}).status_code == 400
    assert charge_count(service.ledger) == 1


def test_status_codes_and_one_line_messages(service, capsys):
    ana = service.client("ana")
    assert service.client().get("/v1/budget").status_code == 401
    wrong = service.client(token="x" * 43).get("/v1/budget")
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert service.client(token="y").get("/v1/budget").json()["type"] == "AccessDenied"
    bad_sql = "SELECT age FROM people"
    refused = ana.post("/v1/query", json={"sql": bad_sql, "epsilon": 1})
    code, _, err = run_cli(capsys, "explain", "--db", str(service.db), "--policy",
                           str(service.policy), "--ledger", str(service.ledger), "--epsilon", "1", bad_sql)
    assert refused.status_code == 400 and code == 2
    assert err == f"error: {refused.json()['error']}\n"  # the CLI's very line
    over = ana.post("/v1/query", json={"sql": SQL, "epsilon": 20})
    assert over.status_code == 403 and over.json()["type"] == "BudgetExhausted"
    assert over.json()["largest_epsilon"] == pytest.approx(10)
    assert ana.post("/v1/query", content=b"x" * (Limits().max_body_bytes + 1)).status_code == 413
    assert service.client("acc").post("/v1/query", json={"sql": SQL, "epsilon": 1}).status_code == 403
    assert ana.get("/v1/report").status_code == 403
    assert ana.get("/v1/history", params={"analyst": "bob"}).status_code == 403
    assert charge_count(service.ledger) == 0
    assert httpx.get(service.url + "/healthz").json() == {"status": "ok"}


def test_503_while_starting_then_ready(tmp_path):
    opened = threading.Event()

    def slow_open(db, policy, ledger):
        opened.wait(30)
        return PrivateDatabase.connect(db, policy, ledger)

    running = start(tmp_path, opener=slow_open, wait=False)
    try:
        assert httpx.get(running.url + "/healthz").status_code == 503
        starting = running.client("ana").get("/v1/budget")
        assert starting.status_code == 503 and "starting" in starting.json()["error"]
        opened.set()
        deadline = time.monotonic() + 30
        while httpx.get(running.url + "/healthz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert running.client("ana").get("/v1/budget").status_code == 200
    finally:
        opened.set()
        running.stop()


def test_rate_limit_answers_429_with_retry_after(tmp_path):
    running = start(tmp_path, limits=Limits(rate=1, burst=3))
    try:
        ana = running.client("ana")
        codes = [ana.get("/v1/budget").status_code for _ in range(6)]
        assert codes[:3] == [200] * 3 and codes[3:] == [429] * 3
        limited = ana.get("/v1/budget")
        assert int(limited.headers["retry-after"]) >= 1 and limited.json()["type"] == "TooManyRequests"
        assert running.client("bob").get("/v1/budget").status_code == 200  # per analyst
    finally:
        running.stop()


@pytest.mark.parametrize("body, what", [
    (b"{not json", "malformed JSON body"),
    (b'["SELECT 1"]', "bad request"),
    (b'{"sql": 5, "epsilon": 1}', "sql"),
    (b'{"sql": "SELECT COUNT(*) FROM people", "epsilon": "1"}', "epsilon"),
    (b'{"sql": "SELECT COUNT(*) FROM people", "epsilon": true}', "epsilon"),
    (b'{"sql": "SELECT COUNT(*) FROM people", "epsilon": 1, "budget": 99}', "budget"),
    (b'{"epsilon": 1}', "sql"),
    (b'{"sql": "SELECT COUNT(*) FROM people", "epsilon": -1}', "epsilon must be"),
    (b'{"sql": "SELECT COUNT(*) FROM people", "epsilon": 1e400}', "epsilon"),
])
def test_bad_bodies_are_one_line_400_and_charge_nothing(service, body, what):
    response = service.client("ana").post("/v1/query", content=body,
                                          headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    assert what in message and "\n" not in message
    assert charge_count(service.ledger) == 0


def test_huge_bodies_are_refused_before_they_are_read(service):
    ana = service.client("ana")
    with socket.create_connection(("127.0.0.1", int(service.url.rsplit(":", 1)[1]))) as conn:
        conn.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n{}")
        assert conn.recv(65536).startswith(b"HTTP/1.1 413 ")  # answered before a byte more

    def chunks():
        for _ in range(1000):
            yield b" " * 1024  # 1 MB without a declared length

    streamed = ana.post("/v1/query", content=chunks())
    assert streamed.status_code == 413 and "at most 65536 bytes" in streamed.json()["error"]


def test_brute_force_is_limited_compared_in_constant_time_and_logged_without_tokens(
        tmp_path, caplog, monkeypatch):
    running = start(tmp_path, limits=Limits(rate=1000, burst=1000, failures_per_minute=5))
    try:
        compared = []
        real = hmac.compare_digest
        monkeypatch.setattr(auth.hmac, "compare_digest",
                            lambda a, b: compared.append(1) or real(a, b))
        guesses = [f"guess-{i}-{'z' * 30}" for i in range(8)]
        with caplog.at_level(logging.WARNING, logger="dpsql.service"):
            codes = [running.client(token=g).get("/v1/budget").status_code for g in guesses]
        assert codes == [401] * 5 + [429] * 3
        # every guess was checked (a valid token behind the address is never locked out) and
        # compared with every active analyst's hash
        assert len(compared) == 8 * 3
        compared.clear()
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert logged.count("refused GET /v1/budget from 127.0.0.1") == 5
        assert not any(g in logged for g in guesses) and "z" * 30 not in logged
        # the right token is also compared with all three, not stopped at its match
        with Ledger.reopen(running.ledger) as book:
            assert auth.identify(book, f"Bearer {running.tokens['ana']}").name == "ana"
        assert len(compared) == 3
    finally:
        running.stop()


def test_tokens_are_stored_only_as_keyed_hashes(service):
    text = service.ledger.read_bytes()
    for token in service.tokens.values():
        assert token.encode() not in text
    with Ledger.reopen(service.ledger) as book:
        hashes = dict(book.credentials())
        key = book.token_key()
    assert hashes["ana"] == auth.token_hash(key, service.tokens["ana"])
    assert hashes["ana"] != auth.token_hash(b"another ledger", service.tokens["ana"])


@pytest.mark.parametrize("path", [
    "/static/../../engine/ledger.py", "/static/%2e%2e/%2e%2e/engine/ledger.py",
    "/static/..%2f..%2fapp.py", "/static/%2e%2e%2fapp.py", "/static//etc/passwd",
    "/static/..\\app.py", "/../../../../etc/passwd", "/static/%252e%252e/app.py",
])
def test_static_files_cannot_escape_their_folder(service, path):
    with socket.create_connection(("127.0.0.1", int(service.url.rsplit(":", 1)[1]))) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    assert status in (400, 404), reply[:200]
    assert b"import" not in reply and b"root:" not in reply


def test_the_page_and_its_scripts_are_served(service):
    page = httpx.get(service.url + "/")
    assert page.status_code == 200 and "/static/console.js" in page.text
    script = httpx.get(service.url + "/static/console.js").text
    assert "innerHTML" not in script and "textContent" in script
    spec = httpx.get(service.url + "/openapi.json").json()
    assert {"/v1/query", "/v1/explain", "/v1/budget", "/v1/schema", "/v1/history", "/v1/report",
            "/healthz"} <= set(spec["paths"])
    assert httpx.get(service.url + "/docs").status_code == 200


def test_explain_and_schema_never_touch_the_data(service, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("explain ran SQL on the data")

    monkeypatch.setattr(execute, "run", forbidden)
    monkeypatch.setattr(execute, "bound_units", forbidden)
    ana = service.client("ana")
    explained = ana.post("/v1/explain", json={"sql": SQL, "epsilon": 0.5})
    assert explained.status_code == 200 and explained.json()["admissible"] is True
    schema = ana.get("/v1/schema").json()
    assert schema["tables"]["people"]["columns"]["state"]["domain"] == ["CA", "NY", "TX", "WA"]
    assert schema["tables"]["people"]["columns"]["age"] == {"type": "int", "lower": 0, "upper": 100,
                                                            "domain": None}
    assert "COUNT(*)" in schema["aggregates"] and "ABS" in schema["functions"]
    assert charge_count(service.ledger) == 0


def test_caps_bind_each_analyst_and_the_global_budget_binds_them_all(tmp_path):
    running = start(tmp_path, analysts={"ana": ("analyst", 1.0), "bob": ("analyst", 2.5),
                                        "eve": ("analyst", None)},
                    policy={"budget": {"epsilon": 3.0}})
    try:
        ana, bob, eve = (running.client(n) for n in ("ana", "bob", "eve"))
        # the same query asked again on purpose: fresh noise and a charge each time
        ask = {"sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5, "reuse": False}
        assert [ana.post("/v1/query", json=ask).status_code for _ in range(3)] == [200, 200, 403]
        capped = ana.post("/v1/query", json=ask).json()
        assert capped["type"] == "BudgetExhausted" and "over your cap of 1" in capped["error"]
        assert capped["largest_epsilon"] == 0
        budget = ana.get("/v1/budget").json()
        assert budget["cap"]["total"] == 1.0 and budget["cap"]["spent_ip"] == pytest.approx(1.0)
        assert budget["largest_epsilon"] == 0 and budget["global"]["spent_dp"] == pytest.approx(1.0)
        # bob's cap of 2.5 is not reached before the global budget of 3 is: 4 more answers
        codes = [bob.post("/v1/query", json=ask).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 200, 403]
        assert "over budget" in bob.post("/v1/query", json=ask).json()["error"]
        assert eve.post("/v1/query", json=ask).status_code == 403
        assert charge_count(running.ledger) == 6
    finally:
        running.stop()


def test_analyst_commands(tmp_path, capsys):
    policy = write_policy(tmp_path / "p.yaml")
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    code, out, err = run_cli(capsys, "analyst", "add", "ana", "--cap", "2", "--ledger", str(ledger))
    assert code == 0 and len(out.splitlines()) == 1 and len(out.strip()) >= 40
    assert "shown once" in err
    token = out.strip()
    code, out, _ = run_cli(capsys, "analyst", "add", "acc", "--role", "accountant", "--ledger",
                           str(ledger))
    assert code == 0
    code, out, _ = run_cli(capsys, "analyst", "list", "--ledger", str(ledger), "--format", "json")
    listed = json.loads(out)
    assert [(a["name"], a["role"], a["cap"], a["revoked"]) for a in listed] == \
        [("ana", "analyst", 2.0, None), ("acc", "accountant", None, None)]
    assert token not in out
    assert run_cli(capsys, "analyst", "cap", "ana", "0.5", "--ledger", str(ledger))[0] == 0
    assert run_cli(capsys, "analyst", "cap", "ana", "none", "--ledger", str(ledger))[0] == 0
    code, _, err = run_cli(capsys, "analyst", "cap", "ana", "0", "--ledger", str(ledger))
    assert code == 2 and err == "error: cap must be a finite epsilon > 0, got 0.0\n"
    code, _, err = run_cli(capsys, "analyst", "add", "ana", "--ledger", str(ledger))
    assert code == 2 and "already exists" in err
    assert run_cli(capsys, "analyst", "revoke", "ana", "--ledger", str(ledger))[0] == 0
    code, _, err = run_cli(capsys, "analyst", "revoke", "nobody", "--ledger", str(ledger))
    assert code == 2 and "no analyst 'nobody'" in err and "ana, acc" in err
    code, _, err = run_cli(capsys, "analyst", "list", "--ledger", str(tmp_path / "missing.sqlite"))
    assert code == 2 and err.startswith("error: ledger file not found")
    with Ledger.reopen(ledger) as book:
        with pytest.raises(AccessDenied):
            auth.identify(book, f"Bearer {token}")
        assert book.analysts()[0].revoked is not None and book.analysts()[0].cap is None


def test_revocation_takes_effect_on_the_next_request(service, capsys):
    ana = service.client("ana")
    assert ana.get("/v1/budget").status_code == 200
    assert run_cli(capsys, "analyst", "revoke", "ana", "--ledger", str(service.ledger))[0] == 0
    assert ana.get("/v1/budget").status_code == 401
    assert ana.post("/v1/query", json={"sql": SQL, "epsilon": 1}).status_code == 401
    assert charge_count(service.ledger) == 0


def test_a_revoked_name_is_refused_inside_the_charge(tmp_path):
    """A revocation between the token check and the charge still refuses the charge."""
    policy = write_policy(tmp_path / "p.yaml")
    db = make_people(tmp_path / "people.duckdb")
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    add_analysts(ledger, {"ana": ("analyst", None)})
    with PrivateDatabase.connect(db, policy, ledger) as private:
        with Ledger.reopen(ledger) as book:
            book.update_analyst("ana", revoke=True)
        with pytest.raises(AccessDenied, match="revoked"):
            private.query("SELECT COUNT(*) FROM people", epsilon=1, analyst="ana")
    assert charge_count(ledger) == 0


def test_accountant_reads_every_history_and_the_report(service):
    ana, acc = service.client("ana"), service.client("acc")
    assert ana.post("/v1/query", json={"sql": SQL, "epsilon": 0.5}).status_code == 200
    history = acc.get("/v1/history", params={"analyst": "ana"}).json()
    assert [e["analyst"] for e in history] == ["ana"]
    report = acc.get("/v1/report").json()
    assert report["totals"]["answers"] == 1 and report["entries"][0]["analyst"] == "ana"
    assert acc.post("/v1/explain", json={"sql": SQL, "epsilon": 0.5}).status_code == 403


def test_python_client_returns_the_local_api_s_objects_and_errors(service):
    with dpsql.connect(service.url, token=service.tokens["ana"]) as client:
        result = client.query(SQL, epsilon=0.5)
        assert isinstance(result, dpsql.QueryResult) and result.id == 1
        assert list(result.df.columns) == ["state", "n"] and result.ci95.shape == result.df.shape
        explanation = client.explain(SQL, epsilon=0.5)
        assert isinstance(explanation, dpsql.Explanation) and explanation.group_by == ("state",)
        assert explanation.level_before == pytest.approx(0.5)
        budget = client.budget()
        assert budget.total.spent_dp == pytest.approx(0.5) and budget.cap is None
        assert budget.largest_epsilon == pytest.approx(9.5)
        assert [e.id for e in client.history()] == [1]
        assert client.history(1)[0].answer == result.to_dict()
        with pytest.raises(BudgetExhausted) as over:
            client.query(SQL, epsilon=20)
        assert over.value.largest_epsilon == pytest.approx(9.5)
        with pytest.raises(QueryRefused):
            client.query("SELECT age FROM people", epsilon=1)
        assert "people" in client.schema()["tables"]
    with dpsql.connect(service.url, token="wrong") as client, pytest.raises(AccessDenied):
        client.budget()


def test_query_server_on_the_command_line(service, capsys):
    code, out, _ = run_cli(capsys, "query", "--server", service.url, "--token", service.tokens["ana"],
                           "--epsilon", "0.5", "--format", "json", SQL)
    assert code == 0 and json.loads(out)["columns"] == ["state", "n"]
    code, out, _ = run_cli(capsys, "query", "--server", service.url, "--token", service.tokens["ana"],
                           "--epsilon", "0.5", "--no-reuse", SQL)
    assert code == 0 and "answer id 2" in out
    code, _, err = run_cli(capsys, "query", "--server", service.url, "--token", service.tokens["ana"],
                           "--epsilon", "20", SQL)
    assert code == 3 and err.startswith("error: over budget")
    code, _, err = run_cli(capsys, "query", "--server", service.url, "--epsilon", "1", SQL)
    assert code == 2 and "needs your token" in err
    code, _, err = run_cli(capsys, "query", "--server", service.url, "--token", "t", "--db", "x",
                           "--epsilon", "1", SQL)
    assert code == 2 and "drop --db" in err
    code, _, err = run_cli(capsys, "query", "--epsilon", "1", SQL)
    assert code == 2 and "missing option --db, --policy, --ledger" in err


def test_a_query_over_the_time_limit_is_interrupted_and_charges_nothing(tmp_path, slow_db):  # noqa: F811
    running = start(tmp_path, files=(slow_db, _slow_policy(tmp_path / "p.yaml", {"time_seconds": 0.05})))
    try:
        ana = running.client("ana")
        started = time.perf_counter()
        cut = ana.post("/v1/query", json={"sql": SLOW_SQL, "epsilon": 1})
        assert time.perf_counter() - started < 5.0
        assert cut.status_code == 400 and cut.json()["type"] == "ResourceLimitExceeded"
        assert cut.json()["error"].startswith("query cancelled: it ran longer than the time limit")
        assert charge_count(running.ledger) == 0
        # the worker goes on: the next query is answered and charged
        assert ana.post("/v1/query", json={"sql": FAST_SQL, "epsilon": 1}).status_code == 200
        assert charge_count(running.ledger) == 1
    finally:
        running.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make a certificate")
def test_serve_over_tls_and_a_failed_start_is_one_line(tmp_path):
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    token = add_analysts(ledger, {"ana": ("analyst", None)})["ana"]
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    port = free_port()
    command = [sys.executable, "-m", "dpsql", "serve", "--db", str(db), "--policy", str(policy),
               "--ledger", str(ledger), "--port", str(port)]
    process = subprocess.Popen([*command, "--tls-cert", str(cert), "--tls-key", str(key)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"https://127.0.0.1:{port}"
        trusted = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", verify=trusted).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        with dpsql.connect(url, token=token, verify=str(cert)) as client:
            assert client.query("SELECT COUNT(*) AS n FROM people", epsilon=1).id == 1
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/healthz")  # no plain HTTP beside it
    finally:
        process.terminate()
        process.wait(30)
    failed = subprocess.run([*command[:5], str(tmp_path / "missing.duckdb"), *command[6:]], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2
    assert failed.stderr.splitlines()[-1] == (f"error: data file not found: {tmp_path / 'missing.duckdb'} "
                                              "(expected a DuckDB, CSV or Parquet file)")


def test_only_the_worker_thread_touches_the_data(service, monkeypatch):
    """Sixteen request threads at once; the data and the worker's ledger connection are used
    from one thread only (sqlite connections must not be shared between threads, and DuckDB's
    is not made for it); the planner's ledger connection (explains) only from the planner thread;
    the ledger reader's own connection (token checks, budgets) is used by one request thread at a
    time and never reaches the data."""
    seen: dict[int, set[str]] = {}
    inside: dict[int, list[str]] = {}  # the threads inside a method of each ledger
    most = [0]
    lock = threading.Lock()
    for cls, name in ((Ledger, "state"), (Ledger, "charge"), (Ledger, "credentials"),
                      (PrivateDatabase, "explain"), (PrivateDatabase, "query")):
        real = getattr(cls, name)

        def spy(self, *args, __real=real, **kwargs):
            book = self if isinstance(self, Ledger) else self.ledger
            me = threading.current_thread().name
            with lock:
                seen.setdefault(id(book), set()).add(me)
                inside.setdefault(id(book), []).append(me)
                most[0] = max(most[0], len(set(inside[id(book)])))
            try:
                return __real(self, *args, **kwargs)
            finally:
                with lock:
                    inside[id(book)].remove(me)

        monkeypatch.setattr(cls, name, spy)
    errors: list[int] = []

    def client(i: int) -> None:
        with httpx.Client(base_url=service.url, timeout=60,
                          headers={"Authorization": f"Bearer {service.tokens['ana']}"}) as http:
            for path in ("/v1/query", "/v1/explain"):  # each query charged: 16 charges
                response = http.post(path, json={"sql": SQL, "epsilon": 0.01, "reuse": False})
                if response.status_code != 200:
                    errors.append(response.status_code)
            if http.get("/v1/budget").status_code != 200:
                errors.append(0)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and charge_count(service.ledger) == 16
    assert len(seen) == 3  # the worker's ledger, the planner's and the reader's
    assert {"dpsql-worker"} in seen.values() and {"dpsql-planner"} in seen.values()
    reader = next(names for names in seen.values() if names not in ({"dpsql-worker"},
                                                                     {"dpsql-planner"}))
    assert not reader & {"dpsql-worker", "dpsql-planner"}
    assert most[0] == 1  # each ledger connection is used by one thread at a time


def test_rate_limiter_refills_and_forgets_refilled_keys(monkeypatch):
    from dpsql.engine.service import limits

    clock = [0.0]
    monkeypatch.setattr(limits.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(limits, "MAX_KEYS", 3)
    bucket = limits.RateLimiter(rate=2.0, burst=2)
    bucket.take("a", "requests")
    bucket.take("a", "requests")
    with pytest.raises(limits.TooManyRequests) as refused:
        bucket.take("a", "requests")
    assert refused.value.retry_after == pytest.approx(0.5)
    clock[0] = 0.5
    bucket.take("a", "requests")  # one refilled after half a second
    for key in "bcd":
        bucket.take(key, "requests")
    assert len(bucket._buckets) <= 4
    clock[0] = 10.0
    bucket.take("e", "requests")
    assert set(bucket._buckets) == {"e"}


def test_a_cap_is_accounted_on_the_columns_the_analyst_s_own_answers_read(tmp_path):
    """Another analyst reading more columns raises the global transcript's eta, not the eta of
    a capped analyst's own answers, which read only `sick`."""
    from dpsql.engine.accounting.transcript import Accountant

    from tests.test_eta_by_columns import SICK_ETA, K, _eps_dp, _policy

    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml", _policy())
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    cap = 3.0
    add_analysts(ledger, {"ana": ("analyst", cap)})
    per_answer = _eps_dp(0.5, SICK_ETA)
    own = Accountant(cap, DependenceModel(K, SICK_ETA), "auto")
    expected, spent = 0, 0.0
    while own.admits(spent, per_answer):
        expected, spent = expected + 1, spent + per_answer
    with PrivateDatabase.connect(db, policy, ledger, reuse=False) as private:
        private.query("SELECT COUNT(*) FROM people WHERE age > 30", epsilon=0.5, analyst="bob")
        answered = 0
        with pytest.raises(BudgetExhausted, match="over your cap of 3"):
            for _ in range(expected + 1):
                private.query("SELECT COUNT(*) FROM people WHERE sick", epsilon=0.5, analyst="ana")
                answered += 1
        assert answered == expected >= 2
        status = private.cap_status("ana")
        assert status is not None and status.spent_ip == pytest.approx(own.level(spent))
