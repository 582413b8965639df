"""`dpsql serve`: the application on uvicorn, with the database opened on the worker thread
while the endpoints answer 503; a failure to open it stops the server with its one line. With
--pg-port the Postgres wire listener (pgwire.py) runs beside it on the same event loop, worker,
ledger and rate limiters."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from ..database import PrivateDatabase
from ..errors import InputError
from . import pgwire
from .app import create_app
from .limits import Limits


def uvicorn_config(app: Any, host: str, port: int, tls_cert: str | None = None,
                   tls_key: str | None = None, trusted_proxies: Sequence[str] = (),
                   log_level: str = "info") -> uvicorn.Config:
    """uvicorn's configuration of the service. X-Forwarded-For and X-Forwarded-Proto are read
    only from the proxies the owner names (uvicorn's default trusts them from loopback, which
    let any local client choose the address the failed-token limit counts)."""
    return uvicorn.Config(app, host=host, port=port, ssl_certfile=tls_cert, ssl_keyfile=tls_key,
                          log_level=log_level, timeout_graceful_shutdown=30,
                          proxy_headers=bool(trusted_proxies),
                          forwarded_allow_ips=list(trusted_proxies) or None)


def serve(db: str, policy: str, ledger: str, host: str = "127.0.0.1", port: int = 8765,
          tls_cert: str | None = None, tls_key: str | None = None, limits: Limits | None = None,
          trusted_proxies: Sequence[str] = (), pg_port: int | None = None,
          reuse: bool = True) -> None:
    """Serve until interrupted; raise the error that kept the database from opening.
    `trusted_proxies`: addresses whose forwarded headers name the client (none by default);
    `pg_port`: also speak the Postgres wire protocol there."""
    if (tls_cert is None) != (tls_key is None):
        raise InputError("--tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
    for option, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not Path(path).is_file():
            raise InputError(f"{option}: no such file {path}")
    if not Path(ledger).is_file():
        raise InputError(f"ledger file not found: {ledger}; create it first with dpsql ledger init "
                         f"--ledger {ledger} --policy {policy}")
    if pg_port is not None and pg_port == port and port != 0:
        raise InputError(f"--pg-port must differ from --port (both {port})")
    failures: list[BaseException] = []

    def failed(exc: BaseException) -> None:
        failures.append(exc)
        server.should_exit = True

    app = create_app(lambda: PrivateDatabase.connect(db, policy, ledger, reuse=reuse),
                     limits or Limits(), failed)
    server = uvicorn.Server(uvicorn_config(app, host, port, tls_cert, tls_key, trusted_proxies))
    if pg_port is None:
        server.run()
    else:
        tls = None
        if tls_cert is not None and tls_key is not None:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(tls_cert, tls_key)
        asyncio.run(run_with_pg(server, app, host, pg_port, tls))
    if failures:
        raise failures[0]


async def run_with_pg(server: uvicorn.Server, app: FastAPI, host: str, pg_port: int,
                      tls: ssl.SSLContext | None = None) -> None:
    """Run uvicorn and the Postgres listener on one event loop until uvicorn stops."""
    shared = pgwire.Shared(app.state.worker, app.state.requests, app.state.failures, app.state.limits,
                           tls, metrics=app.state.metrics)
    listener = await pgwire.listen(shared, host, pg_port)
    try:
        await server.serve()
    finally:
        await pgwire.close(listener, shared)
