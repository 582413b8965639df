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
    """The query is over budget: its cost would take the transcript past the policy's budget
    (exit code 3). Carries what was asked, what it would cost, and the largest epsilon that
    would pass now (0 when nothing can be admitted any more)."""

    exit_code = 3

    def __init__(self, message: str, asked: float, cost: float, largest_epsilon: float) -> None:
        super().__init__(message)
        self.asked = asked
        self.cost = cost
        self.largest_epsilon = largest_epsilon


class AnswerFailed(DpsqlError):
    """The answer could not be completed after its noise was drawn; nothing was charged or
    released. Its message is fixed: it never carries a noisy value."""
