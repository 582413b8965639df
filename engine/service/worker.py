"""The one thread that owns the PrivateDatabase: its DuckDB connections, caches and the sqlite
ledger are only ever used from it, and queries queue to it (sqlite refuses to be shared between
threads, and one answer at a time keeps the budget arithmetic simple), taken in turn from each
analyst with requests waiting (the one served longest ago first), so one analyst's many
requests delay another's only by the one already running. Explains (and the workload's explain
and the epsilon for an accuracy) read no data: they queue the same way to a planner thread of
their own (reader.py), never behind a query; token checks, budgets and the schema are read
beside both (reader.py), never waiting behind either."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from ..database import PrivateDatabase
from ..errors import DpsqlError
from .reader import Reader, planner

T = TypeVar("T")
Call = tuple[Callable[[PrivateDatabase], object], Future]


class ServiceStarting(DpsqlError):
    """The service is still opening the data and the ledger (HTTP 503)."""


class ServiceBusy(DpsqlError):
    """Too many requests are already queued (HTTP 429)."""


class Turns:
    """Calls queued by analyst and run one at a time by the thread that calls `serve`, the
    oldest call of the waiting analyst served longest ago first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._waiting: dict[str, deque[Call]] = {}  # by analyst
        self._served: dict[str, int] = {}  # the number of the call each analyst had last
        self._calls = 0
        self._count = 0
        self._stopping = False
        self._turn = threading.Condition()

    def submit(self, work: Callable[[PrivateDatabase], object], who: str) -> Future:
        """Queue `work` in `who`'s turn; ServiceBusy when `size` calls already wait."""
        future: Future = Future()
        with self._turn:
            if self._count >= self._size:
                raise ServiceBusy(f"the service is busy ({self._size} requests queued); retry "
                                  "in a moment")
            self._waiting.setdefault(who, deque()).append((work, future))
            self._count += 1
            self._turn.notify()
        return future

    def stop(self) -> None:
        """Let `serve` return once the queued calls are done."""
        with self._turn:
            self._stopping = True
            self._turn.notify()

    def serve(self, database: PrivateDatabase) -> None:
        """Run the queued calls on `database` until stopped and nothing is left."""
        while (item := self._next()) is not None:
            work, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work(database))
            except BaseException as exc:
                future.set_exception(exc)

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


class Worker:
    """A thread that opens the database, warms it, then runs queued queries one at a time;
    beside it a planner thread runs queued explains on a database without data."""

    def __init__(self, open_database: Callable[[], PrivateDatabase], queue_size: int = 64,
                 on_failure: Callable[[BaseException], None] | None = None) -> None:
        self._open = open_database
        self._queries = Turns(queue_size)
        self._plans = Turns(queue_size)
        self._on_failure = on_failure
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self._reader: Reader | None = None
        self._thread = threading.Thread(target=self._run, name="dpsql-worker", daemon=True)
        self._planner: threading.Thread | None = None

    def start(self) -> None:
        self._thread.start()

    async def run(self, work: Callable[[PrivateDatabase], T], who: str = "") -> T:
        """Run `work(database)` on the worker thread, in `who`'s turn, and return what it
        returns (or raise what it raised), awaiting it without holding a request thread.
        Refused at once while starting and when the queue is full."""
        return await asyncio.wrap_future(self._submit(self._queries, work, who))

    def call(self, work: Callable[[PrivateDatabase], T], who: str = "") -> T:
        """`run` for a caller on a thread of its own (the Postgres endpoint's connections):
        blocks that thread until the worker has run `work`, in `who`'s turn."""
        return self._submit(self._queries, work, who).result()

    async def plan(self, work: Callable[[PrivateDatabase], T], who: str = "") -> T:
        """`run` on the planner thread, whose database has the data's schema but no data:
        for what reads none (explains), so that it never waits behind a query."""
        return await asyncio.wrap_future(self._submit(self._plans, work, who))

    def plan_call(self, work: Callable[[PrivateDatabase], T], who: str = "") -> T:
        """`plan` for a caller on a thread of its own (the Postgres endpoint's connections)."""
        return self._submit(self._plans, work, who).result()

    def _submit(self, turns: Turns, work: Callable[[PrivateDatabase], T], who: str) -> Future:
        self._check_ready()
        return turns.submit(work, who)

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
        """Finish the queued calls, close the databases and end the threads."""
        if self._thread.is_alive():
            self._queries.stop()
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            database = self._open()
            database.warm()
            reader = self._reader = Reader(database)
            planning = planner(database)
        except BaseException as exc:  # reported to the owner, never to an analyst as data
            self.failure = exc
            if self._on_failure is not None:
                self._on_failure(exc)
            return
        if planning is None:  # explains stay on this thread, in the queries' turns
            self._plans = self._queries
        else:
            self._planner = threading.Thread(target=self._plans.serve, args=(planning,),
                                             name="dpsql-planner", daemon=True)
            self._planner.start()
        self.ready.set()
        try:
            self._queries.serve(database)
        finally:
            self.ready.clear()
            if self._planner is not None and planning is not None:
                self._plans.stop()
                self._planner.join()
                planning.close()
            reader.close()
            database.close()
