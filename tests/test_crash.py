"""Processes answering queries are killed (SIGKILL) at random moments: afterwards the ledger
opens cleanly, passes sqlite's integrity check, and every answer a process released has its
charge recorded. Nothing recorded is lost; at worst a charge exists for an answer the killed
process never printed (the engine charges before it releases)."""

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
import time
from pathlib import Path

import pytest

from engine.ledger import Ledger, LedgerBinding

ROOT = Path(__file__).parent.parent
EPSILON = 0.001

_WORKER = """
import json, sys
from engine import PrivateDatabase
db_path, policy, ledger, name, epsilon = sys.argv[1:6]
with PrivateDatabase.connect(db_path, policy, ledger) as db:
    for i in range(100000):
        tag = f"{name}-{i}"
        result = db.query("SELECT state, COUNT(*) FROM people GROUP BY state", epsilon=float(epsilon),
                          analyst=tag)
        print(json.dumps({"tag": tag, "epsilon_dp": result.epsilon_dp,
                          "rows": result.df.values.tolist()}), flush=True)
"""


def _released(output: str) -> list[dict]:
    """Answers a killed process printed completely (a torn last line is not a release)."""
    answers = []
    for line in output.splitlines():
        try:
            answers.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return answers


def _run_and_kill(people_db: Path, policy: Path, ledger: Path, rounds: int, workers: int,
                  rng: random.Random) -> list[dict]:
    released: list[dict] = []
    for r in range(rounds):
        children = [subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(people_db), str(policy), str(ledger), f"r{r}w{w}",
             str(EPSILON)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            for w in range(workers)]
        started = time.monotonic()
        for delay, child in sorted(zip([rng.uniform(0.5, 4.0) for _ in children], children,
                                       strict=True), key=lambda pair: pair[0]):
            time.sleep(max(0.0, started + delay - time.monotonic()))
            os.kill(child.pid, signal.SIGKILL)
        for child in children:
            out, _ = child.communicate(timeout=60)
            assert child.returncode == -signal.SIGKILL
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
    assert len(released) >= 10, "the processes should have released answers before being killed"
    _check(setup.ledger, released)


@pytest.mark.slow
def test_sigkill_many_rounds(people_db, setup):
    rng = random.Random()
    released = _run_and_kill(people_db, setup.policy, setup.ledger, rounds=8, workers=4, rng=rng)
    _check(setup.ledger, released)
