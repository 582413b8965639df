"""`dpsql serve`: the application on uvicorn, with the database opened on the worker thread
while the endpoints answer 503; a failure to open it stops the server with its one line."""

from __future__ import annotations

from pathlib import Path

import uvicorn

from ..database import PrivateDatabase
from ..errors import InputError
from .app import create_app
from .limits import Limits


def serve(db: str, policy: str, ledger: str, host: str = "127.0.0.1", port: int = 8765,
          tls_cert: str | None = None, tls_key: str | None = None, limits: Limits | None = None) -> None:
    """Serve until interrupted; raise the error that kept the database from opening."""
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
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, ssl_certfile=tls_cert,
                                           ssl_keyfile=tls_key, log_level="info",
                                           timeout_graceful_shutdown=30))
    server.run()
    if failures:
        raise failures[0]
