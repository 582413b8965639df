"""Limits on planning one query, so that no SQL text can keep the engine busy for long: its
length, its width (noisy values per group) and the wall-clock time its planning may take.

Planning reads no data, so each refusal is a function of the SQL text, the policy and the
machine's speed, never of the data; nothing is charged (docs/limits.md)."""

from __future__ import annotations

import time

from ..errors import ResourceLimitExceeded
from ..plan import QueryPlan
from ..policy import Limits


def check_text(sql: str, limits: Limits) -> None:
    """Refuse, before it is parsed, SQL text longer than limits.max_sql_chars."""
    if len(sql) > limits.max_sql_chars:
        raise ResourceLimitExceeded(
            f"query refused: its SQL text has {len(sql)} characters, over the policy's limit of "
            f"{limits.max_sql_chars} (limits.max_sql_chars); nothing was charged",
            "limits.max_sql_chars", float(len(sql)))


def check_width(plan: QueryPlan, limits: Limits) -> None:
    """Refuse, before its SQL is built and checked, a query with more noisy values per group
    (a histogram's bins counting one each) than limits.max_noisy_columns: the SQL built, the
    checks and the noise all grow with that width."""
    width = sum(len(m.cells) for m in plan.measurements)
    if width > limits.max_noisy_columns:
        raise ResourceLimitExceeded(
            f"query refused: it needs {width} noisy values per group (a quantile's histogram "
            f"counting one per bin), over the policy's limit of {limits.max_noisy_columns} "
            "(limits.max_noisy_columns); nothing was charged",
            "limits.max_noisy_columns", float(width))


class Deadline:
    """The planning time limit of one query, checked between the steps of planning."""

    def __init__(self, limits: Limits) -> None:
        self.seconds = limits.plan_seconds
        self._end = time.monotonic() + limits.plan_seconds

    def check(self) -> None:
        """Refuse the query once its planning has taken longer than limits.plan_seconds."""
        if time.monotonic() > self._end:
            raise ResourceLimitExceeded(
                f"query refused: planning it took longer than the policy's limit of "
                f"{self.seconds:g} s (limits.plan_seconds); nothing was charged",
                "limits.plan_seconds", self.seconds)
