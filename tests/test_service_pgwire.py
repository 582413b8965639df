"""The Postgres wire endpoint (`dpsql serve --pg-port`) against real clients on 127.0.0.1:
psycopg, pandas through SQLAlchemy, psql; logins, charges identical to HTTP, SQLSTATEs, and
hostile clients that must cost nothing while other analysts keep being served."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.service.app import create_app
from dpsql.engine.service.limits import Limits
from dpsql.engine.service.server import run_with_pg

from tests.support import charge_count, create_ledger, make_people, write_policy
from tests.test_service import FAST, add_analysts, free_port

psycopg = pytest.importorskip("psycopg")
ROOT = Path(__file__).resolve().parent.parent
SQL = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
ANALYSTS = {"ana": ("analyst", None), "bob": ("analyst", 1.0), "acc": ("accountant", None)}


@dataclass
class PgService:
    """A service with its HTTP URL and Postgres port on 127.0.0.1, its files and tokens."""

    url: str
    pg_port: int
    ledger: Path
    tokens: dict[str, str]
    server: uvicorn.Server
    thread: threading.Thread

    def connect(self, name: str, token: str | None = None, **options) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.pg_port, user=name, dbname="dpsql",
                               password=self.tokens[name] if token is None else token,
                               autocommit=True, connect_timeout=20, **options)

    def http(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.tokens[name]}"},
                            timeout=60)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def start(tmp_path: Path, limits: Limits = FAST,
          analysts: dict[str, tuple[str, float | None]] | None = None,
          reuse: bool = True) -> PgService:
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml", {"budget": {"epsilon": 100.0}})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    tokens = add_analysts(ledger, ANALYSTS if analysts is None else analysts)
    app = create_app(lambda: PrivateDatabase.connect(db, policy, ledger, reuse=reuse), limits)
    port, pg_port = free_port(), free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(run_with_pg(server, app, "127.0.0.1", pg_port)),
                              daemon=True)
    thread.start()
    service = PgService(f"http://127.0.0.1:{port}", pg_port, ledger, tokens, server, thread)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(service.url + "/healthz").status_code == 200:
                return service
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    service.stop()
    raise AssertionError("the service did not start within 60 s")


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    # The module's tests share one ledger and ask the same statements again, each expecting
    # its own charge and answer id: fresh noise, as `SET dpsql.reuse = off` asks.
    running = start(tmp_path_factory.mktemp("pgwire"), reuse=False)
    yield running
    running.stop()


def _error(conn: psycopg.Connection, sql: str, params: tuple | None = None) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    return info.value


def test_a_select_answers_with_intervals_and_is_charged_and_stored_as_over_http(pg):
    notices: list[str] = []
    with pg.connect("ana") as conn, pg.http("ana") as http:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("SET dpsql.epsilon = 0.5")
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.5",)
        before = charge_count(pg.ledger)
        cursor = conn.execute(SQL)
        rows = cursor.fetchall()
        assert [d.name for d in cursor.description] == ["state", "n", "n_ci95"]
        ident = int(conn.execute("SHOW dpsql.answer_id").fetchone()[0])
        assert charge_count(pg.ledger) == before + 1
        assert notices and f"answer {ident} charged to ana" in notices[0]
        # the stored answer is what the client received, and /v1/history fetches it again
        stored = http.get("/v1/history", params={"id": ident}).json()[0]
        assert stored["analyst"] == "ana" and stored["sql"] == SQL
        answer = stored["answer"]
        assert [(s, n) for s, n, _ in rows] == [tuple(r) for r in answer["rows"]]
        assert [ci for _, _, ci in rows] == [c[1] for c in answer["ci95"]]
        # the same request over HTTP charges the same (answers differ only by their noise)
        over_http = http.post("/v1/query", json={"sql": SQL, "epsilon": 0.5}).json()
        assert over_http["columns"] == answer["columns"] and len(over_http["rows"]) == len(rows)
        assert {k: over_http[k] for k in ("epsilon", "epsilon_dp", "mode", "cost")} == \
            {k: answer[k] for k in ("epsilon", "epsilon_dp", "mode", "cost")}
        history = http.get("/v1/history").json()
        assert [(e["epsilon"], e["epsilon_dp"], e["mode"]) for e in history[-2:]] == \
            [(0.5, answer["epsilon_dp"], answer["mode"])] * 2


def test_parameters_explain_and_refusals_keep_the_connection_usable(pg):
    with pg.connect("ana") as conn, pg.http("ana") as http:
        conn.execute("SET dpsql.cost TO '0.25'")
        rows = conn.execute("SELECT state, AVG(age) AS a FROM people WHERE age > %s AND note <> %s "
                            "GROUP BY state", (30, "it's")).fetchall()
        assert len(rows) == 4 and all(len(r) == 3 for r in rows)
        stored = http.get("/v1/history", params={"id": conn.execute("SHOW dpsql.answer_id").fetchone()[0]})
        assert stored.json()[0]["sql"].endswith("WHERE age > 30 AND note <> 'it''s' GROUP BY state")
        before = charge_count(pg.ledger)
        plan = [line for (line,) in conn.execute("EXPLAIN " + SQL).fetchall()]
        assert plan[0] == f"sql: {SQL}" and any(line.startswith("aggregate n: COUNT") for line in plan)
        cases = [("SELECT COUNT(* FROM people", "42601"), ("SELECT age FROM people", "0A000"),
                 ("DELETE FROM people", "0A000"), ("SELECT COUNT(*) FROM secrets", None)]
        for sql, code in cases:
            error = _error(conn, sql)
            http_error = http.post("/v1/query", json={"sql": sql, "cost": 0.25}).json()["error"]
            assert str(error) == http_error  # the same one-line message
            if code is not None:
                assert error.sqlstate == code
        assert charge_count(pg.ledger) == before
        assert len(conn.execute(SQL).fetchall()) == 4  # still usable


def test_over_cap_and_wrong_role_are_refused_with_their_sqlstate_and_cost_nothing(pg):
    before = charge_count(pg.ledger)
    with pg.connect("bob") as bob, pg.http("bob") as http:
        bob.execute("SET dpsql.epsilon = 5")
        error = _error(bob, SQL)
        assert error.sqlstate == "53400"
        assert str(error) == http.post("/v1/query", json={"sql": SQL, "epsilon": 5}).json()["error"]
    with pg.connect("acc") as acc:
        acc.execute("SET dpsql.epsilon = 0.5")
        assert _error(acc, SQL).sqlstate == "42501"
        assert acc.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL 16.0 (dpsql")
    assert charge_count(pg.ledger) == before


def test_wrong_tokens_and_names_are_refused_at_connect(pg):
    for name, token in (("ana", "x" * 43), ("ana", pg.tokens["bob"]), ("nobody", pg.tokens["ana"])):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            pg.connect(name, token=token)


def test_injection_through_set_is_refused_and_costs_nothing(pg):
    before = charge_count(pg.ledger)
    with pg.connect("ana") as conn:
        for statement in ("SET dpsql.epsilon = '0.5; DROP TABLE people'", "SET dpsql.epsilon = 0.5; SELECT 1",
                          "SET dpsql.mode = 'x''; SELECT * FROM people --'", "SET dpsql.budget = 99",
                          "SET dpsql.epsilon = -1", "SET dpsql.epsilon = 'nan'", "SET a = b c"):
            assert _error(conn, statement).sqlstate in ("22023", "42601", "42704")
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("",)
        assert conn.execute("SHOW dpsql.mode").fetchone() == ("",)
        # the catalog is the policy's empty tables: no data, no files, nothing it can be changed by
        assert conn.execute("SELECT COUNT(*) FROM pg_catalog.pg_class WHERE relname = 'people'").fetchone() \
            == (1,)
        for statement in ("SELECT 1; CREATE TABLE public.x (a INT)", "SELECT * FROM read_csv('/etc/passwd')",
                          "SELECT * FROM pg_class, read_text('/etc/hostname')"):
            assert _error(conn, statement).sqlstate in ("0A000", "42601", "22023")
        conn.execute("SET dpsql.epsilon = 0.5")
        assert _error(conn, "SELECT * FROM public.people").sqlstate == "0A000"  # the engine's refusal
        assert conn.execute("SELECT relname FROM pg_catalog.pg_class WHERE relname = 'x'").fetchall() == []
    assert charge_count(pg.ledger) == before


def test_two_analysts_at_once_are_each_charged_their_own_answers(pg):
    counts = {name: len(pg.http(name).get("/v1/history").json()) for name in ("ana", "bob")}
    failures: list[BaseException] = []

    def work(name: str) -> None:
        try:
            with pg.connect(name) as conn:
                conn.execute("SET dpsql.epsilon = 0.05")
                for _ in range(4):
                    assert len(conn.execute(SQL).fetchall()) == 4
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(name,)) for name in ("ana", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert {name: len(pg.http(name).get("/v1/history").json()) - counts[name]
            for name in ("ana", "bob")} == {"ana": 4, "bob": 4}


def _raw(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send bytes on a new connection and return what the server answers before it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return received


def _startup(user: str) -> bytes:
    body = struct.pack("!i", 196608) + b"user\0" + user.encode() + b"\0database\0dpsql\0\0"
    return struct.pack("!i", len(body) + 4) + body


def test_hostile_clients_get_errors_cost_nothing_and_others_keep_being_served(pg):
    before = charge_count(pg.ledger)
    started = time.monotonic()
    # a startup message claiming 1 GB: refused from its length, nothing read or allocated
    answer = _raw(pg.pg_port, struct.pack("!i", 1 << 30) + b"\0" * 64)
    assert answer[:1] == b"E" and b"08P01" in answer and b"at most 10000" in answer
    # garbage, a length under the minimum, an unknown protocol, a cancel request for a session
    assert b"08P01" in _raw(pg.pg_port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"08P01" in _raw(pg.pg_port, struct.pack("!i", 2))
    assert b"only 3.0" in _raw(pg.pg_port, struct.pack("!ii", 8, 0x00020000))
    assert _raw(pg.pg_port, struct.pack("!iiii", 16, 80877102, 1234, 5678)) == b""
    # after the password: an oversized message, then a Bind that ends early (answered, usable)
    login = _startup("ana") + b"p" + struct.pack("!i", 4 + len(pg.tokens["ana"]) + 1) \
        + pg.tokens["ana"].encode() + b"\0"
    huge = _raw(pg.pg_port, login + b"Q" + struct.pack("!i", 1 << 30))
    assert b"54000" in huge and b"at most 65536" in huge
    parse = b"P" + struct.pack("!i", 4 + 1 + 9 + 2) + b"\0SELECT 1\0" + struct.pack("!h", 0)
    bind = b"B" + struct.pack("!i", 6) + b"\0\0"  # ends before its format codes
    broken = _raw(pg.pg_port, login + parse + bind + b"S" + struct.pack("!i", 4)
                  + b"Q" + struct.pack("!i", 13) + b"SELECT 1\0" + b"X" + struct.pack("!i", 4))
    assert b"ends before its fields" in broken and broken.rstrip().count(b"Z") >= 2 and b"C\0\0\0\rSELECT 1" \
        in broken
    # a wrong password over the raw protocol: FATAL 28P01
    assert b"28P01" in _raw(pg.pg_port, _startup("ana") + b"p" + struct.pack("!i", 9) + b"nope\0")
    # many connections opened and dropped, some mid-startup
    for i in range(300):
        with socket.create_connection(("127.0.0.1", pg.pg_port)) as sock:
            if i % 3 == 0:
                sock.sendall(struct.pack("!i", 40) + b"\0\0")
    assert time.monotonic() - started < 90  # none of it holds the listener up
    with pg.connect("ana") as conn:
        conn.execute("SET dpsql.epsilon = 0.1")
        assert len(conn.execute(SQL).fetchall()) == 4
    assert charge_count(pg.ledger) == before + 1


def test_failed_logins_are_rate_limited_like_http_tokens(tmp_path):
    running = start(tmp_path, Limits(rate=1000, burst=1000, failures_per_minute=3))
    try:
        said = []
        for _ in range(5):
            with pytest.raises(psycopg.OperationalError) as info:
                running.connect("ana", token="wrong" * 9)
            said.append("too many failed tokens" if "too many failed tokens" in str(info.value) else
                        "failed" if "password authentication failed" in str(info.value) else str(info.value))
        assert said == ["failed"] * 3 + ["too many failed tokens"] * 2
        # the limit is shared with HTTP's failed tokens from the same address
        assert httpx.get(running.url + "/v1/budget", headers={"Authorization": "Bearer x"}).status_code == 429
    finally:
        running.stop()


def test_pandas_through_sqlalchemy(pg):
    pd = pytest.importorskip("pandas")
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://ana:{pg.tokens['ana']}@127.0.0.1:{pg.pg_port}/dpsql")
    before = charge_count(pg.ledger)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SET dpsql.epsilon = 0.5")
            frame = pd.read_sql_query(SQL, conn)
            assert list(frame.columns) == ["state", "n", "n_ci95"] and len(frame) == 4
            assert frame["n"].dtype.kind == "i" and frame["n_ci95"].dtype.kind == "f"
            ages = pd.read_sql_query(sqlalchemy.text("SELECT AVG(age) AS a FROM people WHERE age > :x"),
                                     conn, params={"x": 20})
            assert list(ages.columns) == ["a", "a_ci95"]
            assert sqlalchemy.inspect(conn).get_table_names() == ["people"]
    finally:
        engine.dispose()
    assert charge_count(pg.ledger) == before + 2


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql (Debian postgresql-client) not installed")
def test_a_psql_session(pg):
    script = f"SET dpsql.epsilon = 0.5;\n{SQL};\n\\dt\n\\d people\nSELECT age FROM people;\n" \
             "EXPLAIN SELECT COUNT(*) FROM people;\n"
    done = subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(pg.pg_port), "-U", "ana", "-d", "dpsql"],
                          input=script, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PGPASSWORD": pg.tokens["ana"]})
    out = done.stdout
    assert " state |  n  |       n_ci95" in out.replace("n  |", "n  |") or "n_ci95" in out
    assert "(4 rows)" in out and "public | people | table" in out
    assert 'Table "public.people"' in out and " age    | int8" in out
    assert "ERROR:  column age in SELECT refused" in done.stderr
    assert "sql: SELECT COUNT(*) FROM people" in out


def test_dpsql_serve_pg_port_on_the_command_line_requires_tls_when_it_has_a_certificate(tmp_path):
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    token = add_analysts(ledger, {"ana": ("analyst", None)})["ana"]
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    pg_port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "dpsql", "serve", "--db", str(db), "--policy",
                                str(policy), "--ledger", str(ledger), "--port", "0", "--pg-port", str(pg_port),
                                "--tls-cert", str(cert), "--tls-key", str(key)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    options = {"host": "127.0.0.1", "port": pg_port, "user": "ana", "password": token, "dbname": "dpsql",
               "autocommit": True}
    try:
        deadline, rows = time.monotonic() + 60, None
        while rows is None and time.monotonic() < deadline:
            try:
                with psycopg.connect(**options, sslmode="verify-full", sslrootcert=str(cert)) as conn:
                    conn.execute("SET dpsql.epsilon = 0.5")
                    rows = conn.execute(SQL).fetchall()
            except psycopg.OperationalError:
                time.sleep(0.2)
        assert rows is not None and len(rows) == 4
        with pytest.raises(psycopg.OperationalError, match="requires TLS"):
            psycopg.connect(**options, sslmode="disable")
        assert charge_count(ledger) == 1
    finally:
        process.terminate()
        process.wait(30)


def _scrape(pg: PgService) -> dict[str, float]:
    """The accountant's /metrics as {series with labels: value}."""
    with pg.http("acc") as http:
        response = http.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in response.text.splitlines() if line and not line.startswith("#")}


def test_metrics_count_answers_refusals_latency_and_budgets_of_both_endpoints(pg):
    with pg.http("ana") as http:
        assert http.get("/metrics").status_code == 403  # the accountant's only
    before = _scrape(pg)
    with pg.connect("ana") as conn, pg.http("ana") as http:
        conn.execute("SET dpsql.epsilon = 0.1")
        conn.execute(SQL)
        assert _error(conn, "SELECT age FROM people").sqlstate == "0A000"
        assert http.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}).status_code == 200
    with pg.http("bob") as http:
        assert http.post("/v1/query", json={"sql": SQL, "epsilon": 5}).status_code == 403  # over the cap
    after = _scrape(pg)

    def grew(series: str) -> float:
        return after.get(series, 0.0) - before.get(series, 0.0)

    assert grew('dpsql_answers_total{endpoint="pg query"}') == 1
    assert grew('dpsql_answers_total{endpoint="http /v1/query"}') == 1
    assert grew('dpsql_refusals_total{endpoint="pg query",reason="QueryRefused"}') == 1
    assert grew('dpsql_refusals_total{endpoint="http /v1/query",reason="BudgetExhausted"}') == 1
    assert grew('dpsql_request_seconds_count{endpoint="pg query"}') == 2
    assert grew('dpsql_request_seconds_bucket{endpoint="http /v1/query",le="+Inf"}') == 2
    # Two charges written (one per endpoint; refusals write nothing), each timed.
    assert grew("dpsql_ledger_write_seconds_count") == 2
    assert grew('dpsql_ledger_write_seconds_bucket{le="+Inf"}') == 2
    assert 0 < grew("dpsql_ledger_write_seconds_sum") < 30
    assert after['dpsql_budget_epsilon{state="spent"}'] + after['dpsql_budget_epsilon{state="left"}'] \
        == pytest.approx(after['dpsql_budget_epsilon{state="total"}'])
    assert grew('dpsql_analyst_spent_dp_epsilon{analyst="ana"}') == pytest.approx(0.2)
    assert 'dpsql_analyst_cap_left_epsilon{analyst="bob"}' in after


def test_binary_results_say_what_the_text_results_say(pg):
    """A client may ask for binary results (JDBC does for a statement it prepared): each type's
    binary form carries the same value as its text form, private answers and catalog alike."""
    sql = ("SELECT CAST(-12345.678 AS DECIMAL(10,3)) AS d, CAST(0.0001 AS DECIMAL(9,4)) AS tiny, "
           "DATE '2020-02-29' AS day, TIMESTAMP '2021-03-04 05:06:07.5' AS t, CAST(2 AS SMALLINT) AS s, "
           "CAST(-7 AS INTEGER) AS i, true AS b, 'é' AS txt, CAST(0.25 AS DOUBLE) AS f")
    with pg.connect("ana") as conn:
        text = conn.execute(sql).fetchone()
        binary = conn.cursor(binary=True).execute(sql).fetchone()
        assert binary == text
        assert [type(v).__name__ for v in binary] == ["Decimal", "Decimal", "date", "datetime", "int", "int",
                                                      "bool", "str", "float"]
        conn.execute("SET dpsql.epsilon = 0.5")
        cursor = conn.cursor(binary=True)
        rows = cursor.execute("SELECT sick, COUNT(*) AS n FROM people GROUP BY sick").fetchall()
        ident = conn.execute("SHOW dpsql.answer_id").fetchone()[0]
    with pg.http("ana") as http:
        stored = http.get("/v1/history", params={"id": ident}).json()[0]["answer"]
    assert [(s, n) for s, n, _ in rows] == [tuple(r) for r in stored["rows"]]
    assert [ci for _, _, ci in rows] == [c[1] for c in stored["ci95"]]


def test_an_execute_with_a_row_limit_suspends_the_portal_until_its_rows_are_sent(pg):
    """Execute(portal, n) sends n rows then PortalSuspended; the next Execute sends the rest."""
    login = _startup("ana") + b"p" + struct.pack("!i", 4 + len(pg.tokens["ana"]) + 1) \
        + pg.tokens["ana"].encode() + b"\0"
    sql = b"SELECT relname FROM pg_catalog.pg_class WHERE relname = 'people' OR relname = 'people'" \
          b" UNION ALL SELECT 'b' UNION ALL SELECT 'c'\0"
    parse = b"P" + struct.pack("!i", 4 + 1 + len(sql) + 2) + b"\0" + sql + struct.pack("!h", 0)
    bind = b"B" + struct.pack("!i", 4 + 5 + 6) + b"cur\0\0" + struct.pack("!hhh", 0, 0, 0)
    execute = b"E" + struct.pack("!i", 4 + 4 + 4) + b"cur\0" + struct.pack("!i", 2)
    sync, end = b"S" + struct.pack("!i", 4), b"X" + struct.pack("!i", 4)
    answer = _raw(pg.pg_port, login + parse + bind + execute + sync + execute + sync + execute + sync + end)
    after = answer[answer.index(b"2\0\0\0\4"):]  # from BindComplete on
    kinds = []
    while after:
        kinds.append(after[:1])
        after = after[1 + struct.unpack("!i", after[1:5])[0]:]
    assert kinds == [b"2", b"D", b"D", b"s", b"Z", b"D", b"C", b"Z", b"C", b"Z"]
    assert b"C\0\0\0\rSELECT 1\0" in answer and b"C\0\0\0\rSELECT 0\0" in answer


def test_startup_parameters_are_settings_and_what_the_endpoint_speaks_stays_fixed(pg):
    """`options=-c dpsql.epsilon=...` and application_name from the startup packet hold for the
    session as SET would; an encoding or date style the endpoint does not send is refused."""
    before = charge_count(pg.ledger)
    with pg.connect("ana", options="-c dpsql.epsilon=0.5 --dpsql.mode=independent",
                    application_name="notebook") as conn:
        assert conn.info.parameter_status("application_name") == "notebook"
        assert conn.execute("SHOW application_name").fetchone() == ("notebook",)
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.5",)
        assert conn.execute("SHOW dpsql.mode").fetchone() == ("independent",)
        assert len(conn.execute(SQL).fetchall()) == 4
        for statement in ("SET client_encoding = 'LATIN1'", "SET DateStyle = 'German'"):
            assert _error(conn, statement).sqlstate == "0A000"
        conn.execute("SET client_encoding = 'UTF8'")
        conn.execute("SET DateStyle = 'ISO, MDY'")
        assert conn.execute("SHOW client_encoding").fetchone() == ("UTF8",)
    for options, said in (("-c dpsql.epsilon=-1", "dpsql.epsilon must be a finite number > 0"),
                          ("-x", "options accepts -c name=value pairs"),
                          ("-c dpsql.budget=99", "unknown setting dpsql.budget")):
        with pytest.raises(psycopg.OperationalError, match=said):
            pg.connect("ana", options=options)
    assert charge_count(pg.ledger) == before + 1


def test_catalog_questions_naming_no_policy_table_are_answered_from_the_policy(pg):
    """JDBC's type and key questions (a table function, information_schema._pg_expandarray,
    pg_settings) are catalog questions: answered without an epsilon, charged nothing, and
    pg_settings holds the endpoint's parameters, nothing of the machine's."""
    before = charge_count(pg.ledger)
    with pg.connect("ana") as conn:
        assert conn.execute("SELECT t.typname FROM pg_catalog.pg_type t JOIN (SELECT s.r FROM "
                            "generate_series(1, 2) AS s(r)) AS g ON g.r = 1 WHERE t.typname = 'int8'"
                            ).fetchall() == [("int8",)]
        assert conn.execute("SELECT (information_schema._pg_expandarray(i.indkey)).n FROM "
                            "pg_catalog.pg_index i").fetchall() == []
        assert conn.execute("SELECT setting FROM pg_catalog.pg_settings WHERE name = 'max_index_keys'"
                            ).fetchall() == [("32",)]
        settings = dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall())
        assert settings["server_version"] == "16.0" and not any("/" in v for v in settings.values())
        # a policy table sends it to the engine, which asks for an epsilon first
        assert _error(conn, "SELECT COUNT(*) FROM people, pg_catalog.pg_type").sqlstate == "22023"
    assert charge_count(pg.ledger) == before


def _parse(name: str, sql: str) -> bytes:
    body = name.encode() + b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0)
    return b"P" + struct.pack("!i", len(body) + 4) + body


def test_a_connection_holds_a_bounded_number_of_prepared_statements(pg):
    """Prepared statements are held until closed: past 1,024 of them, or 8 MiB of their SQL, a
    Parse is refused (54000) and the connection stays usable."""
    login = _startup("ana") + b"p" + struct.pack("!i", 4 + len(pg.tokens["ana"]) + 1) \
        + pg.tokens["ana"].encode() + b"\0"
    sync, end = b"S" + struct.pack("!i", 4), b"X" + struct.pack("!i", 4)
    query = b"Q" + struct.pack("!i", 13) + b"SELECT 1\0"
    many = b"".join(_parse(f"s{i}", "SELECT 1") for i in range(1025))
    answer = _raw(pg.pg_port, login + many + sync + query + end)
    assert answer.count(b"1\0\0\0\4") == 1024 and b"54000" in answer and b"at most 1024" in answer
    assert b"C\0\0\0\rSELECT 1" in answer  # usable after the Sync
    big = "SELECT 1 -- " + "x" * 60_000
    answer = _raw(pg.pg_port, login + b"".join(_parse(f"b{i}", big) for i in range(150)) + sync + query + end)
    assert answer.count(b"1\0\0\0\4") == (8 << 20) // len(big) and b"8 MiB of SQL" in answer
    assert b"C\0\0\0\rSELECT 1" in answer
