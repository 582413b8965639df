"""`GET /metrics` (accountant role): the service's answers, refusals by reason and query latency
(HTTP and the Postgres endpoint), and the budget spent and left in total and per analyst, in the
Prometheus text format. Counts and budgets only: nothing in it depends on the data."""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..database import PrivateDatabase

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # seconds
OBSERVED = ("/v1/query", "/v1/explain")  # the HTTP paths whose latency and outcome are counted


class Metrics:
    """Counters and latency histograms, shared by every thread of the service."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.answers: Counter[str] = Counter()  # by endpoint
        self.refusals: Counter[tuple[str, str]] = Counter()  # by (endpoint, reason)
        self._buckets: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self._writes = [0] * (len(BUCKETS) + 1)  # the ledger's charge writes, by duration
        self._write_sum = 0.0

    def observe(self, endpoint: str, seconds: float, refusal: str | None = None) -> None:
        """Count one request to `endpoint`: answered, or refused for `refusal` (the error type)."""
        with self._lock:
            if refusal is None:
                self.answers[endpoint] += 1
            else:
                self.refusals[(endpoint, refusal)] += 1
            counts = self._buckets.setdefault(endpoint, [0] * (len(BUCKETS) + 1))
            counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sums[endpoint] = self._sums.get(endpoint, 0.0) + seconds

    def observe_write(self, seconds: float) -> None:
        """Count one charge written to the ledger (inserts, totals and the synced commit)."""
        with self._lock:
            self._writes[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._write_sum += seconds

    def render(self, db: PrivateDatabase) -> str:
        """The text a Prometheus scrape reads (run on the worker: it reads the ledger)."""
        lines = ["# HELP dpsql_answers_total Answers released (or explanations given), by endpoint.",
                 "# TYPE dpsql_answers_total counter"]
        with self._lock:
            lines += [f"dpsql_answers_total{_labels(endpoint=e)} {n}" for e, n in sorted(self.answers.items())]
            lines += ["# HELP dpsql_refusals_total Requests refused, by endpoint and reason (the error type).",
                      "# TYPE dpsql_refusals_total counter"]
            lines += [f"dpsql_refusals_total{_labels(endpoint=e, reason=r)} {n}"
                      for (e, r), n in sorted(self.refusals.items())]
            lines += ["# HELP dpsql_request_seconds Time to answer or refuse a query or explain.",
                      "# TYPE dpsql_request_seconds histogram"]
            for endpoint, counts in sorted(self._buckets.items()):
                total = 0
                for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                    total += count
                    lines.append(f"dpsql_request_seconds_bucket{_labels(endpoint=endpoint, le=bound)} {total}")
                lines.append(f"dpsql_request_seconds_sum{_labels(endpoint=endpoint)} {self._sums[endpoint]!r}")
                lines.append(f"dpsql_request_seconds_count{_labels(endpoint=endpoint)} {total}")
            lines += ["# HELP dpsql_ledger_write_seconds Time to write one charge to the ledger "
                      "(its rows, running totals and the synced commit).",
                      "# TYPE dpsql_ledger_write_seconds histogram"]
            total = 0
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), self._writes, strict=True):
                total += count
                lines.append(f"dpsql_ledger_write_seconds_bucket{_labels(le=bound)} {total}")
            lines += [f"dpsql_ledger_write_seconds_sum {self._write_sum!r}",
                      f"dpsql_ledger_write_seconds_count {total}"]
        budget = db.budget()
        lines += ["# HELP dpsql_budget_epsilon The global budget: total, spent (transcript level) and left.",
                  "# TYPE dpsql_budget_epsilon gauge",
                  f'dpsql_budget_epsilon{{state="total"}} {budget.total!r}',
                  f'dpsql_budget_epsilon{{state="spent"}} {budget.spent_ip!r}',
                  f'dpsql_budget_epsilon{{state="left"}} {budget.remaining!r}',
                  "# HELP dpsql_analyst_spent_dp_epsilon The DP epsilon each analyst's answers spent.",
                  "# TYPE dpsql_analyst_spent_dp_epsilon gauge"]
        caps = []
        for analyst in db.ledger.analysts():
            account = db.ledger.account(analyst.name)
            spent = 0.0 if account is None else account.spent_dp
            lines.append(f"dpsql_analyst_spent_dp_epsilon{_labels(analyst=analyst.name)} {spent!r}")
            cap = db.cap_status(analyst.name)
            if cap is not None:
                caps.append(f"dpsql_analyst_cap_left_epsilon{_labels(analyst=analyst.name)} {cap.remaining!r}")
        lines += ["# HELP dpsql_analyst_cap_left_epsilon What each capped analyst's cap leaves.",
                  "# TYPE dpsql_analyst_cap_left_epsilon gauge", *caps]
        return "\n".join(lines) + "\n"


class MetricsMiddleware:
    """ASGI middleware timing /v1/query and /v1/explain and counting their outcomes (a refusal's
    reason is the `type` of its one-line JSON error)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                      send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http" or scope.get("path") not in OBSERVED:
            await self.app(scope, receive, send)
            return
        started, status, body = time.perf_counter(), [200], bytearray()

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            elif message["type"] == "http.response.body" and status[0] >= 400 and len(body) < 65536:
                body.extend(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, watch)
        refusal = None
        if status[0] >= 400:
            try:
                refusal = str(json.loads(bytes(body)).get("type", status[0]))
            except (ValueError, AttributeError):
                refusal = str(status[0])
        self.metrics.observe(f"http {scope['path']}", time.perf_counter() - started, refusal)


def _labels(**labels: str) -> str:
    """Prometheus labels, values escaped as the text format requires."""
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"
