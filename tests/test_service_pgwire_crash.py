"""The service SIGKILLed while Postgres-protocol clients have queries running: after a restart on
the same files the ledger passes sqlite's integrity check, the budget spent is the sum of the
committed charges, and every answer a client received over the wire is in the history, exactly
as received (the HTTP version: tests/test_service_crash.py)."""

from __future__ import annotations

import json
import math
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.service import stop, wait_for_url
from tests.support import create_ledger, make_people, write_policy
from tests.test_service import add_analysts, free_port

psycopg = pytest.importorskip("psycopg")
ROOT = Path(__file__).resolve().parent.parent
SQL = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
Received = tuple[int, str, list[tuple]]


def _serve(db: Path, policy: Path, ledger: Path, pg_port: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "dpsql", "serve", "--db", str(db), "--policy", str(policy), "--ledger",
         str(ledger), "--port", "0", "--pg-port", str(pg_port), "--rate", "1000", "--burst", "1000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return process, wait_for_url(process)


def _burst(pg_port: int, tokens: dict[str, str], received: list[Received],
           failures: list[BaseException]) -> None:
    """Every analyst runs queries over the wire until the server goes away; keep every answer
    received with the id its notice names."""
    def client(name: str, token: str) -> None:
        notices: list[str] = []
        try:
            with psycopg.connect(host="127.0.0.1", port=pg_port, user=name, password=token, dbname="dpsql",
                                 autocommit=True, connect_timeout=20) as conn:
                conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
                conn.execute("SET dpsql.epsilon = 0.01")
                conn.execute("SET dpsql.reuse = off")  # the same query again: each one charged
                while True:
                    rows = conn.execute(SQL).fetchall()
                    found = re.match(r"answer (\d+) charged to (\w+)", notices[-1])
                    assert found is not None and found.group(2) == name, notices[-1]
                    received.append((int(found.group(1)), name, rows))
        except psycopg.OperationalError:
            return  # the server was killed
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=client, args=item) for item in tokens.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)


def _wire_rows(answer: dict) -> list[tuple]:
    """A stored answer as the endpoint sends it: each noisy cell followed by its half-width."""
    intervals = answer["ci95"] if answer["selection_adjusted"] else answer["ci95_simultaneous"]
    return [tuple(cell for value, ci in zip(row, cis, strict=True)
                  for cell in ((value,) if ci is None else (value, ci)))
            for row, cis in zip(answer["rows"], intervals, strict=True)]


def _rounds(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    tokens = add_analysts(ledger, {f"a{i}": ("analyst", None) for i in range(4)})
    accountant = add_analysts(ledger, {"acc": ("accountant", None)})["acc"]
    pg_port = free_port()
    received: list[Received] = []
    failures: list[BaseException] = []
    for _ in range(rounds):
        process, _url = _serve(db, policy, ledger, pg_port)
        burst = threading.Thread(target=_burst, args=(pg_port, tokens, received, failures))
        before = len(received)
        burst.start()
        deadline = time.monotonic() + 60
        wanted = rng.randint(3, 15)  # answers in this round before the kill, then a random delay
        while len(received) - before < wanted and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.2))
        process.send_signal(signal.SIGKILL)  # with queries running: the clients never stop asking
        process.wait(30)
        burst.join(90)
        assert failures == [] and len(received) - before >= wanted
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        charges = {r[0]: (r[1], r[2], json.loads(r[3])) for r in conn.execute(
            "SELECT id, analyst, epsilon_dp, answer FROM charges LEFT JOIN answers USING (id)").fetchall()}
    process, url = _serve(db, policy, ledger, pg_port)  # the ledger opens and the service answers
    try:
        with psycopg.connect(host="127.0.0.1", port=pg_port, user="a0", password=tokens["a0"],
                             dbname="dpsql", autocommit=True) as conn:
            conn.execute("SET dpsql.epsilon = 0.01")
            conn.execute("SET dpsql.reuse = off")  # a new charge after the restart
            assert len(conn.execute(SQL).fetchall()) == 4
            after = int(conn.execute("SHOW dpsql.answer_id").fetchone()[0])
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {accountant}"}) as http:
            budget = http.get("/v1/budget").json()["global"]
            # every answer received is in the history, exactly as received
            for ident, name, rows in received:
                stored = http.get("/v1/history", params={"id": ident, "analyst": name}).json()
                assert [(e["analyst"], e["sql"]) for e in stored] == [(name, SQL)]
                assert _wire_rows(stored[0]["answer"]) == rows
    finally:
        stop(process)
    assert len({ident for ident, _, _ in received}) == len(received)
    for ident, name, rows in received:
        assert charges[ident][0] == name and _wire_rows(charges[ident][2]) == rows
    assert after == max(charges) + 1
    # the budget spent is exactly the committed charges (this policy's level is Σ ε_dp)
    assert budget["spent_dp"] == pytest.approx(math.fsum(c[1] for c in charges.values()) + 0.01, abs=1e-9)


def test_sigkill_with_wire_queries_running_loses_no_received_answer(tmp_path):
    _rounds(tmp_path, rounds=2, seed=33)


@pytest.mark.slow
def test_sigkill_with_wire_queries_running_many_rounds(tmp_path):
    _rounds(tmp_path, rounds=8, seed=57)
