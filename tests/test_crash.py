"""Processes answering queries are killed (SIGKILL) at random moments of their querying (after
a random number of their own "about to query" signals, plus a random delay, so a slow machine
only makes the test slower): afterwards the ledger opens cleanly, passes sqlite's integrity
check, and every answer a process released has its charge recorded. Nothing recorded is lost;
at worst a charge exists for an answer the killed process never printed (the engine charges
before it releases)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding

ROOT = Path(__file__).parent.parent
EPSILON = 0.001

_WORKER = """
import json, sys, time
from dpsql.engine import PrivateDatabase
db_path, policy, ledger, name, epsilon, cold_start = sys.argv[1:7]
time.sleep(float(cold_start))  # a slow machine: importing and opening take this much longer
with PrivateDatabase.connect(db_path, policy, ledger) as db:
    for i in range(100000):
        tag = f"{name}-{i}"
        print(json.dumps({"about_to_query": tag}), flush=True)
        result = db.query("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=float(epsilon),
                          analyst=tag)
        print(json.dumps({"tag": tag, "epsilon_dp": result.epsilon_dp,
                          "rows": result.df.values.tolist()}), flush=True)
"""
READY_TIMEOUT = 300.0  # seconds a worker may take to signal at all; only a hung worker reaches it


def _released(lines: list[str]) -> list[dict]:
    """Answers a killed process printed completely (a torn last line is not a release)."""
    answers = []
    for line in lines:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "rows" in message:
            answers.append(message)
    return answers


def _kill_on_signal(child: subprocess.Popen, signals: int, delay: float, lines: list[str]) -> None:
    """Read the worker's output; once it has said `signals` times that it is about to query,
    wait `delay` seconds (so the kill lands before, inside or after that query's charge) and
    SIGKILL it. Readiness, not a clock: a slow first query only makes the test take longer."""
    seen = 0
    for line in child.stdout:
        lines.append(line)
        if line.startswith('{"about_to_query"'):
            seen += 1
            if seen == signals:
                time.sleep(delay)
                os.kill(child.pid, signal.SIGKILL)


def _run_and_kill(people_db: Path, policy: Path, ledger: Path, rounds: int, workers: int,
                  rng: random.Random, cold_start: float = 0.0) -> list[dict]:
    released: list[dict] = []
    for r in range(rounds):
        children = [subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(people_db), str(policy), str(ledger), f"r{r}w{w}",
             str(EPSILON), str(cold_start)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for w in range(workers)]
        outputs: list[list[str]] = [[] for _ in children]
        readers = [threading.Thread(target=_kill_on_signal,
                                    args=(child, rng.randint(3, 8), rng.uniform(0.0, 0.03), out))
                   for child, out in zip(children, outputs, strict=True)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(READY_TIMEOUT)
        hung = [child.pid for child, reader in zip(children, readers, strict=True) if reader.is_alive()]
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        for child, out in zip(children, outputs, strict=True):
            errors = child.stderr.read()
            child.wait(timeout=60)
            assert not hung, f"workers {hung} gave no signal in {READY_TIMEOUT} s"
            assert child.returncode == -signal.SIGKILL, f"worker exited on its own: {errors}"
            released += _released(out)
    return released


def _check(ledger: Path, released: list[dict]) -> None:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute("SELECT analyst, epsilon_dp FROM charges").fetchall()
    charged = {analyst: eps for analyst, eps in rows}
    assert len(charged) == len(rows), "one charge per answer"
    missing = [a["tag"] for a in released if a["tag"] not in charged]
    assert not missing, f"released without a recorded charge: {missing[:5]}"
    assert all(charged[a["tag"]] == a["epsilon_dp"] for a in released)
    book = Ledger(ledger, LedgerBinding(1000.0, 1, 0.0))
    assert book.spent_dp() == math.fsum(eps for _, eps in rows)
    book.close()


def test_sigkill_during_queries_loses_no_charge(people_db, setup):
    rng = random.Random(20240611)
    released = _run_and_kill(people_db, setup.policy, setup.ledger, rounds=2, workers=3, rng=rng)
    assert len(released) >= 12, "each process releases at least 2 answers before it is killed"
    _check(setup.ledger, released)


def test_sigkill_waits_for_workers_on_a_cold_machine(people_db, setup):
    """Workers that take 4.5 s to start (a clock killing them 0.5-4 s after spawn would kill
    them before any answer) are still killed mid-querying, after their own readiness signals."""
    rng = random.Random(7)
    released = _run_and_kill(people_db, setup.policy, setup.ledger, rounds=1, workers=2, rng=rng,
                             cold_start=4.5)
    assert len(released) >= 4
    _check(setup.ledger, released)


@pytest.mark.slow
def test_sigkill_many_rounds(people_db, setup):
    rng = random.Random()
    released = _run_and_kill(people_db, setup.policy, setup.ledger, rounds=8, workers=4, rng=rng)
    _check(setup.ledger, released)
