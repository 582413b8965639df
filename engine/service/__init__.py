"""`dpsql serve`: the owner holds the data and the ledger, analysts hold only a token.

app.py is the FastAPI application, auth.py the tokens, worker.py the one thread that owns the
database, limits.py request rate and size limits, client.py the Python client (`dpsql.connect`)."""

from .client import Client, ServiceBudget, connect

__all__ = ["Client", "ServiceBudget", "connect"]
