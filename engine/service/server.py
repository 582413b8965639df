"""`dpsql serve`: the application on uvicorn, with the database opened on the worker thread
while the endpoints answer 503; a failure to open it stops the server with its one line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn

from ..database import PrivateDatabase
from ..errors import InputError
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
          trusted_proxies: Sequence[str] = ()) -> None:
    """Serve until interrupted; raise the error that kept the database from opening.
    `trusted_proxies`: addresses whose forwarded headers name the client (none by default)."""
    if (tls_cert is None) != (tls_key is None):
        raise InputError("--tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
    for option, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not Path(path).is_file():
            raise InputError(f"{option}: no such file {path}")
    if not Path(ledger).is_file():
        raise InputError(f"ledger file not found: {ledger}; create it first with dpsql ledger init "
                         f"--ledger {ledger} --policy {policy}")
    failures: list[BaseException] = []

    def failed(exc: BaseException) -> None:
        failures.append(exc)
        server.should_exit = True

    app = create_app(lambda: PrivateDatabase.connect(db, policy, ledger), limits or Limits(), failed)
    server = uvicorn.Server(uvicorn_config(app, host, port, tls_cert, tls_key, trusted_proxies))
    server.run()
    if failures:
        raise failures[0]
