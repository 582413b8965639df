"""Two processes sharing one ledger can never overspend it together."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dpsql.engine.accounting import chain
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding

from tests.support import create_ledger, write_policy

ROOT = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent("""
    import sys
    from dpsql.engine import BudgetExhausted, PrivateDatabase
    # the same query again on purpose: each answer charged, with fresh noise
    db = PrivateDatabase.connect(sys.argv[1], policy=sys.argv[2], ledger=sys.argv[3], reuse=False)
    answered = 0
    for _ in range(40):
        try:
            db.query("SELECT COUNT(*) FROM people", epsilon=0.25)
            answered += 1
        except BudgetExhausted:
            pass
    print(answered)
""")


def test_two_processes_never_overspend(tmp_path, people_db):
    policy = write_policy(tmp_path / "p.yaml", {"budget": {"epsilon": 3.0}})  # k = 1: 12 answers
    ledger = create_ledger(tmp_path / "shared.sqlite", policy)
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(people_db), str(policy), str(ledger)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for _ in range(2)
    ]
    answered = [int(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(answered) == 12
    assert Ledger(ledger, LedgerBinding(3.0, 1, 0.0)).spent_dp() == pytest.approx(3.0)
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        chained = chain.verify(conn)
    assert (chained.problem, chained.records) == (None, 12), "both processes' charges chain"
