"""Many processes share one ledger whose budget admits exactly N answers: exactly N are
released, every other process gets exit code 3, and the ledger holds exactly N charges."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import create_ledger, write_policy

ROOT = Path(__file__).parent.parent
EPSILON = 0.5  # with k = 1 the calibration is the identity: epsilon_dp = 0.5, exact in binary


def _policy(path: Path, admitted: int) -> Path:
    return write_policy(path, {"budget": {"epsilon": admitted * EPSILON},
                               "dependence": {"k": 1, "eta": 0.0, "mode": "auto"}})


def _ledger_rows(path: Path) -> list[float]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT epsilon_dp FROM charges").fetchall()]


@pytest.mark.parametrize(("processes", "admitted"), [(10, 4)])
def test_exactly_n_of_many_processes_are_answered(people_db, tmp_path, processes, admitted):
    policy = _policy(tmp_path / "policy.yaml", admitted)
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    command = [sys.executable, "-m", "dpsql", "query", "--db", str(people_db), "--policy",
               str(policy), "--ledger", str(ledger), "--epsilon", str(EPSILON), "--format", "json",
               "--no-reuse", "SELECT state, COUNT(*), SUM(income) FROM people GROUP BY state"]
    children = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(processes)]
    outcomes = [(child.wait(timeout=120), *child.communicate()) for child in children]
    answered = [json.loads(out) for code, out, _ in outcomes if code == 0]
    refused = [err for code, _, err in outcomes if code == 3]
    assert len(answered) == admitted, outcomes
    assert len(refused) == processes - admitted, outcomes
    assert all(err.startswith("error: over budget") for err in refused)
    assert all(out == "" for code, out, _ in outcomes if code == 3)
    rows = _ledger_rows(ledger)
    assert len(rows) == admitted
    assert math.fsum(rows) == admitted * answered[0]["epsilon_dp"] == admitted * EPSILON


_WORKER = """
import os, sys, time
from dpsql.engine import PrivateDatabase
from dpsql.engine.errors import BudgetExhausted
db_path, policy, ledger, start, count = sys.argv[1:6]
with PrivateDatabase.connect(db_path, policy, ledger, reuse=False) as db:  # each one charged
    while not os.path.exists(start):
        time.sleep(0.001)
    for i in range(int(count)):
        try:
            db.query("SELECT COUNT(*) FROM people", epsilon=float(sys.argv[6]))
            print("ok", flush=True)
        except BudgetExhausted:
            print("exhausted", flush=True)
"""


@pytest.mark.slow
def test_exactly_n_under_heavy_contention(people_db, tmp_path):
    """Twelve processes released at once by a start file, 15 queries each, 53 admitted."""
    admitted, processes, each = 53, 12, 15
    policy = _policy(tmp_path / "policy.yaml", admitted)
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    start = tmp_path / "start"
    children = [subprocess.Popen([sys.executable, "-c", _WORKER, str(people_db), str(policy),
                                  str(ledger), str(start), str(each), str(EPSILON)], cwd=ROOT,
                                 stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    time.sleep(3)
    start.touch()
    lines = []
    for child in children:
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0
        lines += out.split()
    assert lines.count("ok") == admitted
    assert lines.count("exhausted") == processes * each - admitted
    assert math.fsum(_ledger_rows(ledger)) == admitted * EPSILON
