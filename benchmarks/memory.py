"""Peak resident memory of this process during a call, sampled from /proc/self/statm."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_PAGE = os.sysconf("SC_PAGE_SIZE")
INTERVAL = 0.002


def rss_bytes() -> int:
    """Current resident set size (Python heap and DuckDB's native allocations alike)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


@dataclass(frozen=True)
class Measured:
    """A call's result, wall time and peak RSS above the RSS it started from."""

    value: object
    seconds: float
    peak_extra_bytes: int


def measure(call: Callable[[], object]) -> Measured:
    """Run `call` while a thread samples RSS every INTERVAL seconds."""
    base = rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(INTERVAL)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    try:
        value = call()
    finally:
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
    peak[0] = max(peak[0], rss_bytes())
    return Measured(value, seconds, peak[0] - base)
