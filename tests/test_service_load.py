"""The service under load: 16 concurrent clients on 127.0.0.1, 1,200 requests, over HTTP and over
the Postgres wire protocol; nothing but the intended refusals, and each analyst's cap admits
exactly the answers it should: each client asks 19 queries at once with the others, 9 past its
cap of 10. (Latency, at 2,400 requests, is measured by benchmarks/service.py, not asserted here.)"""

from __future__ import annotations

import json
import math
import sqlite3
import time

from benchmarks.service import EPSILON, drive, drive_wire
from tests.test_service import FAST, start
from tests.test_service_pgwire import start as start_pg

CLIENTS, REQUESTS, ADMITTED = 16, 75, 10


def test_sixteen_clients_get_exact_caps_and_no_unintended_error(tmp_path):
    analysts = {f"client{i}": ("analyst", ADMITTED * EPSILON) for i in range(CLIENTS)}
    running = start(tmp_path, analysts=analysts, limits=FAST)
    try:
        began = time.monotonic()
        outcomes = drive(running.url, [running.tokens[f"client{i}"] for i in range(CLIENTS)], REQUESTS)
        assert time.monotonic() - began < 120
    finally:
        running.stop()
    assert len(outcomes) == CLIENTS * REQUESTS
    unintended = [o for o in outcomes if o.status != 200 and
                  not (o.kind == "query" and o.status == 403 and o.error_type == "BudgetExhausted")]
    assert not unintended, unintended[:3]
    for client in range(CLIENTS):
        answered = [o for o in outcomes if o.client == client and o.kind == "query" and o.status == 200]
        assert len(answered) == ADMITTED  # the cap admits exactly N answers, concurrency or not
    with sqlite3.connect(running.ledger) as conn:
        rows = conn.execute("SELECT id, analyst, epsilon_dp, answer FROM charges LEFT JOIN answers "
                            "USING (id)").fetchall()
    assert len(rows) == CLIENTS * ADMITTED
    assert math.fsum(r[2] for r in rows) == \
        math.fsum([EPSILON] * (CLIENTS * ADMITTED))
    stored = {r[0]: (r[1], json.loads(r[3])) for r in rows}
    for o in outcomes:
        if o.answer is not None:  # every answer received is the one charged, to its own analyst
            assert stored[o.answer_id] == (f"client{o.client}", o.answer)


def test_sixteen_wire_clients_get_exact_caps_and_no_unintended_error(tmp_path):
    analysts = {f"wire{i}": ("analyst", ADMITTED * EPSILON) for i in range(CLIENTS)}
    running = start_pg(tmp_path, analysts=analysts)
    try:
        began = time.monotonic()
        outcomes = drive_wire(running.pg_port, [(name, running.tokens[name]) for name in analysts], REQUESTS)
        assert time.monotonic() - began < 120
    finally:
        running.stop()
    assert len(outcomes) == CLIENTS * REQUESTS
    unintended = [o for o in outcomes
                  if o.status != 200 and not (o.kind == "query" and o.error_type == "53400")]
    assert not unintended, unintended[:3]
    for client in range(CLIENTS):
        answered = [o for o in outcomes if o.client == client and o.kind == "query" and o.status == 200]
        assert len(answered) == ADMITTED
    with sqlite3.connect(running.ledger) as conn:
        rows = conn.execute("SELECT analyst, epsilon_dp FROM charges").fetchall()
    assert sorted(r[0] for r in rows) == sorted(name for name in analysts for _ in range(ADMITTED))
    assert math.fsum(r[1] for r in rows) == math.fsum([EPSILON] * (CLIENTS * ADMITTED))
