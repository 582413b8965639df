"""The persistent budget ledger: sqlite3 in WAL mode, one row per released answer, and the
books (`Books`) it returns of what was spent.

The check against the budget and the charge happen in one `BEGIN IMMEDIATE` transaction, so
processes sharing a ledger are serialised and can never overspend together.

Spending is never silently reset. A new ledger is built under a temporary name and linked
into place atomically, so the ledger path either does not exist or holds a complete ledger;
an existing file is only ever opened (never created by sqlite), and one that is empty,
truncated, corrupted or not a ledger is refused. A ledger is only created on request
(`dpsql ledger init`, or `create=True`): a mistyped path is refused rather than silently
starting over with the whole budget. A ledger is bound to the budget, dependence model
(k, eta) and accounting mode of its policy: a stricter policy (budget down, k or eta up, a
mode whose map is pointwise larger) is accepted and recorded, a more lenient one is refused,
because past spending must never be re-interpreted more leniently than it was when it was
charged. Every charge re-reads the binding inside its transaction, so a connection opened
before the owner tightened the policy is held to the tighter one too.

Each charge stores the answer it released (the JSON form of the result, in its own table), so
a client that lost an answer can fetch it again without a second charge or fresh noise. Each charge also
records the columns its answer read, since the transcript's level depends on their union
(column-scoped eta, docs/theory.md §11), and a chain answer the time points it read (a declared
Markov chain accounts per time point, §14). Older ledgers (schema versions 2 to 5) are migrated
in place, in one transaction (`ledger_schema.py`: past charges read every column, at no single
time point).

What the accountant reads (the spending, the columns read, the spending per time point, in
total and per analyst) is kept as running totals in each charge's own transaction
(`totals.py`), so a query costs the same however many answers the ledger holds.

Analysts live in `analysts.py`, the answer index in `reuse_index.py`, the hash chain in `chain.py`.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from ..errors import EngineHalted, LedgerError
from ..result import AggregateRecord, AnswerCost, HistoryEntry
from . import chain, ledger_schema, ledger_snapshot, reuse_index
from . import totals as ledger_totals
from .analysts import Analyst, AnalystAccount, AnalystsTable, now
from .books import Books
from .ledger_binding import LedgerBinding, binding_from_meta, binding_meta
from .ledger_schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION, TABLES
from .totals import write_points

HALT_ATTEMPTS = 5  # busy timeouts (60 s each) a halt waits for a locked ledger
T = TypeVar("T")


@dataclass(frozen=True)
class Charge:
    """What one released answer spends, as recorded in the ledger."""

    analyst: str
    sql: str
    cost: AnswerCost
    aggregates: tuple[AggregateRecord, ...]
    answer: dict | None = None  # the released answer as `--format json` prints it (None: not kept)
    columns: frozenset[str] | None = None  # the columns the answer read (None: every column)
    times: tuple[int, ...] | None = None  # a chain answer's time points (None: not per time)
    reuse_key: reuse_index.Entry | None = None  # what it answers (`reuse_index`; None: not reusable)


@dataclass(frozen=True)
class LedgerState:
    """What a ledger holds now: the binding it is under and its books (with no accountants:
    who must admit a charge is the reader's to say, `Bookkeeper.books`), and when and why the
    engine halted on it (None: it did not)."""

    binding: LedgerBinding
    books: Books
    halted: str | None = None


class Ledger(AnalystsTable):
    """A budget ledger file bound to one policy's budget and dependence model."""

    def __init__(self, path: str | Path, binding: LedgerBinding, create: bool = False) -> None:
        self.path = Path(path)
        self.binding = binding
        self.on_write: Callable[[float], None] | None = None  # seconds each charge's write took
        self._charging: ledger_snapshot.Snapshot | None = None  # what the charge under way read
        self._kept: ledger_snapshot.Kept | None = None  # what this connection's last charge left
        if self.path.is_dir():
            raise LedgerError(f"ledger path {self.path} is a directory; expected a file path")
        if create:
            if self.path.exists():
                raise LedgerError(f"ledger {self.path} already exists; refusing to create a new "
                                  "ledger over it (open it without create, or choose a new path)")
            self._create()
        elif not self.path.exists():
            raise LedgerError(
                f"ledger file not found: {self.path}; a ledger is only created explicitly, by the "
                f"data owner: dpsql ledger init --ledger {self.path} --policy POLICY (in Python: "
                "PrivateDatabase.connect(..., create=True))")
        try:
            # A PrivateDatabase may be used from several threads, one at a time (its lock).
            self._conn = sqlite3.connect(self.path.absolute().as_uri() + "?mode=rw", uri=True,
                                         timeout=60, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger {self.path}: {exc} (check that the file and "
                              "its directory are readable and writable)") from None
        try:
            self._conn.execute("PRAGMA busy_timeout = 60000")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._check_file()
            self._bind()
            chain.prepare(self._conn, self.path)
        except sqlite3.Error as exc:
            self._conn.close()
            raise LedgerError(_explain(self.path, exc)) from None
        except BaseException:
            self._conn.close()
            raise
        self.hash_key = self._meta("hash_key")

    @classmethod
    def reopen(cls, path: str | Path) -> Ledger:
        """Open an existing ledger under the binding it holds, for the owner's acts that need no
        policy (managing analysts): nothing about the budget changes."""
        conn = open_read_only(Path(path), "analyst command")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot read ledger {path} as a dpsql ledger: {exc}") from None
        finally:
            conn.close()
        return cls(path, binding_from_meta(meta, Path(path)))

    def _create(self) -> None:
        """Build a complete ledger under a temporary name, then link it into place atomically.

        If another process links first, its ledger is used. A crash leaves at most a stray
        temporary file, never a partial ledger at the ledger path."""
        directory = self.path.absolute().parent
        if not directory.is_dir():
            raise LedgerError(f"cannot create ledger {self.path}: {directory} is not a directory")
        temporary = directory / f".{self.path.name}.{secrets.token_hex(6)}.creating"
        try:
            conn = sqlite3.connect(temporary, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("BEGIN IMMEDIATE")
                for statement in SCHEMA.strip().split(";"):
                    if statement.strip():
                        conn.execute(statement)
                for statement in ledger_totals.STORAGE:
                    conn.execute(statement)
                reuse_index.ensure(conn)
                created = now()
                meta = {"schema_version": SCHEMA_VERSION, "hash_key": secrets.token_hex(16),
                        "created": created, **binding_meta(self.binding)}
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta.items())
                _insert_binding(conn, created, self.binding)
                ledger_totals.rebuild(conn, self.path)
                conn.execute("COMMIT")
            finally:
                conn.close()
            _fsync(temporary)
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                raise LedgerError(f"ledger {self.path} was created by another process meanwhile; "
                                  "refusing to create it twice") from None
            _fsync(directory)
        except (sqlite3.Error, OSError) as exc:
            raise LedgerError(f"cannot create ledger {self.path}: {exc} (is {directory} "
                              "writable?)") from None
        finally:
            temporary.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(f"{temporary}{suffix}").unlink(missing_ok=True)

    def _check_file(self) -> None:
        """Refuse a file that is not an intact ledger of this schema."""
        conn = self._conn
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if not tables:
            raise LedgerError(
                f"ledger {self.path} is empty (truncated, or not a ledger); refusing to start a new "
                "ledger in its place: restore it from a backup, or move it away to start over"
            )
        problems = conn.execute("PRAGMA quick_check").fetchall()
        if problems != [("ok",)]:
            raise LedgerError(f"ledger {self.path} is corrupted ({problems[0][0]}); restore it "
                              "from a backup: its recorded spending cannot be trusted")
        version = self._version(tables)
        if TABLES <= tables and version in MIGRATIONS:
            self._migrate()
            version = self._version(tables)
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if not TABLES | ledger_totals.STORAGE_TABLES <= tables or version != SCHEMA_VERSION:
            raise LedgerError(f"{self.path} is not a dpsql ledger of schema version "
                              f"{SCHEMA_VERSION} (found tables: {', '.join(sorted(tables))}, "
                              f"schema version {version})")
        bad = conn.execute("SELECT COUNT(*) FROM charges WHERE NOT (epsilon_dp >= 0 AND "
                           "epsilon_dp < 1e300)").fetchone()[0]
        if bad:
            raise LedgerError(f"ledger {self.path} holds {bad} charge(s) with an invalid "
                              "epsilon_dp; restore it from a backup")

    def _version(self, tables: set[str]) -> str | None:
        if "meta" not in tables:
            return None
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall()).get(
            "schema_version")

    def _migrate(self) -> None:
        """Bring an older ledger to this schema in one transaction (`ledger_schema.migrate`);
        concurrent openers are serialised, the second finds it done."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            ledger_schema.migrate(conn, self.path)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _bind(self) -> None:
        """Accept the policy if it is as strict as the ledger's binding; record a stricter one.

        The write also proves, before any query runs, that the ledger can be charged."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            stored = self._stored_binding()
            self._check_units(stored)
            self._check_models(stored)
            reuse_index.ensure(conn)  # a ledger written before the index gains it, empty
            if ledger_totals.is_stale(conn):  # written by another program since its last charge
                ledger_totals.rebuild(conn, self.path)
            lenient = stored.lenient_fields(self.binding)
            if lenient:
                detail = ", ".join(f"{name} {getattr(stored, name)!r} -> "
                                   f"{getattr(self.binding, name)!r}" for name in lenient)
                raise LedgerError(
                    f"ledger {self.path} was created for a policy with budget {stored.budget!r}, "
                    f"k {stored.k}, eta {stored.eta!r}, mode {stored.mode} (or tightened to it "
                    f"since), and this policy is more lenient ({detail}); past spending is never "
                    "re-interpreted more leniently: keep the policy (a smaller budget, larger k "
                    "or eta, larger etas per column set, or a more conservative mode is "
                    "accepted), or start a new ledger"
                )
            wanted = replace(self.binding, units=self.binding.units or stored.units)
            if stored != wanted:
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    list(binding_meta(wanted).items()))
                if replace(stored, units=wanted.units) != wanted:  # more than units recorded
                    _insert_binding(conn, now(), wanted)
            else:
                conn.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _check_models(self, stored: LedgerBinding) -> None:
        """Refuse a policy whose declared models differ from those the ledger has spent under.

        Past answers were calibrated and admitted by the model's map; another model is another
        claim about the data, not an order of strictness, so past spending has no level under
        it that can be checked (and dropping the model would count those answers past the
        budget): start a new ledger."""
        if stored.models != self.binding.models:
            raise LedgerError(
                f"ledger {self.path} was charged under the declared models "
                f"{stored.models or 'none'}, and this policy declares "
                f"{self.binding.models or 'none'}; answers calibrated by a model are accounted by "
                "it, so a ledger's models never change: keep them, or start a new ledger")

    def _check_units(self, stored: LedgerBinding) -> None:
        """Refuse a policy whose privacy units differ from those the ledger has spent on."""
        if stored.units and self.binding.units and stored.units != self.binding.units:
            raise LedgerError(
                f"ledger {self.path} has spent its budget on individuals identified by "
                f"{stored.units} (table: privacy unit), and this policy declares "
                f"{self.binding.units}; an epsilon spent on one kind of individual says nothing "
                "about another, so start a new ledger for the new privacy units")

    def _stored_binding(self) -> LedgerBinding:
        """The binding the ledger holds now (the owner may have tightened it since we opened)."""
        return binding_from_meta(dict(self._conn.execute("SELECT key, value FROM meta").fetchall()),
                                  self.path)

    def _meta(self, key: str) -> str:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        if row is None:
            raise LedgerError(f"ledger {self.path} is missing its {key}")
        return row[0]

    def spent_dp(self) -> float:
        """The total DP epsilon of every answer released so far."""
        try:
            return ledger_totals.read(self._conn, self.path).spent(self.path)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot read ledger {self.path}: {exc}") from None

    def state(self) -> LedgerState:
        """The ledger's binding and books (the DP spending, the columns read so far and the
        spending per time point), read in one statement (in one transaction when the running
        totals must be recomputed)."""
        conn = self._conn
        try:
            snapshot = self._read(None)
            if snapshot.current:
                return LedgerState(snapshot.binding(self.path),
                                   snapshot.totals(self.path).books(self.path), snapshot.halted)
            conn.execute("BEGIN")
            try:
                totals = ledger_totals.read(conn, self.path)
                return LedgerState(self._stored_binding(), totals.books(self.path),
                                   self.halted())
            finally:
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot read ledger {self.path}: {exc}") from None

    def _read(self, analyst: str | None) -> ledger_snapshot.Snapshot:
        """The ledger as one statement reads it, or as this connection's last charge left it
        while nothing else has changed it since (`ledger_snapshot.Kept`)."""
        kept = self._kept
        return ledger_snapshot.read(self._conn, analyst) if kept is None \
            else kept.read(self._conn, analyst)

    def charge(self, settle: Callable[[LedgerState], tuple[Charge, T]],
               analyst: str | None = None) -> tuple[int, T]:
        """Charge what `settle(state)` decides, in one transaction.

        `settle` gets the ledger's binding and books as they are now, under the write lock; it
        admits or refuses (raising), draws the noise and builds the complete answer.
        The charge and its answer are then inserted and committed together; if anything
        raises, the transaction rolls back and nothing is charged. Returns the charge's id and
        what `settle` returned. Concurrent processes are serialised by sqlite's write lock.
        `analyst`, when known, is who is charged: their totals are read with the ledger's."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                snapshot = self._read(analyst)
                self._kept = None  # kept again once this charge commits
                if snapshot.halted is not None:  # another process halted the engine meanwhile
                    raise EngineHalted
                stored = snapshot.binding(self.path)
                self._check_units(stored)  # the owner may have changed them since we opened
                if not snapshot.current:  # another program wrote charges meanwhile
                    ledger_totals.rebuild(conn, self.path)
                    snapshot = ledger_snapshot.read(conn, analyst)
                totals = snapshot.totals(self.path)
                self._charging = snapshot
                try:
                    charge, extra = settle(LedgerState(stored, totals.books(self.path)))
                finally:
                    self._charging = None
                writing = time.perf_counter()
                mine = snapshot.totals(self.path, charge.analyst) \
                    if charge.analyst == snapshot.analyst \
                    else ledger_totals.read(conn, self.path, charge.analyst)  # before the insert
                answer = None if charge.answer is None else json.dumps(charge.answer,
                                                                       allow_nan=False)
                columns = None if charge.columns is None else json.dumps(sorted(charge.columns))
                times = None if charge.times is None else write_points(charge.times)
                cost = charge.cost
                (ident,) = conn.execute(
                    "INSERT INTO charges (time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, "
                    "aggregates, columns, times) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "RETURNING id",
                    [now(), charge.analyst, charge.sql, cost.epsilon, cost.epsilon_dp, cost.mode,
                     cost.k, cost.eta, json.dumps([a.record() for a in charge.aggregates]),
                     columns, times],
                ).fetchone()
                if answer is not None:
                    conn.execute("INSERT INTO answers (id, answer) VALUES (?, ?)", [ident, answer])
                    if charge.reuse_key is not None:
                        reuse_index.record(conn, charge.analyst, charge.reuse_key,
                                           cost.epsilon_dp, ident)
                chain.append(conn, ident, snapshot.chain_key())
                written = ledger_totals.write(conn, charge.analyst, totals, mine,
                                              cost.epsilon_dp, charge.columns, charge.times)
                conn.execute("COMMIT")
                self._kept = ledger_snapshot.Kept.after_charge(conn, snapshot, charge.analyst,
                                                               written)
                if self.on_write is not None:  # the inserts, the totals and the synced commit
                    self.on_write(time.perf_counter() - writing)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot write ledger {self.path}: {exc}; nothing was charged") \
                from None
        return int(ident), extra

    def account(self, name: str) -> AnalystAccount | None:
        """The registered analyst `name` with the books of their own answers (`AnalystsTable`);
        inside a charge, from what the charge read in its transaction where it can."""
        snapshot = self._charging
        if snapshot is None:
            return super().account(name)
        if not snapshot.analysts:
            return None
        row = self._analyst_row(name)
        if row is None:
            return None
        totals = snapshot.totals(self.path, name) if name == snapshot.analyst \
            else ledger_totals.read(self._conn, self.path, name)
        return AnalystAccount(Analyst(*row), totals.books(self.path))

    def history(self, analyst: str, ident: int | None = None) -> tuple[HistoryEntry, ...]:
        """The analyst's released answers as stored with their charges (one, given its id)."""
        try:
            return _history(self._conn, self.path, analyst, ident)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot read ledger {self.path}: {exc}") from None

    def reusable(self, analyst: str, ask: reuse_index.Ask,
                 epsilon_dp: float) -> reuse_index.Found:
        """The analyst's released answers `ask` finds (indexed lookups, `reuse_index`)."""
        try:
            return reuse_index.lookup(self._conn, self.path, analyst, ask, epsilon_dp)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"cannot read ledger {self.path}: {exc}") from None

    def halt(self, reason: str) -> None:
        """Record durably that the engine halted on this ledger's data (kept if already set).

        A halted ledger refuses every further query (every charge checks it under the write
        lock) until the owner removes the record. A ledger locked by another process is waited
        for, up to HALT_ATTEMPTS busy timeouts, since no other process can charge meanwhile."""
        for attempt in range(HALT_ATTEMPTS):
            try:
                self._conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('halted', ?)",
                                   [f"{now()} {reason}"])
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == HALT_ATTEMPTS - 1:
                    raise LedgerError(f"cannot write ledger {self.path}: {exc}") from None
            except sqlite3.DatabaseError as exc:
                raise LedgerError(f"cannot write ledger {self.path}: {exc}") from None

    def halted(self) -> str | None:
        """When and why the engine halted on this ledger, or None."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'halted'").fetchone()
        return None if row is None else row[0]

    def resume(self) -> str | None:
        """The owner's act after inspecting a halt: remove it; returns when and why it halted
        (None if it was not halted)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            reason = self.halted()
            self._conn.execute("DELETE FROM meta WHERE key = 'halted'")
            self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise LedgerError(f"cannot write ledger {self.path}: {exc}") from None
        return reason

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()


def open_read_only(path: Path, reader: str) -> sqlite3.Connection:
    """A read-only connection to an existing ledger file, for `reader` (history, a report),
    which never creates, migrates or locks it for writing."""
    if not path.exists():
        raise LedgerError(f"ledger file not found: {path} (a {reader} never creates a ledger)")
    if not path.is_file():
        raise LedgerError(f"ledger path {path} is not a file; expected a dpsql ledger (sqlite)")
    try:
        return sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True,
                               isolation_level=None, timeout=60)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot open ledger {path}: {exc}") from None


def peek_hash_key(path: str | Path) -> str | None:
    """The ledger's secret hash key read without opening it for writing, or None when it
    cannot be read (opening the ledger properly then says why)."""
    try:
        conn = open_read_only(Path(path), "peek")
    except LedgerError:
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'hash_key'").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])


def read_history(path: str | Path, analyst: str,
                 ident: int | None = None) -> tuple[HistoryEntry, ...]:
    """The analyst's stored answers, read through a read-only connection that never creates,
    migrates or locks the ledger for writing (a version 2 ledger has no stored answers)."""
    path = Path(path)
    conn = open_read_only(path, "history")
    try:
        return _history(conn, path, analyst, ident)
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"cannot read ledger {path} as a dpsql ledger: {exc}") from None
    finally:
        conn.close()


def _history(conn: sqlite3.Connection, path: Path, analyst: str,
             ident: int | None) -> tuple[HistoryEntry, ...]:
    """Rows of the charges table with their stored answers as history entries; answers are
    JSON-decoded and checked."""
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    moved = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                         "'answers'").fetchone() is not None
    answer = "a.answer" if moved else "NULL" if version == ("2",) else "c.answer"
    joined = " LEFT JOIN answers a ON a.id = c.id" if moved else ""
    where, args = "c.analyst = ?", list[str | int]([analyst])
    if ident is not None:
        where += " AND c.id = ?"
        args.append(ident)
    rows = conn.execute(f"SELECT c.id, c.time, c.sql, c.epsilon, c.epsilon_dp, c.mode, {answer} "
                        f"FROM charges c{joined} WHERE {where} ORDER BY c.id", args).fetchall()
    entries = []
    for number, when, sql, epsilon, epsilon_dp, mode, text in rows:
        try:
            stored = None if text is None else json.loads(text)
        except ValueError:
            raise LedgerError(f"ledger {path}, answer {number}: the stored answer is not valid "
                              "JSON; restore the ledger from a backup") from None
        entries.append(HistoryEntry(id=number, time=when, analyst=analyst, sql=sql,
                                    epsilon=epsilon, epsilon_dp=epsilon_dp, mode=mode,
                                    answer=stored))
    return tuple(entries)


def _insert_binding(conn: sqlite3.Connection, now: str, binding: LedgerBinding) -> None:
    conn.execute("INSERT INTO bindings (time, budget, k, eta, mode, eta_by_columns) "
                 "VALUES (?, ?, ?, ?, ?, ?)",
                 [now, binding.budget, binding.k, binding.eta, binding.mode, binding.eta_by_columns])


def _explain(path: Path, exc: sqlite3.Error) -> str:
    """One line for a sqlite failure while opening, naming the likely cause."""
    text = str(exc)
    if "readonly" in text or "unable to open" in text:
        return (f"ledger {path} cannot be written ({text}); the ledger file and its directory must "
                "be writable, since every answer is charged before it is released")
    if "not a database" in text or "malformed" in text:
        return (f"ledger {path} is corrupted or truncated ({text}); restore it from a backup: "
                "its recorded spending cannot be trusted, and a new ledger is never started in "
                "its place")
    return f"cannot use ledger {path}: {text}"


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (best effort where the platform cannot)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
