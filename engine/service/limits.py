"""Request limits: the size of a body (HTTP 413) and the rate of requests and of failed
tokens (HTTP 429), so that no client can exhaust the service or try tokens quickly."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from ..errors import DpsqlError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


MAX_KEYS = 10_000  # buckets kept before refilled ones are forgotten (bounds the memory)


class TooManyRequests(DpsqlError):
    """A client asked faster than the service's rate limit (HTTP 429); carries `retry_after`."""

    retry_after: float

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, retry_after=retry_after)


@dataclass(frozen=True)
class Limits:
    """The service's request limits (the owner may change them with `dpsql serve` options)."""

    max_body_bytes: int = 64 * 1024  # a SQL text of a few pages, with room to spare
    rate: float = 20.0  # requests per second each analyst may sustain
    burst: int = 40  # requests an analyst may send at once
    failures_per_minute: int = 30  # failed tokens each client address may send
    queue: int = 64  # requests waiting for the database at once


class RateLimiter:
    """Token buckets by key: `rate` per second, at most `burst` at once."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, what: str) -> None:
        """Spend one request of `key`; TooManyRequests when its bucket is empty."""
        now = time.monotonic()
        with self._lock:
            level, then = self._buckets.get(key, (float(self.burst), now))
            level = min(float(self.burst), level + (now - then) * self.rate)
            if level < 1.0:
                wait = (1.0 - level) / self.rate
                self._buckets[key] = (level, now)
                raise TooManyRequests(f"too many {what}: at most {self.rate:g} per second (bursts of "
                                      f"{self.burst}); retry in {wait:.2g} s", retry_after=wait)
            self._buckets[key] = (level - 1.0, now)
            if len(self._buckets) > MAX_KEYS:  # forget keys whose buckets have refilled
                full = now - self.burst / self.rate
                self._buckets = {k: v for k, v in self._buckets.items() if v[1] > full}


class BodyLimit:
    """ASGI middleware answering 413 to a body over `limit` bytes, read no further than that
    (a declared Content-Length over it is refused before reading anything)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._refuse(send)
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        text = json.dumps({"error": f"request body too large: at most {self.limit} bytes are "
                                    "accepted", "type": "RequestTooLarge", "limit": self.limit})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": text.encode()})
