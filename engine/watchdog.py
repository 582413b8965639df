"""One thread that runs callbacks at deadlines: the time limit of every statement on the data.

Starting a timer thread per statement cost about a millisecond, most of a small query's fixed
cost; arming and disarming a deadline here costs a dictionary entry. The thread is woken only
when a new deadline comes before the one it sleeps until: statements under one time limit
arm ever later deadlines, so they never wake it (it wakes once per time limit to look).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable


class Watchdog:
    """Calls each armed callback once its deadline passes, unless it was disarmed first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._wakes_at = -math.inf  # the deadline the thread sleeps until (-inf: it is awake)

    def arm(self, seconds: float, callback: Callable[[], None]) -> int:
        """Call `callback` (on the watchdog's thread) in `seconds`; returns a token to disarm."""
        with self._cond:
            token = next(self._tokens)
            deadline = time.monotonic() + seconds
            self._due[token] = (deadline, callback)
            if self._thread is None or not self._thread.is_alive():  # none yet, or lost in a fork
                self._wakes_at = -math.inf
                self._thread = threading.Thread(target=self._watch, name="dpsql-time-limit",
                                                daemon=True)
                self._thread.start()
            if deadline < self._wakes_at:  # an awake thread looks again before it sleeps
                self._cond.notify()
            return token

    def disarm(self, token: int) -> None:
        """Forget a deadline; a callback already being called is not stopped (callers guard)."""
        with self._cond:
            self._due.pop(token, None)

    def _watch(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                fired = [self._due.pop(token)[1] for token, (deadline, _) in list(self._due.items())
                         if deadline <= now]
                if not fired:
                    nearest = min((deadline for deadline, _ in self._due.values()), default=None)
                    self._wakes_at = math.inf if nearest is None else nearest
                    self._cond.wait(None if nearest is None else nearest - now)
                    self._wakes_at = -math.inf
                    continue
            for callback in fired:
                callback()


WATCHDOG = Watchdog()
"""The process's one watchdog."""
