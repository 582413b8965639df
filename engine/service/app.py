"""The FastAPI application: endpoints under /v1, errors as one-line JSON with the CLI's
messages, the token's analyst as the only identity, and the console page."""

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import anyio
from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict

from ... import __version__
from ..accounting.analysts import Analyst
from ..database import PrivateDatabase
from ..errors import (
    AccessDenied,
    BudgetExhausted,
    DpsqlError,
    EngineHalted,
    InputError,
    LedgerError,
)
from .auth import identify
from .limits import BodyLimit, Limits, RateLimiter, TooManyRequests
from .metrics import Metrics, MetricsMiddleware
from .schema import public_schema
from .worker import ServiceBusy, ServiceStarting, Worker

STATIC = Path(__file__).resolve().parent / "static"
ANSWER_ID = "Dpsql-Answer-Id"  # the header naming the ledger entry of a released answer
log = logging.getLogger("dpsql.service")


class WrongRole(DpsqlError, PermissionError):
    """A valid token whose role does not include the request (HTTP 403)."""


class Ask(BaseModel):
    """The body of /v1/query and /v1/explain: the SQL and either epsilon or cost."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sql: str
    epsilon: float | None = None
    cost: float | None = None
    mode: str | None = None
    accuracy: float | None = None  # the 95% half-width every noisy cell must keep (ci95)
    reuse: bool | None = None  # False: fresh noise and a charge (None: the service's setting)


class WorkloadAsk(BaseModel):
    """The body of /v1/workload and /v1/workload/explain: the statements, asked together at
    one epsilon, cost or accuracy for the whole set."""

    model_config = ConfigDict(extra="forbid", strict=True)

    statements: list[str]
    epsilon: float | None = None
    cost: float | None = None
    mode: str | None = None
    accuracy: float | None = None


class AccuracyAsk(BaseModel):
    """The body of /v1/epsilon: a query or a workload and the 95% half-width asked."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sql: str | None = None
    statements: list[str] | None = None
    ci95: float
    mode: str | None = None


_STATUS: tuple[tuple[type[DpsqlError], int], ...] = (
    (AccessDenied, 401), (WrongRole, 403), (BudgetExhausted, 403), (TooManyRequests, 429),
    (ServiceBusy, 429), (ServiceStarting, 503), (EngineHalted, 503), (LedgerError, 500),
)


def create_app(open_database: Callable[[], PrivateDatabase], limits: Limits | None = None,
               on_failure: Callable[[BaseException], None] | None = None) -> FastAPI:
    """The service over the database `open_database()` opens (on the worker thread, while the
    endpoints answer 503)."""
    limits = Limits() if limits is None else limits
    metrics = Metrics()

    def opened() -> PrivateDatabase:
        """The database, its ledger timing each charge's write for /metrics."""
        db = open_database()
        db.ledger.on_write = metrics.observe_write
        return db

    worker = Worker(opened, limits.queue, on_failure)
    requests = RateLimiter(limits.rate, limits.burst)
    failures = RateLimiter(limits.failures_per_minute / 60.0, limits.failures_per_minute)
    bearer = HTTPBearer(auto_error=False, description="the token `dpsql analyst add` printed")

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        worker.start()
        yield
        await anyio.to_thread.run_sync(worker.stop)

    app = FastAPI(title="dpsql", version=__version__, lifespan=lifespan,
                  description="Differentially private SQL for analysts who hold only a token.")
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.state.worker = worker
    app.state.requests, app.state.failures, app.state.limits = requests, failures, limits  # pgwire
    app.state.metrics = metrics

    def caller(request: Request,
               _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> Analyst:
        """The analyst the request's token belongs to (never a name the request states). Every
        token is checked, so failed tokens from an address never lock out a valid one behind
        it; only failures count against the address (429 once it has sent too many)."""
        address = request.client.host if request.client else "unknown"
        header = request.headers.get("authorization")
        try:
            analyst = worker.read(lambda db: identify(db.ledger, header))
        except AccessDenied as exc:
            failures.take(address, "failed tokens from this address")
            log.warning("refused %s %s from %s: %s", request.method, request.url.path, address, exc)
            raise
        requests.take(analyst.name, "requests")
        return analyst

    def role(*allowed: str) -> Callable[..., Analyst]:
        def check(analyst: Annotated[Analyst, Depends(caller)]) -> Analyst:
            if analyst.role not in allowed:
                raise WrongRole(f"the role {analyst.role} may not do this; it is for the role "
                                f"{' or '.join(allowed)}")
            return analyst
        return check

    Caller = Annotated[Analyst, Depends(caller)]
    AnalystRole = Annotated[Analyst, Depends(role("analyst"))]
    AccountantRole = Annotated[Analyst, Depends(role("accountant"))]

    @app.get("/healthz", summary="Ready (200) or starting (503)")
    async def health() -> JSONResponse:
        if worker.ready.is_set():
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "starting" if worker.failure is None else "failed"}, 503)

    published: list[dict] = []  # the public schema, made once: the policy is fixed while serving

    @app.get("/v1/schema", summary="The public policy: tables, columns, bounds, domains, SQL")
    def schema(_: Caller) -> dict:
        if not published:
            published.append(worker.read(lambda db: public_schema(db.policy)))
        return published[0]

    @app.post("/v1/explain", summary="Plan, noise and cost of a query; spends nothing, reads no data")
    async def explain(ask: Ask, analyst: AnalystRole) -> JSONResponse:
        def explained(db: PrivateDatabase) -> dict:
            epsilon = _asked_epsilon(db, ask.sql, ask.accuracy, ask.mode, ask.epsilon, ask.cost)
            return db.explain(ask.sql, epsilon, ask.mode, ask.cost, analyst.name,
                              ask.reuse).to_dict()

        return JSONResponse(await worker.plan(explained, analyst.name))

    @app.post("/v1/query", summary="A private answer, charged to the token's analyst")
    async def query(ask: Ask, analyst: AnalystRole) -> JSONResponse:
        def answer(db: PrivateDatabase) -> tuple[dict, int | None]:
            epsilon = _asked_epsilon(db, ask.sql, ask.accuracy, ask.mode, ask.epsilon, ask.cost)
            result = db.query(ask.sql, epsilon, ask.mode, analyst=analyst.name, cost=ask.cost,
                              reuse=ask.reuse)
            return result.to_dict(), result.id

        body, ident = await worker.run(answer, analyst.name)
        # An answer derived from a released one (reuse) is no new entry: no id to name.
        return JSONResponse(body, headers={} if ident is None else {ANSWER_ID: str(ident)})

    @app.post("/v1/workload", summary="Statements answered together at one epsilon, charged once")
    async def workload(ask: WorkloadAsk, analyst: AnalystRole) -> JSONResponse:
        def answer(db: PrivateDatabase) -> tuple[dict, int | None]:
            result = db.query_many(ask.statements, ask.epsilon, ask.mode, analyst=analyst.name,
                                   cost=ask.cost, accuracy=ask.accuracy)
            return result.to_dict(), result.id

        body, ident = await worker.run(answer, analyst.name)
        return JSONResponse(body, headers={ANSWER_ID: str(ident)})

    @app.post("/v1/workload/explain", summary="A workload's strategy, expected errors and cost; "
              "spends nothing, reads no data")
    async def workload_explain(ask: WorkloadAsk, analyst: AnalystRole) -> JSONResponse:
        return JSONResponse(await worker.plan(
            lambda db: db.explain_many(ask.statements, ask.epsilon, ask.mode, ask.cost,
                                       ask.accuracy).to_dict(), analyst.name))

    @app.post("/v1/epsilon", summary="The smallest epsilon keeping every noisy cell within a 95% "
              "half-width; spends nothing, reads no data")
    async def epsilon(ask: AccuracyAsk, analyst: AnalystRole) -> JSONResponse:
        if (ask.sql is None) == (ask.statements is None):
            raise InputError("give either sql (one query) or statements (a workload), exactly one")
        asked: str | list[str] = ask.sql if ask.sql is not None else list(ask.statements or ())
        return JSONResponse(asdict(await worker.plan(
            lambda db: db.epsilon_for(asked, ask.ci95, ask.mode), analyst.name)))

    @app.get("/v1/budget", summary="The global budget, your cap and the largest epsilon left")
    def budget(analyst: Caller) -> dict:
        total, cap = worker.read(lambda db: (db.budget(), db.cap_status(analyst.name)))
        largest = min(total.largest_epsilon, math.inf if cap is None else cap.largest_epsilon)
        return {"analyst": analyst.name, "role": analyst.role, "largest_epsilon": largest,
                "global": asdict(total), "cap": None if cap is None else asdict(cap)}

    @app.get("/v1/history", summary="Released answers as stored: yours, or an analyst's for the "
             "accountant")
    def history(analyst: Caller,
                id: Annotated[int | None, Query(ge=1, description="one answer, by its id")] = None,
                of: Annotated[str | None, Query(alias="analyst", description="accountant only")] = None
                ) -> list:
        if of is not None and of != analyst.name and analyst.role != "accountant":
            raise WrongRole("only the role accountant may read another analyst's history")
        who = analyst.name if of is None else of
        return [e.to_dict() for e in worker.read(lambda db: db.ledger.history(who, id))]

    @app.get("/v1/report", summary="The full budget report (accountant)")
    def report(_: AccountantRole) -> dict:
        return worker.read(lambda db: db.report()).to_dict()

    @app.get("/metrics", summary="Answers, refusals, latency and budgets, Prometheus text (accountant)")
    def metrics_text(_: AccountantRole) -> PlainTextResponse:
        return PlainTextResponse(worker.call(metrics.render), media_type="text/plain; version=0.0.4")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(DpsqlError)
    def refused(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, DpsqlError)
        status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 400)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
        if isinstance(exc, TooManyRequests):
            headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        return JSONResponse(error_body(exc), status, headers)

    @app.exception_handler(RequestValidationError)
    def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"error": validation_message(exc), "type": "InputError"}, 400)

    @app.exception_handler(Exception)
    def bug(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error (%s); details withheld because they could quote data",
                  type(exc).__name__)
        return JSONResponse({"error": "internal error in dpsql (a bug; its details are withheld "
                             "because they could quote data)", "type": "InternalError"}, 500)

    return app


def _asked_epsilon(db: PrivateDatabase, sql: str, accuracy: float | None, mode: str | None,
                   epsilon: float | None, cost: float | None) -> float | None:
    """The epsilon a request asks: its own, or the smallest one keeping every noisy cell of
    `sql` within `accuracy` (refused beside an epsilon or a cost)."""
    if accuracy is None:
        return epsilon
    if epsilon is not None or cost is not None:
        raise InputError("ask by accuracy, epsilon or cost: exactly one of them; got "
                         f"accuracy={accuracy!r}, epsilon={epsilon!r}, cost={cost!r}")
    return db.epsilon_for(sql, accuracy, mode).epsilon


def error_body(exc: DpsqlError) -> dict:
    """The JSON of a refusal: the CLI's one-line message, the error's type and its numbers."""
    numbers = {k: (v if not isinstance(v, float) or math.isfinite(v) else None)
               for k, v in vars(exc).items() if isinstance(v, int | float | str) and not k.startswith("_")}
    return {"error": str(exc), "type": type(exc).__name__, **numbers}


def validation_message(exc: RequestValidationError) -> str:
    """One line naming what was wrong with a request and what is accepted."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
    if first.get("type") == "json_invalid":
        return ("malformed JSON body; expected a JSON object such as {\"sql\": \"SELECT ...\", "
                "\"epsilon\": 0.5}")
    return (f"bad request: {where}: {first.get('msg', 'invalid')}; expected a JSON object with "
            "sql (text) and epsilon, cost or accuracy (a number), optionally mode (text), and "
            "nothing else (a workload: statements, a list of texts, in place of sql)")
