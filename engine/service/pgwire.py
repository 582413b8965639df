"""`dpsql serve --pg-port`: the service's Postgres wire protocol (v3) listener, so psql, psycopg,
pandas/SQLAlchemy and JDBC clients ask the same worker, ledger and analysts as HTTP.

Login is user = analyst name, password = token (cleartext password message: over loopback, or
inside TLS when the service has a certificate); simple and extended query protocols; every frame's
length is checked before anything is read or allocated."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..accounting.analysts import Analyst
from ..errors import AccessDenied, DpsqlError
from ..sql_types import NUMBER_TYPES, SqlType
from .auth import MAX_TOKEN_LENGTH, identify
from .limits import Limits, RateLimiter, TooManyRequests
from .metrics import Metrics
from .pgwire_catalog import BINARY_OIDS, Catalog, Rows, WireError, binary_cell
from .pgwire_sql import PARAMETERS, Session, sqlstate
from .worker import Worker

log = logging.getLogger("dpsql.service")
MAX_STARTUP = 10_000  # bytes of a startup packet (its parameters); Postgres allows about as much
MAX_CONNECTIONS = 256  # connections at once; more are refused with 53300
LOGIN_SECONDS = 10.0  # time a client has to finish the startup and the password
MAX_HELD = 1024  # prepared statements, and portals, a connection may hold at once
MAX_HELD_BYTES = 8 << 20  # bytes of SQL its prepared statements may hold (JDBC's cache: 5 MiB)
SSL_REQUEST, GSS_REQUEST, CANCEL_REQUEST, PROTOCOL_3 = 80877103, 80877104, 80877102, 196608
# A parameter's Postgres type OID -> the type its text is read as (any other: text).
_TEXT_OIDS = {16: SqlType.BOOL, 20: SqlType.INT, 21: SqlType.INT, 23: SqlType.INT, 700: SqlType.FLOAT,
              701: SqlType.FLOAT, 1700: SqlType.FLOAT}


class Refused(Exception):
    """A frame the endpoint cannot go on after (bad length, bad startup): closes the connection."""

    def __init__(self, message: str, sqlstate: str = "08P01") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass
class Shared:
    """What every connection shares with the HTTP side: the worker, the rate limiters, the limits."""

    worker: Worker
    requests: RateLimiter
    failures: RateLimiter
    limits: Limits
    tls: ssl.SSLContext | None = None
    metrics: Metrics | None = None
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(16, "dpsql-pgwire"))
    connections: set[asyncio.Task] = field(default_factory=set)
    _catalog: Catalog | None = None

    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = self.worker.read(lambda db: Catalog(db.policy, PARAMETERS))
        return self._catalog


async def listen(shared: Shared, host: str, port: int) -> asyncio.Server:
    """Start accepting Postgres clients on host:port (the caller closes the returned server)."""

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        shared.connections.add(task)
        try:
            if len(shared.connections) > MAX_CONNECTIONS:
                _error(writer, "FATAL", "53300", f"too many connections: at most {MAX_CONNECTIONS}")
                await writer.drain()
                return
            await Connection(shared, reader, writer).serve()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError, Refused):
            pass  # the client went away or sent a frame that ends the connection (answered)
        finally:
            shared.connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(accept, host, port, limit=2 ** 16)


async def close(server: asyncio.Server, shared: Shared) -> None:
    """Stop listening and end every open connection."""
    server.close()
    for task in list(shared.connections):
        task.cancel()
    await asyncio.gather(*shared.connections, return_exceptions=True)
    shared.pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class Portal:
    """A bound statement: its SQL with parameters in place, the result formats the client asked
    (0 text, 1 binary: none for all text, one for all, or one per column), its answer once run,
    and how many of its rows were sent (an Execute may ask for a few at a time)."""

    sql: str
    formats: tuple[int, ...] = ()
    answer: Rows | None = None
    sent: int = 0

    def column_formats(self, answer: Rows) -> tuple[int, ...]:
        """The format of each column, refused (08P01) when the codes do not fit the columns or
        (0A000) when a binary one is asked for a type sent only as text."""
        n = len(answer.columns)
        if len(self.formats) == n:
            formats = self.formats
        elif len(self.formats) <= 1:
            formats = (self.formats[0] if self.formats else 0,) * n
        else:
            formats = (-1,)
        if any(f not in (0, 1) for f in formats):
            raise WireError(f"{len(self.formats)} result format codes for {n} columns: give none, "
                            "one, or one per column (0 text, 1 binary)", "08P01")
        for (name, oid), fmt in zip(answer.columns, formats, strict=True):
            if fmt == 1 and oid not in BINARY_OIDS:
                raise WireError(f"binary result refused for column {name[:60]!r} of type {oid}: ask "
                                "for text", "0A000")
        return formats


class Connection:
    """One client: startup, password, then queries until Terminate or a broken frame."""

    def __init__(self, shared: Shared, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.shared, self.reader, self.writer = shared, reader, writer
        peer = writer.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) else "unknown"
        self.session: Session | None = None
        self.statements: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.portals: dict[str, Portal] = {}
        self.described: tuple[str, bytes] | None = None  # a statement's Describe, answered later

    async def serve(self) -> None:
        login = await asyncio.wait_for(self._login(), LOGIN_SECONDS)
        if login is None:
            return
        analyst, parameters = login
        self.session = Session(analyst, self._run, self.shared.catalog, plan=self._plan,
                               metrics=self.shared.metrics)
        try:
            self.session.start(parameters)
        except DpsqlError as exc:
            _error(self.writer, "FATAL", sqlstate(exc), str(exc))
            return
        self.writer.write(_message(b"R", struct.pack("!i", 0)))
        for name, value in PARAMETERS.items():
            if name in ("server_version", "server_encoding", "client_encoding", "datestyle",
                        "timezone", "integer_datetimes", "standard_conforming_strings", "is_superuser",
                        "intervalstyle", "application_name"):
                value = self.session.settings.get(name, value)
                self.writer.write(_message(b"S", _cstr(_startup_name(name)) + _cstr(value)))
        self.writer.write(_message(b"S", _cstr("session_authorization") + _cstr(analyst.name)))
        self.writer.write(_message(b"K", struct.pack("!ii", secrets.randbits(31), secrets.randbits(31))))
        self._ready()
        await self.writer.drain()
        skipping = False  # after an error in the extended protocol, until Sync
        while True:
            kind, body = await self._frame()
            if kind != b"B":
                self._flush_described()
            if kind == b"X":
                return
            if kind == b"S":
                skipping = False
                self._ready()
            elif kind == b"H":
                pass
            elif kind == b"Q":
                await self._simple(_text(body))
            elif not skipping:
                try:
                    await self._extended(kind, body)
                except (DpsqlError, Refused) as exc:
                    self._flush_described()
                    self._refuse(exc)
                    skipping = True
            await self.writer.drain()

    async def _login(self) -> tuple[Analyst, dict[str, str]] | None:
        params = await self._startup()
        if params is None:
            return None
        user = params.get("user", "")
        self.writer.write(_message(b"R", struct.pack("!i", 3)))  # cleartext password
        await self.writer.drain()
        kind, body = await self._frame(limit=MAX_TOKEN_LENGTH + 5)
        if kind != b"p":
            raise Refused("expected a password message")
        token = _text(body)
        try:
            analyst = await self._call(lambda: self.shared.worker.read(
                lambda db: identify(db.ledger, f"Bearer {token}")))
            if not secrets.compare_digest(analyst.name.encode(), user.encode()):
                raise AccessDenied("the token is wrong or was revoked; ask the data owner for a token "
                                   "(dpsql analyst add)")
        except AccessDenied as exc:
            # As over HTTP: every token is checked first, so failures from this address never
            # lock out a valid token; only the failure counts, and past the limit it says so.
            log.warning("refused a Postgres login as %r from %s: %s", user[:100], self.address, exc)
            try:
                self.shared.failures.take(self.address, "failed tokens from this address")
            except TooManyRequests as limited:
                _error(self.writer, "FATAL", sqlstate(limited), str(limited))
                return None
            _error(self.writer, "FATAL", "28P01", f"password authentication failed for user "
                                                  f"{user[:100]!r}: {exc}")
            return None
        except DpsqlError as exc:
            _error(self.writer, "FATAL", sqlstate(exc), str(exc))
            return None
        return analyst, params

    async def _startup(self) -> dict[str, str] | None:
        while True:
            head = await self.reader.readexactly(4)
            (length,) = struct.unpack("!i", head)
            if not 8 <= length <= MAX_STARTUP:
                raise _refuse_now(self.writer, f"startup packet of {length} bytes refused: at most "
                                               f"{MAX_STARTUP} are accepted")
            body = await self.reader.readexactly(length - 4)
            (code,) = struct.unpack("!i", body[:4])
            if code == SSL_REQUEST and self.shared.tls is not None:
                self.writer.write(b"S")
                await self.writer.drain()
                await self.writer.start_tls(self.shared.tls)
                continue
            if code in (SSL_REQUEST, GSS_REQUEST):
                self.writer.write(b"N")
                await self.writer.drain()
                continue
            if code == CANCEL_REQUEST:
                return None  # cancelling is not offered: a query runs to its answer or its limit
            if code != PROTOCOL_3:
                raise _refuse_now(self.writer, f"protocol {code >> 16}.{code & 0xFFFF} refused: only 3.0 "
                                               "is spoken")
            if self.shared.tls is not None and self.writer.get_extra_info("ssl_object") is None:
                raise _refuse_now(self.writer, "this service requires TLS: connect with sslmode=require",
                                  "28000")
            parts = body[4:].split(b"\0")
            pairs = [p.decode("utf-8", "replace") for p in parts[:-2]] if parts[-2:] == [b"", b""] else None
            if pairs is None or len(pairs) % 2:
                raise _refuse_now(self.writer, "malformed startup packet: expected name/value pairs")
            return dict(zip(pairs[::2], pairs[1::2], strict=True))

    async def _frame(self, limit: int | None = None) -> tuple[bytes, bytes]:
        """One message: its type byte and body, refused unread when its length is over the limit."""
        head = await self.reader.readexactly(5)
        kind, (length,) = head[:1], struct.unpack("!i", head[1:])
        limit = self.shared.limits.max_body_bytes if limit is None else limit
        if not 4 <= length <= limit + 4:
            raise _refuse_now(self.writer, f"message of {length} bytes refused: at most {limit} are "
                                           "accepted", "54000")
        return kind, await self.reader.readexactly(length - 4)

    async def _simple(self, sql: str) -> None:
        try:
            answer = await self._execute(sql)
        except (DpsqlError, Refused) as exc:
            self._refuse(exc)
        else:
            if answer.tag == "":
                self.writer.write(_message(b"I", b""))
            else:
                if answer.columns:
                    self.writer.write(_row_description(answer))
                self._rows(answer)
        self._ready()

    async def _extended(self, kind: bytes, body: bytes) -> None:
        reader = _Body(body)
        if kind == b"P":
            name, sql, count = reader.cstr(), reader.cstr(), reader.int16()
            held = sum(len(text) for key, (text, _) in self.statements.items() if key != name)
            if name not in self.statements and len(self.statements) >= MAX_HELD or \
                    held + len(sql) > MAX_HELD_BYTES:
                raise WireError(f"prepared statement refused: a connection holds at most {MAX_HELD} "
                                f"holding {MAX_HELD_BYTES >> 20} MiB of SQL; close some first", "54000")
            self.statements[name] = (sql, tuple(reader.int32() for _ in range(count)))
            self.writer.write(_message(b"1", b""))
        elif kind == b"B":
            portal, name = reader.cstr(), reader.cstr()
            if portal not in self.portals and len(self.portals) >= MAX_HELD:
                raise WireError(f"portal refused: a connection holds at most {MAX_HELD}; close some "
                                "first", "54000")
            if name not in self.statements:
                raise WireError(f"prepared statement {name[:60]!r} does not exist", "26000")
            sql, types = self.statements[name]
            formats = [reader.int16() for _ in range(reader.int16())]
            values = [reader.value() for _ in range(reader.int16())]
            results = tuple(reader.int16() for _ in range(reader.int16()))
            bound = self.portals[portal] = Portal(_bind(sql, types, formats, values), results)
            if self.described is not None and self.described[0] == name:
                # the statement was described just before: run it now, so the description
                # sent is of the very rows the Execute that follows sends (JDBC executes next)
                answer = await self._answer(bound)
                self.writer.write(self.described[1] + (_row_description(answer, bound.column_formats(
                    answer)) if answer.columns else _message(b"n", b"")))
                self.described = None
            self._flush_described()
            self.writer.write(_message(b"2", b""))
        elif kind == b"D":
            what, name = reader.byte(), reader.cstr()
            if what == b"S":
                # A parameter of no given type is bound as text (_bind). The columns are known
                # once it has run: if a Bind of it comes next they are described from its run,
                # else as none (NoData).
                sql, types = self._statement(name)
                self.described = (name, _message(b"t", struct.pack("!h", len(types)) + b"".join(
                    struct.pack("!i", t or 25) for t in types)))
            else:
                bound = self._portal(name)
                answer = await self._answer(bound)
                self.writer.write(_row_description(answer, bound.column_formats(answer))
                                  if answer.columns else _message(b"n", b""))
        elif kind == b"E":
            bound = self._portal(reader.cstr())
            limit = reader.int32()
            answer = await self._answer(bound)
            if answer.tag == "":
                self.writer.write(_message(b"I", b""))
            else:
                self._rows(answer, bound, limit)
        elif kind == b"C":
            what, name = reader.byte(), reader.cstr()
            (self.statements if what == b"S" else self.portals).pop(name, None)
            self.writer.write(_message(b"3", b""))
        else:
            raise WireError(f"message {kind!r} refused: this endpoint speaks the simple and extended "
                            "query protocols only", "0A000")

    def _flush_described(self) -> None:
        """Answer a pending Describe of a statement that no Bind of it followed: no columns."""
        if self.described is not None:
            self.writer.write(self.described[1] + _message(b"n", b""))
            self.described = None

    def _statement(self, name: str) -> tuple[str, tuple[int, ...]]:
        if name not in self.statements:
            raise WireError(f"prepared statement {name[:60]!r} does not exist", "26000")
        return self.statements[name]

    def _portal(self, name: str) -> Portal:
        if name not in self.portals:
            raise WireError(f"portal {name[:60]!r} does not exist", "34000")
        return self.portals[name]

    async def _answer(self, portal: Portal) -> Rows:
        if portal.answer is None:
            portal.answer = await self._execute(portal.sql)
        return portal.answer

    async def _execute(self, sql: str) -> Rows:
        assert self.session is not None
        session = self.session
        try:
            answer = await self._call(lambda: session.execute(sql))
        except (DpsqlError, Refused):
            raise
        except Exception as exc:  # a bug: its details could quote data, so they stay in the log
            log.error("internal error on the Postgres endpoint (%s); details withheld because "
                      "they could quote data", type(exc).__name__)
            raise WireError("internal error in dpsql (a bug; its details are withheld because they "
                            "could quote data)", "XX000") from None
        for notice in session.notices:
            self.writer.write(_message(b"N", _fields("NOTICE", "00000", notice)))
        session.notices.clear()
        return answer

    def _run(self, work: Callable[[Any], Any]) -> Any:
        """Run work(database) on the worker, counted against the analyst's request rate."""
        assert self.session is not None
        self.shared.requests.take(self.session.analyst.name, "requests")
        return self.shared.worker.call(work, self.session.analyst.name)

    def _plan(self, work: Callable[[Any], Any]) -> Any:
        """Run work(database) on the planner (explains), counted against the request rate."""
        assert self.session is not None
        self.shared.requests.take(self.session.analyst.name, "requests")
        return self.shared.worker.plan_call(work, self.session.analyst.name)

    async def _call(self, work: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.shared.pool, work)

    def _rows(self, answer: Rows, portal: Portal | None = None, limit: int = 0) -> None:
        """Send the answer's rows (a portal's next `limit` of them when limit > 0, then
        PortalSuspended if rows are left), in the portal's formats, then the command tag."""
        formats = (0,) * len(answer.columns) if portal is None else portal.column_formats(answer)
        start = 0 if portal is None else portal.sent
        end = len(answer.rows) if limit <= 0 else min(len(answer.rows), start + limit)
        for row in answer.rows[start:end]:
            cells = [None if cell is None else binary_cell(cell, oid) if fmt else cell.encode()
                     for cell, (_, oid), fmt in zip(row, answer.columns, formats, strict=True)]
            self.writer.write(_message(b"D", struct.pack("!h", len(row)) + b"".join(
                struct.pack("!i", -1) if data is None else struct.pack("!i", len(data)) + data
                for data in cells)))
        if portal is not None:
            portal.sent = end
            if end < len(answer.rows):
                self.writer.write(_message(b"s", b""))
                return
        tag = f"SELECT {end - start}" if start and answer.tag.startswith("SELECT") else answer.tag
        self.writer.write(_message(b"C", _cstr(tag)))

    def _refuse(self, exc: Exception) -> None:
        if isinstance(exc, Refused):
            _error(self.writer, "ERROR", exc.sqlstate, str(exc))
        else:
            assert isinstance(exc, DpsqlError)
            _error(self.writer, "ERROR", sqlstate(exc), str(exc))

    def _ready(self) -> None:
        busy = self.session is not None and self.session.in_transaction
        self.writer.write(_message(b"Z", b"T" if busy else b"I"))


class _Body:
    """Reads the fields of one message body, refusing one that ends early."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise Refused("malformed message: it ends before its fields do")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def byte(self) -> bytes:
        return self._take(1)

    def int16(self) -> int:
        return int(struct.unpack("!h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack("!i", self._take(4))[0])

    def cstr(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise Refused("malformed message: a text field has no terminating zero byte")
        text = self.data[self.at:end].decode("utf-8", "replace")
        self.at = end + 1
        return text

    def value(self) -> bytes | None:
        length = self.int32()
        return None if length == -1 else self._take(length)


def _bind(sql: str, types: tuple[int, ...], formats: list[int], values: list[bytes | None]) -> str:
    """The SQL with each $n token replaced by its value as a SQL literal (numbers checked as
    numbers, anything else quoted as text), so a parameter can never become SQL; the rest of the
    text is kept as sent."""
    if not values:
        return sql
    import sqlglot
    from sqlglot.dialects.postgres import Postgres
    from sqlglot.tokens import TokenType

    literals = []
    for i, value in enumerate(values):
        fmt = formats[i] if len(formats) > 1 else (formats[0] if formats else 0)
        kind = _TEXT_OIDS.get(types[i] if i < len(types) else 0, SqlType.STR)
        literals.append(_literal(value, fmt, kind, types[i] if i < len(types) else 0))
    try:
        tokens = Postgres().tokenize(sql)
    except sqlglot.errors.TokenError as exc:
        raise WireError(f"could not read the SQL: {str(exc).splitlines()[0][:200]}", "42601") from None
    pieces, at = [], 0
    for mark, number in zip(tokens, tokens[1:], strict=False):
        if mark.token_type == TokenType.PARAMETER and number.token_type == TokenType.NUMBER \
                and number.start == mark.end + 1:
            if not number.text.isdigit() or not 1 <= int(number.text) <= len(literals):
                raise WireError(f"parameter ${number.text[:10]} has no value: {len(literals)} were bound",
                                "08P01")
            pieces += [sql[at:mark.start], literals[int(number.text) - 1].sql(dialect="postgres")]
            at = number.end + 1
    return "".join(pieces) + sql[at:]


def _literal(value: bytes | None, fmt: int, kind: SqlType, oid: int) -> Any:
    from sqlglot import exp

    if value is None:
        return exp.Null()
    if fmt == 1:
        if oid in (20, 21, 23) and len(value) in (2, 4, 8):
            return exp.Literal.number(int.from_bytes(value, "big", signed=True))
        if oid in (700, 701) and len(value) in (4, 8):
            return exp.Literal.number(repr(struct.unpack("!f" if len(value) == 4 else "!d", value)[0]))
        if oid == 16 and len(value) == 1:
            return exp.Boolean(this=value != b"\0")
        if oid not in (0, 25, 1043):
            raise WireError(f"binary parameter of type {oid} refused: send it as text", "0A000")
    text = value.decode("utf-8", "replace")
    if kind in NUMBER_TYPES:
        try:
            float(text)
        except ValueError:
            raise WireError(f"invalid number for a numeric parameter: {text[:40]!r}", "22P02") from None
        return exp.Literal.number(text.strip())
    if kind == SqlType.BOOL:
        return exp.Boolean(this=text.strip().lower() in ("t", "true", "1", "on", "yes"))
    return exp.Literal.string(text)


def _refuse_now(writer: asyncio.StreamWriter, message: str, code: str = "08P01") -> Refused:
    """Send a FATAL error before the connection is closed, and return the exception ending it."""
    _error(writer, "FATAL", code, message)
    return Refused(message, code)


def _error(writer: asyncio.StreamWriter, severity: str, code: str, message: str) -> None:
    writer.write(_message(b"E", _fields(severity, code, message)))


def _fields(severity: str, code: str, message: str) -> bytes:
    return (b"S" + _cstr(severity) + b"V" + _cstr(severity) + b"C" + _cstr(code) + b"M"
            + _cstr(message) + b"\0")


def _row_description(answer: Rows, formats: tuple[int, ...] | None = None) -> bytes:
    formats = formats or (0,) * len(answer.columns)
    fields = b"".join(_cstr(name) + struct.pack("!ihihih", 0, 0, oid, -1, -1, fmt)
                      for (name, oid), fmt in zip(answer.columns, formats, strict=True))
    return _message(b"T", struct.pack("!h", len(answer.columns)) + fields)


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _cstr(text: str) -> bytes:
    return text.replace("\0", "").encode() + b"\0"


def _text(body: bytes) -> str:
    return body.rstrip(b"\0").decode("utf-8", "replace")


def _startup_name(name: str) -> str:
    return {"datestyle": "DateStyle", "timezone": "TimeZone", "intervalstyle": "IntervalStyle"}.get(name, name)
