"""The one thread that owns the PrivateDatabase: its DuckDB connections, caches and the sqlite
ledger are only ever used from it, and queries and explains queue to it (sqlite refuses to be
shared between threads, and one answer at a time keeps the budget arithmetic simple), taken in
turn from each analyst with requests waiting (the one served longest ago first), so one
analyst's many requests delay another's only by the one already running. What needs no data
is read beside it (reader.py), never waiting behind a query."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from ..database import PrivateDatabase
from ..errors import DpsqlError
from .reader import Reader

T = TypeVar("T")
Call = tuple[Callable[[PrivateDatabase], object], Future]


class ServiceStarting(DpsqlError):
    """The service is still opening the data and the ledger (HTTP 503)."""


class ServiceBusy(DpsqlError):
    """Too many requests are already queued (HTTP 429)."""


class Worker:
    """A thread that opens the database, warms it, then runs queued calls one at a time."""

    def __init__(self, open_database: Callable[[], PrivateDatabase], queue_size: int = 64,
                 on_failure: Callable[[BaseException], None] | None = None) -> None:
        self._open = open_database
        self._size = queue_size
        self._waiting: dict[str, deque[Call]] = {}  # by analyst
        self._served: dict[str, int] = {}  # the number of the call each analyst had last
        self._calls = 0
        self._count = 0
        self._stopping = False
        self._turn = threading.Condition()
        self._on_failure = on_failure
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self._reader: Reader | None = None
        self._thread = threading.Thread(target=self._run, name="dpsql-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    async def run(self, work: Callable[[PrivateDatabase], T], who: str = "") -> T:
        """Run `work(database)` on the worker thread, in `who`'s turn, and return what it
        returns (or raise what it raised), awaiting it without holding a request thread.
        Refused at once while starting and when the queue is full."""
        return await asyncio.wrap_future(self._submit(work, who))

    def call(self, work: Callable[[PrivateDatabase], T], who: str = "") -> T:
        """`run` for a caller on a thread of its own (the Postgres endpoint's connections):
        blocks that thread until the worker has run `work`, in `who`'s turn."""
        return self._submit(work, who).result()

    def _submit(self, work: Callable[[PrivateDatabase], T], who: str) -> Future:
        self._check_ready()
        future: Future = Future()
        with self._turn:
            if self._count >= self._size:
                raise ServiceBusy(f"the service is busy ({self._size} requests queued); retry "
                                  "in a moment")
            self._waiting.setdefault(who, deque()).append((work, future))
            self._count += 1
            self._turn.notify()
        return future

    def read(self, work: Callable[[PrivateDatabase], T]) -> T:
        """Run `work` on the ledger reader, a database without data (never on the worker)."""
        self._check_ready()
        assert self._reader is not None
        return self._reader.read(work)

    def _check_ready(self) -> None:
        if not self.ready.is_set():
            if self.failure is not None:
                raise ServiceStarting("the service could not open its data or ledger; its owner "
                                      "has the details")
            raise ServiceStarting("the service is starting (opening the data and the ledger); "
                                  "retry in a few seconds")

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the queued calls, close the database and end the thread."""
        if self._thread.is_alive():
            with self._turn:
                self._stopping = True
                self._turn.notify()
            self._thread.join(timeout)

    def _next(self) -> Call | None:
        """The next call: the oldest of the waiting analyst served longest ago (None once
        stopping and nothing is left)."""
        with self._turn:
            while not self._waiting and not self._stopping:
                self._turn.wait()
            if not self._waiting:
                return None
            who = min(self._waiting, key=lambda name: self._served.get(name, -1))
            calls = self._waiting[who]
            call = calls.popleft()
            if not calls:
                del self._waiting[who]
            self._served[who] = self._calls = self._calls + 1
            self._count -= 1
            return call

    def _run(self) -> None:
        try:
            database = self._open()
            database.warm()
            reader = self._reader = Reader(database)
        except BaseException as exc:  # reported to the owner, never to an analyst as data
            self.failure = exc
            if self._on_failure is not None:
                self._on_failure(exc)
            return
        self.ready.set()
        try:
            while (item := self._next()) is not None:
                work, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(work(database))
                except BaseException as exc:
                    future.set_exception(exc)
        finally:
            self.ready.clear()
            reader.close()
            database.close()
