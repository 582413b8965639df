"""The service SIGKILLed in the middle of a burst of queries: after a restart on the same files,
every answer a client received has its charge (with the very answer), and the ledger passes
sqlite's integrity check."""

from __future__ import annotations

import json
import random
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
from tests.test_service import add_analysts

ROOT = Path(__file__).resolve().parent.parent
SQL = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"


def _serve(db: Path, policy: Path, ledger: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "dpsql", "serve", "--db", str(db), "--policy", str(policy),
         "--ledger", str(ledger), "--port", "0", "--rate", "1000", "--burst", "1000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return process, wait_for_url(process)


def _burst(url: str, tokens: dict[str, str], received: list, stop_sending: threading.Event) -> None:
    """Every analyst sends queries until the server goes away; keep every answer received."""
    def client(name: str, token: str) -> None:
        with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
            while not stop_sending.is_set():
                try:
                    response = http.post("/v1/query", json={"sql": SQL, "epsilon": 0.01,
                                                            "reuse": False})
                except httpx.TransportError:
                    return
                if response.status_code == 200:
                    received.append((int(response.headers["Dpsql-Answer-Id"]), name, response.json()))

    threads = [threading.Thread(target=client, args=item) for item in tokens.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _rounds(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    tokens = add_analysts(ledger, {f"a{i}": ("analyst", None) for i in range(4)})
    received: list[tuple[int, str, dict]] = []
    for _ in range(rounds):
        process, url = _serve(db, policy, ledger)
        stop_sending = threading.Event()
        burst = threading.Thread(target=_burst, args=(url, tokens, received, stop_sending))
        before = len(received)
        burst.start()
        deadline = time.monotonic() + 60
        wanted = rng.randint(3, 15)  # answers in this round before the kill, then a random delay
        while len(received) - before < wanted and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.2))
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        burst.join(60)
        stop_sending.set()
        assert len(received) - before >= wanted
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    process, url = _serve(db, policy, ledger)  # the ledger opens and the service answers
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['a0']}"}) as http:
            after = http.post("/v1/query", json={"sql": SQL, "epsilon": 0.01, "reuse": False})
            assert after.status_code == 200
    finally:
        stop(process)
    with sqlite3.connect(ledger) as conn:
        rows = {r[0]: (r[1], json.loads(r[2]))
                for r in conn.execute("SELECT id, analyst, answer FROM charges LEFT JOIN answers "
                                      "USING (id)").fetchall()}
    assert len({ident for ident, _, _ in received}) == len(received)
    for ident, name, answer in received:
        assert rows[ident] == (name, answer)
    assert int(after.headers["Dpsql-Answer-Id"]) == max(rows)


def test_sigkill_mid_burst_loses_no_charge_of_a_received_answer(tmp_path):
    _rounds(tmp_path, rounds=2, seed=14)


@pytest.mark.slow
def test_sigkill_mid_burst_many_rounds(tmp_path):
    _rounds(tmp_path, rounds=8, seed=41)
