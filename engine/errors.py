"""Errors the engine raises; each carries the CLI exit code and a one-line message."""

from __future__ import annotations


class DpsqlError(Exception):
    """Base error: bad input or a refused query (exit code 2). Nothing is charged."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class PolicyError(DpsqlError):
    """The policy file is missing, malformed or contradictory; names the field path."""


class QueryRefused(DpsqlError):
    """The SQL uses a construct the engine cannot answer privately."""


class InputError(DpsqlError):
    """A bad argument: epsilon, data file, format, analyst name."""


class LedgerError(DpsqlError):
    """The ledger cannot be opened, read or written safely."""


class BudgetExhausted(DpsqlError):
    """The query would take the transcript past the policy's budget (exit code 3)."""

    exit_code = 3


class EngineHalted(DpsqlError):
    """A query that passed every check failed on the data: the database refuses all further
    queries until its owner has inspected it (exit code 4). Nothing was charged."""

    exit_code = 4
