"""Which long step the engine is in and how far along it is, for a progress bar.

The steps that can take more than a second on large data (loading a CSV or Parquet file,
bounding rows per privacy unit, running a query) announce themselves with `step`, with a
probe that reports the fraction done when the backend can tell. `engine/commands.py` draws a bar
from `current` on a terminal, and says on standard error when a step it names begins
(`listening`); nothing else reads them, so no output format depends on them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """A long step under way: what it is, how to ask how far it is, and when it started."""

    label: str
    probe: Callable[[], float | None]  # the fraction done in [0, 1], or None when unknown
    started: float  # time.monotonic() at its start

    def fraction(self) -> float | None:
        """How far the step is, if its backend can tell (never raises)."""
        try:
            value = self.probe()
        except Exception:  # a probe racing the step's end must not break the bar
            return None
        return None if value is None or not 0.0 <= value <= 1.0 else value


_lock = threading.Lock()
_steps: list[Step] = []
_listeners: list[Callable[[str], None]] = []


@contextmanager
def step(label: str, probe: Callable[[], float | None] = lambda: None) -> Iterator[None]:
    """Announce a long step for the duration of the block."""
    entry = Step(label, probe, time.monotonic())
    with _lock:
        _steps.append(entry)
        listeners = tuple(_listeners)
    for listener in listeners:
        listener(label)
    try:
        yield
    finally:
        with _lock:
            _steps.remove(entry)


def current() -> Step | None:
    """The innermost step under way, or None."""
    with _lock:
        return _steps[-1] if _steps else None


@contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """Call `listener` with each step's label as the step begins, for the duration of the block."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            _listeners.remove(listener)
