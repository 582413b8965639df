"""Errors the engine raises; each carries a one-line message and its numbers (the command line
maps each to its exit code: engine/commands.py EXIT_CODES).

Each also subclasses the builtin it resembles, so `except ValueError` in a caller catches a bad
argument or a refused query the way it would catch any other bad value.
"""

from __future__ import annotations

from .display import visible


class DpsqlError(Exception):
    """Base error: bad input or a refused query. Nothing is charged.

    Keyword arguments become attributes (e.g. `PolicyError(msg, line=3, column=7)`), so callers
    read the numbers instead of parsing the message."""

    def __init__(self, message: str, **attributes) -> None:
        super().__init__(visible(" ".join(message.split())))
        for name, value in attributes.items():
            if hasattr(self, name):
                raise TypeError(f"{type(self).__name__} attribute {name!r} would shadow an existing one")
            setattr(self, name, value)


class PolicyError(DpsqlError, ValueError):
    """The policy file is missing, malformed or contradictory; names the field path."""


class QueryRefused(DpsqlError, ValueError):
    """The SQL uses a construct the engine cannot answer privately."""


class InputError(DpsqlError, ValueError):
    """A bad argument: epsilon, data file, format, analyst name."""


class LedgerError(DpsqlError, RuntimeError):
    """The ledger cannot be opened, read or written safely."""


class BudgetExhausted(DpsqlError, RuntimeError):
    """The query is over budget: its cost would take the transcript past the policy's budget.
    Carries what was asked, what it would cost, and the largest epsilon that would pass now (0
    when nothing can be admitted any more).

    A RuntimeError, not a ValueError: the query and its epsilon are valid, the ledger's state
    refuses them (a smaller epsilon, or a new budget from the data owner, may pass)."""

    def __init__(self, message: str, asked: float, cost: float, largest_epsilon: float) -> None:
        super().__init__(message, asked=asked, cost=cost, largest_epsilon=largest_epsilon)


class AccessDenied(DpsqlError, PermissionError):
    """A service request without a valid token, with a revoked one, or outside the token's role.
    Nothing is charged, and the message never repeats the token."""


class QueryTooLarge(QueryRefused):
    """The query would release more noisy values than the policy's limits.max_noisy_values."""

    def __init__(self, message: str, noisy_values: int, limit: int) -> None:
        super().__init__(message, noisy_values=noisy_values, limit=limit)


class ResourceLimitExceeded(DpsqlError):
    """A run on the data hit the policy's time or memory limit and was cancelled, or planning a
    query hit a planning limit and was refused; nothing was charged. `limit` names the policy
    field (limits.time_seconds, memory_mb, plan_seconds, max_sql_chars or max_noisy_columns),
    `value` the limit's or the query's number."""

    def __init__(self, message: str, limit: str, value: float) -> None:
        super().__init__(message, limit=limit, value=value)

class EngineHalted(DpsqlError, RuntimeError):
    """A query that passed every check failed on the data: the database refuses all further
    queries until its owner has inspected it. Nothing was charged. The message is
    fixed, so it says nothing about the data or about which query failed."""

    def __init__(self) -> None:
        super().__init__(
            "internal error: a query that passed every check failed on the data, so this database "
            "is halted and refuses every query until its owner has inspected it (the ledger "
            "records why); nothing was charged")


class QueryInterrupted(KeyboardInterrupt):
    """The query was interrupted (Ctrl-C) while it ran on the data, before anything was
    charged. A KeyboardInterrupt, so code that stops on Ctrl-C stops; never one of the budget
    or refusal errors (RuntimeError, ValueError) that callers catch to carry on."""

    def __init__(self) -> None:
        super().__init__("interrupted; nothing was charged")


class DataFailure(Exception):
    """SQL that passed the gate failed on the data. Internal: the message is never shown,
    because it could quote data values and its occurrence depends on the data."""
