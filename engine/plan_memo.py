"""Values derived from a query plan alone, remembered per plan object: a plan is made once per
query text and policy (the preparer keeps it, like a prepared statement) and never changed, so
what follows from it (the copies a query bounds, the post-processing's columns, the reuse
index's keys) is not derived again each time the same text is asked.

A value is keyed by the plan's identity, with the plan held so that its id cannot be reused,
and by any other hashable inputs the caller names; nothing derived from the data is kept."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

SIZE = 256  # values remembered per memo: as many as the texts the preparer keeps

T = TypeVar("T")
R = TypeVar("R")


class PlanMemo(Generic[R]):
    """Values computed from a plan (and a hashable key of the other inputs), for the SIZE most
    recently added (plan, key) pairs; safe to share between threads."""

    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        self._values: dict[tuple[int, Hashable], tuple[object, R]] = {}
        self._lock = threading.Lock()

    def get(self, plan: object, key: Hashable, compute: Callable[[], R]) -> R:
        """The value remembered for `plan` and `key`, else `compute()`, remembered."""
        found = self._values.get((id(plan), key))
        if found is not None and found[0] is plan:
            return found[1]
        value = compute()
        with self._lock:
            if len(self._values) >= self._size:
                self._values.pop(next(iter(self._values)))
            self._values[(id(plan), key)] = (plan, value)
        return value


def per_plan(function: Callable[[T], R]) -> Callable[[T], R]:
    """`function(plan)`, a function of the plan alone returning a value nobody changes,
    remembered per plan (`PlanMemo`)."""
    memo: PlanMemo[R] = PlanMemo()

    @functools.wraps(function)
    def remembered(plan: T) -> R:
        return memo.get(plan, None, lambda: function(plan))

    return remembered
