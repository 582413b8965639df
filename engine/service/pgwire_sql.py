"""What the Postgres wire endpoint answers to each statement: SET/SHOW of the session's ε, cost
and mode, EXPLAIN, a private SELECT through the same PrivateDatabase calls as /v1/query, and the
catalog questions clients send on connect, answered from the policy alone (never the data)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd
import sqlglot
from sqlglot import exp

from ... import __version__
from ..accounting.analysts import Analyst
from ..database import PrivateDatabase
from ..errors import (
    AccessDenied,
    BudgetExhausted,
    DpsqlError,
    EngineHalted,
    InputError,
    LedgerError,
    QueryRefused,
    QueryTooLarge,
    ResourceLimitExceeded,
)
from ..result import Explanation, QueryResult, answer_ids
from .limits import TooManyRequests
from .metrics import Metrics
from .pgwire_catalog import Catalog, Rows, WireError, text_cell
from .worker import ServiceBusy, ServiceStarting

T = TypeVar("T")
SERVER_VERSION = "16.0"  # the Postgres release whose protocol and catalog clients may assume
VERSION_TEXT = f"PostgreSQL {SERVER_VERSION} (dpsql {__version__}: differentially private answers)"
CATALOG_SCHEMAS = ("pg_catalog", "information_schema")
MAX_SETTINGS = 64  # client parameters a session may set (bounds its memory)
MAX_SETTING_LENGTH = 200

# The SQLSTATE of each refusal (docs/architecture.md lists them); the first match wins.
_SQLSTATES: tuple[tuple[type[DpsqlError], str], ...] = (
    (AccessDenied, "28P01"), (BudgetExhausted, "53400"), (QueryTooLarge, "54000"),
    (ResourceLimitExceeded, "57014"), (TooManyRequests, "53300"), (ServiceBusy, "53300"),
    (ServiceStarting, "57P03"), (EngineHalted, "55000"), (LedgerError, "58030"),
    (InputError, "22023"),
)
_SYNTAX = ("could not parse", "could not read", "empty query", "nested too deeply")

PARAMETERS = {  # what SHOW answers and the startup reports; SET may change the client ones
    "server_version": SERVER_VERSION, "server_version_num": "160000", "server_encoding": "UTF8",
    "client_encoding": "UTF8", "datestyle": "ISO, MDY", "timezone": "UTC", "intervalstyle": "postgres",
    "integer_datetimes": "on", "standard_conforming_strings": "on", "is_superuser": "off",
    "transaction_isolation": "read committed", "transaction_read_only": "on",
    "default_transaction_read_only": "on", "search_path": '"$user", public',
    "max_identifier_length": "63", "application_name": "", "extra_float_digits": "1",
}
DPSQL_SETTINGS = ("dpsql.epsilon", "dpsql.cost", "dpsql.mode", "dpsql.reuse")
SWITCH = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}
# What the endpoint sends does not follow these: a SET may only name the values it speaks.
FIXED = {"client_encoding": r"UTF-?8|UNICODE", "datestyle": r"ISO(\s*,\s*MDY)?",
         "intervalstyle": "postgres", "standard_conforming_strings": "on"}

_COMMENTS = re.compile(r"^\s*(?:--[^\n]*\n|/\*.*?\*/|\s)*", re.S)
_SET = re.compile(r"SET\s+(?:SESSION\s+|LOCAL\s+)?([A-Za-z_][\w.]*)\s*(?:=|\s+TO\s+)\s*(.*?)\s*;?\s*",
                  re.I | re.S)
_VALUE = re.compile(r"'(?:[^']|'')*'|[\w.+\-]+|\"[^\"]*\"")
_SHOW = re.compile(r"SHOW\s+(.+?)\s*;?\s*", re.I | re.S)
_VERSION = re.compile(r"SELECT\s+(?:pg_catalog\s*\.\s*)?version\s*\(\s*\)\s*;?\s*", re.I)


def sqlstate(exc: DpsqlError) -> str:
    """The SQLSTATE a refusal is sent with: syntax 42601, unsupported 0A000, role 42501,
    budget or cap 53400, too many noisy values 54000, rates 53300 (the full list above)."""
    code = getattr(exc, "sqlstate", None)
    if isinstance(code, str):
        return code
    if type(exc).__name__ == "WrongRole":
        return "42501"
    found = next((code for kind, code in _SQLSTATES if isinstance(exc, kind)), None)
    if found is not None:
        return found
    if isinstance(exc, QueryRefused):
        return "42601" if str(exc).startswith(_SYNTAX) else "0A000"
    return "22023"


@dataclass
class Session:
    """One connection's state: who logged in, what they SET, and the last answer's ledger id.

    `run(work)` runs work(database) on the service's worker (rate-limited like HTTP), `plan(work)`
    on its planner (explains: the schema and no data)."""

    analyst: Analyst
    run: Callable[[Callable[[PrivateDatabase], Any]], Any]
    catalog: Callable[[], Catalog]
    plan: Callable[[Callable[[PrivateDatabase], Any]], Any] | None = None  # None: on `run`
    settings: dict[str, str] = field(default_factory=dict)
    answer_id: int | None = None
    notices: list[str] = field(default_factory=list)
    metrics: Metrics | None = None  # where answers, refusals and latency are counted
    in_transaction: bool = False  # BEGIN..COMMIT is accepted; answers are charged when released

    def execute(self, sql: str) -> Rows:
        """The rows and command tag of one statement, or a DpsqlError with its one line."""
        text = _COMMENTS.sub("", sql, count=1).strip()
        word = text.split(None, 1)[0].upper().rstrip(";") if text else ""
        if not word:
            return Rows((), (), "")
        if word in ("SAVEPOINT", "RELEASE") or re.match(r"ROLLBACK\s+TO\b", text, re.I):
            return Rows((), (), "ROLLBACK" if word == "ROLLBACK" else word)
        if word in ("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"):
            self.in_transaction = word in ("BEGIN", "START")
            return Rows((), (), {"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}.get(
                word, word))
        if word == "SET":
            return self._set(text)
        if word == "SHOW":
            return self._show(text)
        if word in ("RESET", "DISCARD"):
            self.settings.clear()
            return Rows((), (), "DISCARD ALL" if word == "DISCARD" else "RESET")
        if word == "EXPLAIN":
            return self._explain(text[len("explain"):].strip())
        # anything else goes where /v1/query sends it, to be answered or refused in the same words
        return self._select(text.rstrip().rstrip(";").rstrip())

    def _set(self, text: str) -> Rows:
        if re.fullmatch(r"SET\s+(SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\b[\w\s,]*;?", text, re.I):
            return Rows((), (), "SET")
        match = _SET.fullmatch(text)
        if match is None:
            raise WireError("malformed SET: expected SET name = value, e.g. SET dpsql.epsilon = 0.5",
                            "42601")
        name, raw = match.group(1).lower(), match.group(2)
        values = [v.group(0) for v in _VALUE.finditer(raw)]
        if not re.fullmatch(rf"(?:{_VALUE.pattern})(?:\s*,\s*(?:{_VALUE.pattern}))*", raw):
            raise WireError(f"malformed value for {name}: expected a number, a word or a quoted text",
                            "42601")
        value = ", ".join(v[1:-1].replace("''", "'") if v.startswith("'") else v.strip('"')
                          for v in values)
        self.assign(name, value, len(values))
        return Rows((), (), "SET")

    def start(self, parameters: dict[str, str]) -> None:
        """Apply the startup packet's parameters as SET would (`options` may hold `-c name=value`
        pairs); the encoding and date style stay the ones this endpoint speaks and reports."""
        for name, value in parameters.items():
            name = name.lower()
            if name == "options":
                for option in _options(value):
                    self.assign(*option)
            elif name not in ("user", "database", "replication", *FIXED) and not name.startswith("_pq_."):
                self.assign(name, value)

    def assign(self, name: str, value: str, count: int = 1) -> None:
        """Set one parameter to a value (`count` values given), checked as SET checks it."""
        if name in FIXED and not re.fullmatch(FIXED[name], value, re.I):
            raise WireError(f"{name} stays {PARAMETERS[name]!r} on this endpoint (it sends UTF-8 text and "
                            f"ISO dates), got {value[:40]!r}", "0A000")
        if name in ("dpsql.epsilon", "dpsql.cost"):
            number = _positive(name, value)
            self.settings.pop("dpsql.cost" if name == "dpsql.epsilon" else "dpsql.epsilon", None)
            value = repr(number)
        elif name == "dpsql.reuse":
            if value.lower() not in SWITCH:
                raise WireError(f"dpsql.reuse must be on or off (off: fresh noise and a charge), "
                                f"got {value[:40]!r}", "22023")
            value = "on" if SWITCH[value.lower()] else "off"
        elif name == "dpsql.mode":
            if count != 1 or not re.fullmatch(r"[\w\-]{1,40}", value):
                raise WireError(f"dpsql.mode must be one word (a calibration mode), got {value[:40]!r}",
                                "22023")
        elif name.startswith("dpsql."):
            raise WireError(f"unknown setting {name}: dpsql accepts {', '.join(DPSQL_SETTINGS)}",
                            "42704")
        elif len(value) > MAX_SETTING_LENGTH or (name not in self.settings
                                                 and len(self.settings) >= MAX_SETTINGS):
            raise WireError(f"setting {name} refused: at most {MAX_SETTINGS} settings of at most "
                            f"{MAX_SETTING_LENGTH} characters", "54000")
        self.settings[name] = value

    def _show(self, text: str) -> Rows:
        match = _SHOW.fullmatch(text)
        name = " ".join(match.group(1).lower().split()) if match else ""
        if name == "transaction isolation level":
            name = "transaction_isolation"
        if name in DPSQL_SETTINGS:
            value: str | None = self.settings.get(name, "")
        elif name == "dpsql.answer_id":
            value = "" if self.answer_id is None else str(self.answer_id)
        elif name in self.settings or name in PARAMETERS:
            value = self.settings.get(name, PARAMETERS.get(name))
        else:
            raise WireError(f"unrecognized configuration parameter {name[:60]!r}: SHOW answers "
                            f"{', '.join(DPSQL_SETTINGS)}, dpsql.answer_id and the Postgres "
                            "parameters clients read on connect", "42704")
        return Rows(((name, 25),), ((value,),), "SHOW")

    def _asked(self) -> tuple[float | None, str | None, float | None]:
        epsilon, cost = self.settings.get("dpsql.epsilon"), self.settings.get("dpsql.cost")
        return (None if epsilon is None else float(epsilon), self.settings.get("dpsql.mode"),
                None if cost is None else float(cost))

    def _reuse(self) -> bool | None:
        """SET dpsql.reuse: off asks fresh noise and a charge (unset: the service's setting)."""
        value = self.settings.get("dpsql.reuse")
        return None if value is None else value == "on"

    def _explain(self, sql: str) -> Rows:
        if re.match(r"\(|ANALY[SZ]E\b|VERBOSE\b", sql, re.I):
            raise WireError("EXPLAIN options refused: write EXPLAIN SELECT ... (it spends nothing "
                            "and reads no data)", "0A000")
        sql = sql.rstrip().rstrip(";").rstrip()
        epsilon, mode, cost = self._asked()
        self._require_analyst()
        name = self.analyst.name
        reuse = self._reuse()
        explanation: Explanation = self._observed(
            "pg explain", lambda db: db.explain(sql, epsilon, mode, cost, name, reuse),
            self.plan)
        return explain_rows(explanation)

    def _select(self, sql: str) -> Rows:
        if _VERSION.fullmatch(sql):
            return Rows((("version", 25),), ((VERSION_TEXT,),), "SELECT 1")
        if self._is_catalog(sql):
            self.run(lambda db: None)  # counted against the request rate like any request
            return self.catalog().query(sql)
        self._require_analyst()
        epsilon, mode, cost = self._asked()
        name, reuse = self.analyst.name, self._reuse()
        result: QueryResult = self._observed(
            "pg query", lambda db: db.query(sql, epsilon, mode, analyst=name, cost=cost,
                                            reuse=reuse))
        self.answer_id = result.id
        if result.derived_from:
            self.notices.append(f"derived from {answer_ids(result.derived_from)}: cost 0, nothing "
                                f"charged to {name}; budget left {result.budget.remaining:g}")
            return answer_rows(result)
        self.notices.append(f"answer {result.id} charged to {name}: cost {result.cost:g} (epsilon "
                            f"{result.epsilon:g}, {result.mode}); budget left "
                            f"{result.budget.remaining:g}; SHOW dpsql.answer_id names it, "
                            "GET /v1/history?id= fetches it again")
        return answer_rows(result)

    def _observed(self, endpoint: str, work: Callable[[PrivateDatabase], Any],
                  on: Callable[[Callable[[PrivateDatabase], Any]], Any] | None = None) -> Any:
        """Run work on the worker (or `on`), counting its outcome and time in the service's
        metrics."""
        started = time.perf_counter()
        try:
            done = (self.run if on is None else on)(work)
        except DpsqlError as exc:
            if self.metrics is not None:
                self.metrics.observe(endpoint, time.perf_counter() - started, type(exc).__name__)
            raise
        if self.metrics is not None:
            self.metrics.observe(endpoint, time.perf_counter() - started)
        return done

    def _require_analyst(self) -> None:
        if self.analyst.role != "analyst":
            from .app import WrongRole

            raise WrongRole(f"the role {self.analyst.role} may not do this; it is for the role analyst")

    def _is_catalog(self, sql: str) -> bool:
        """True when the statement reads no policy table and reads pg_catalog/information_schema
        or no table at all (answered from the policy's empty tables, which hold no data whatever
        else it names); False sends it to the engine, which answers privately or refuses with the
        same line as /v1/query."""
        try:
            tree = sqlglot.parse_one(sql, read="postgres")
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError, ValueError):
            return False
        names = self.catalog().tables
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        tables = [t for t in tree.find_all(exp.Table) if t.name.lower() not in ctes]
        if any(t.name.lower() in names and t.db.lower() not in CATALOG_SCHEMAS for t in tables):
            return False
        return not tables or any(t.db.lower() in CATALOG_SCHEMAS or t.name.lower().startswith("pg_")
                                 for t in tables)


def _options(text: str) -> list[tuple[str, str]]:
    """The `-c name=value` (or `--name=value`) pairs of a startup packet's options."""
    words, pairs = text.split(), []
    while words:
        word = words.pop(0)
        pair = words.pop(0) if word == "-c" and words else word[2:] if word.startswith("--") else ""
        name, equals, value = pair.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            raise WireError(f"startup option {word[:40]!r} refused: options accepts -c name=value pairs, "
                            "e.g. -c dpsql.epsilon=0.5", "22023")
        pairs.append((name.lower().replace("-", "_"), value))
    return pairs


def _positive(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise WireError(f"{name} must be a finite number > 0, got {value[:40]!r}", "22023")
    return number


def answer_rows(result: QueryResult) -> Rows:
    """The released table with a `<column>_ci95` column after each noisy one (the half-width
    the CLI prints beside it: per cell, or simultaneous when rows were chosen by noise)."""
    intervals, _ = result.shown_intervals()
    noisy = {a.column for a in result.aggregates}
    columns: list[tuple[str, int]] = []
    picks: list[tuple[pd.Series, bool]] = []
    for name in result.df.columns:
        values = result.df[name]
        columns.append((str(name), _oid(values)))
        picks.append((values, False))
        if name in noisy or bool(intervals[name].notna().any()):
            columns.append((f"{name}_ci95", 701))
            picks.append((intervals[name], True))
    rows = tuple(tuple(text_cell(series.iloc[i]) for series, _ in picks) for i in range(len(result.df)))
    return Rows(tuple(columns), rows, f"SELECT {len(rows)}")


def explain_rows(explanation: Explanation) -> Rows:
    """The explanation as `QUERY PLAN` lines: each field, one line per aggregate and one per
    output's expected error."""
    lines: list[str] = []
    for key, value in explanation.to_dict().items():
        if key == "aggregates":
            lines += [f"aggregate {a['column']}: {a['function']} by {a['mechanism']}, sensitivity "
                      f"{a['sensitivity']:g}, epsilon_dp {a['epsilon_dp']:g}, scale {a['scale']:g}, "
                      f"expected 95% error ±{a['ci95_halfwidth']:g}" for a in value]
        elif key == "errors":
            lines += [f"output {error.describe()}" for error in explanation.errors]
        elif isinstance(value, dict):
            lines.append(f"{key}: " + ", ".join(f"{k} {v}" for k, v in value.items()))
        elif value not in ("", None, [], ()):
            lines.append(f"{key}: {', '.join(map(str, value)) if isinstance(value, list) else value}")
    return Rows((("QUERY PLAN", 25),), tuple((line,) for line in lines), "EXPLAIN")


def _oid(values: pd.Series) -> int:
    """The Postgres type of a released column: int8, float8, bool, timestamp, date or text."""
    kind = values.dtype.kind
    if kind in "iu":
        return 20
    if kind == "f":
        return 701
    if kind == "b":
        return 16
    if kind == "M":
        return 1114
    present = values.dropna()
    first = present.iloc[0] if len(present) else None
    if isinstance(first, bool):
        return 16
    if isinstance(first, int):
        return 20
    if isinstance(first, float):
        return 701
    if first is not None and type(first).__name__ == "date":
        return 1082
    return 25
