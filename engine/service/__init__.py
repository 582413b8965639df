"""`dpsql serve`: the owner holds the data and the ledger, analysts hold only a token.

app.py is the FastAPI application, auth.py the tokens, worker.py the one thread that owns the
database, limits.py request rate and size limits, client.py the Python client (`dpsql.connect`).
The client is imported on first use (PEP 562), so that the owner's commands importing auth.py
and limits.py do not load it (and the workload's result types with it) into every CLI process."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Client, ServiceBudget, connect


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'dpsql.engine.service' has no attribute {name!r}")
    value = getattr(importlib.import_module(".client", __name__), name)
    globals()[name] = value
    return value


__all__ = ["Client", "ServiceBudget", "connect"]
