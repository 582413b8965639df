"""A rich progress bar on the terminal for the engine's long steps (engine/progress.py).

Shown on standard error only when it is a terminal and the output is for reading (never with
`--format json` or `csv`, never when piped), and only for a step that has run for more than
`SHOW_AFTER` seconds, so quick commands print exactly what they did before.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from . import progress

if TYPE_CHECKING:
    from rich.progress import TaskID

SHOW_AFTER = 1.0  # seconds a step runs before its bar appears
REFRESH = 0.1  # seconds between updates


@contextmanager
def progress_bar(wanted: bool) -> Iterator[None]:
    """Draw a bar for the long steps the block runs, when `wanted` and stderr is a terminal."""
    if not wanted or not sys.stderr.isatty():
        yield
        return
    stop = threading.Event()
    drawer = threading.Thread(target=_draw, args=(stop,), name="dpsql-progress", daemon=True)
    drawer.start()
    try:
        yield
    finally:
        stop.set()
        drawer.join()


def _draw(stop: threading.Event) -> None:
    """Follow the current step until `stop`; the bar disappears when the block ends. rich's
    progress module is imported here, so a command that never draws a bar never loads it."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                   console=Console(file=sys.stderr), transient=True)
    task: TaskID | None = None
    shown: progress.Step | None = None
    with bar:
        while not stop.wait(REFRESH):
            step = progress.current()
            if step is None or bar.get_time() - step.started < SHOW_AFTER:
                continue
            fraction = step.fraction()
            if step is not shown:
                if task is not None:
                    bar.remove_task(task)
                task, shown = bar.add_task(step.label, total=None if fraction is None else 1.0), step
            if task is not None and fraction is not None:
                bar.update(task, total=1.0, completed=fraction)
