"""PrivateDatabase: the Python API, and the pipeline of one query: prepare (plan, SQL,
calibration, noise), reuse (an answer already released that it is post-processing of, given
at no charge), price and admit (the bookkeeper), run (the backend), release (noise and
post-processing) and record (the ledger's charge), in that order."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, NoReturn, ParamSpec, TypeVar

from . import postprocess, reuse
from .accounting.analysts import check_analyst
from .accounting.bookkeeper import Bookkeeper, Price
from .accounting.ledger import Charge, Ledger, LedgerState, peek_hash_key
from .accounting.ledger_binding import binding_of
from .accounting.transcript import union
from .accuracy import AccuracyPlan, smallest_epsilon
from .backends import Backend, DataFailure
from .backends.duckdb import DuckDBBackend
from .errors import (
    DpsqlError,
    EngineHalted,
    InputError,
    LedgerError,
    QueryInterrupted,
)
from .plan import ExactAnswer
from .policy import Policy
from .policy_yaml import load_policy
from .prepare import PreparedQuery, Preparer, aggregate_infos
from .release import PostProcessingFailed, release_answer
from .result import BudgetStatus, Explanation, HistoryEntry, QueryResult, model_fields
from .rewrite import copies_to_bound

if TYPE_CHECKING:
    from .report.values import Report
    from .workload_result import WorkloadExplanation, WorkloadResult

DEFAULT_ANALYST = "analyst"


P = ParamSpec("P")
R = TypeVar("R")


def _serialized(method: Callable[Concatenate[PrivateDatabase, P], R]
                ) -> Callable[Concatenate[PrivateDatabase, P], R]:
    """Run a method of the database under its lock, so that one database object may serve
    several threads: its connections and caches are used by one thread at a time."""
    @functools.wraps(method)
    def serialized(self: PrivateDatabase, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)
    return serialized


class PrivateDatabase:
    """A private table collection: answers SQL with calibrated noise and charges a ledger."""

    def __init__(self, backend: Backend, policy: Policy, ledger: Ledger,
                 analyst: str = DEFAULT_ANALYST, reuse: bool = True) -> None:
        self._backend = backend
        self.reuse = reuse  # answer from released answers a query derives from (`reuse.py`)
        self.policy = policy
        self.ledger = ledger
        self.analyst = check_analyst(analyst)
        self.bookkeeper = Bookkeeper(policy, ledger)
        self._post = postprocess.Connection()  # opened by the first post-processing query
        self._preparer = Preparer(policy, backend, self._post)
        self._halted = False
        # One thread at a time uses the data connection, the preparer's caches, the
        # post-processing connection and the ledger connection (see `_serialized`).
        self._lock = threading.RLock()

    @classmethod
    def connect(cls, db: str | Path | Any, policy: str | Path | Policy, ledger: str | Path,
                analyst: str = DEFAULT_ANALYST, create: bool = False, engine: str = "duckdb",
                spark: Any = None, reuse: bool = True) -> PrivateDatabase:
        """Open the data under a policy, with a budget ledger.

        With engine="duckdb" (the default) `db` is a DuckDB, CSV or Parquet file, or tables the
        caller holds (a pandas or Polars DataFrame, an Arrow table or a DuckDB relation such as
        `con.table("people")`, or a mapping of policy table names to them), which are copied into a
        locked-down DuckDB of the engine's own. With engine="spark" it is a Spark DataFrame, a
        Parquet or CSV file, a Parquet folder, or a catalog table (or a mapping of policy table
        names to them, or a folder holding one file named after each table), computed on the session
        `spark` (a local one if None). The ledger must exist unless `create=True`, which creates a
        new one bound to this policy (and refuses a path that exists): a mistyped path never starts
        a fresh budget. A query that is post-processing of the analyst's released answers (the same
        query again, a marginal, total or kept groups of a released table) is answered from them at
        no charge when at least as accurate (docs/theory.md §22); `reuse=False` charges every query
        and draws fresh noise."""
        policy = policy if isinstance(policy, Policy) else load_policy(policy)
        backend = _open_backend(db, policy, engine, spark, ledger, create)
        try:
            book = Ledger(ledger, binding_of(policy), create=create)
        except BaseException:
            backend.close()
            raise
        return cls(backend, policy, book, analyst, reuse)

    def __enter__(self) -> PrivateDatabase:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @_serialized
    def close(self) -> None:
        self._preparer.close()
        self._post.close()
        self._backend.close()
        self.ledger.close()

    @_serialized
    def budget(self) -> BudgetStatus:
        """What the ledger has spent and what is left, including the largest epsilon to ask."""
        return self.bookkeeper.status(self.bookkeeper.books())

    @_serialized
    def cap_status(self, analyst: str) -> BudgetStatus | None:
        """A registered analyst's cap as a budget: the level of their own answers, what is left
        and the largest epsilon their cap still admits (None when they have no cap)."""
        return self.bookkeeper.cap_status(analyst)

    @_serialized
    def warm(self) -> None:
        """Make every table's bounded copy now, as a service does while it starts, so that no
        analyst's first query waits for it."""
        for table in self.policy.tables.values():
            self._backend.bound(table, self.ledger.hash_key)

    @_serialized
    def history(self, id: int | None = None) -> tuple[HistoryEntry, ...]:
        """This analyst's released answers as stored with their charges (or the one with `id`),
        with the exact values first released: no charge, no fresh noise."""
        if id is not None and (isinstance(id, bool) or not isinstance(id, int) or id < 1):
            raise InputError(f"answer id must be an integer >= 1, got {id!r}")
        entries = self.ledger.history(self.analyst, id)
        if id is not None and not entries:
            raise InputError(f"no released answer with id {id} for analyst {self.analyst!r}; "
                             "list them with history()")
        return entries

    def report(self, analyst: str | None = None) -> Report:
        """What the ledger has spent, by whom, and what the transcript guarantees."""
        from .report.build import build_report  # imported here, as a query does not use it

        return build_report(self.ledger.path, policy=self.policy, analyst=analyst)

    @_serialized
    def explain(self, sql: str, epsilon: float | None = None, mode: str | None = None,
                cost: float | None = None, analyst: str | None = None,
                reuse: bool | None = None) -> Explanation:
        """The plan, rewritten SQL, sensitivities, epsilon_dp, cost and expected error; spends
        nothing. Asked by cost, epsilon_dp is the one today's spending gives (a later charge
        recomputes it against the spending it reads).

        Reads no data: the SQL was bound on the schema-only gate, so every word of the
        explanation is a function of the query text, the policy and the ledger (with reuse:
        the released answer of `analyst`, by default this database's, it would be given as)."""
        analyst = self.analyst if analyst is None else check_analyst(analyst)
        prepared = self._prepare(sql, epsilon, mode, cost)
        plan = prepared.plan
        books = self.bookkeeper.books()
        price = self.bookkeeper.price(prepared, books)
        cal = price.calibration
        admissible, largest, status = self.bookkeeper.figures(prepared, books, price, analyst)
        stored = self._reusable(analyst, prepared, price, reuse)
        if stored is not None:  # answered from a released answer: nothing to charge
            price = replace(price, level_after=price.level_before, admissible=True)
            admissible = True
        mechanisms = self._preparer.mechanisms(plan, cal.epsilon_dp)
        return Explanation(
            sql=sql, table=plan.table.name, privacy_unit=plan.table.privacy_unit,
            max_rows_per_unit=plan.rows_per_unit,
            group_by=tuple(c.label for c in plan.group_by),
            groups=plan.group_count if plan.group_by else 1,
            rewritten_sql=prepared.sql, epsilon=cal.epsilon, epsilon_dp=cal.epsilon_dp,
            mode=cal.mode, justification=cal.justification, k=self.policy.k,
            eta=prepared.scope.eta, aggregates=aggregate_infos(plan, mechanisms),
            budget=status, level_before=price.level_before,
            level_after=price.level_after, cost=price.cost, admissible=admissible,
            eta_from=prepared.scope.source, columns_read=tuple(sorted(prepared.columns)),
            transcript_eta=self.policy.eta_for(union(books.read, prepared.columns)).eta,
            largest_epsilon=largest,
            **model_fields(prepared.declared, cal.epsilon_dp, prepared.times,
                             prepared.tight_dp),
            flattened_sql=plan.flattened_sql,
            errors=postprocess.expected_errors(plan, mechanisms),
            derived_from=() if stored is None else stored.ids,
        )

    @_serialized
    def query(self, sql: str, epsilon: float | None = None, mode: str | None = None,
              analyst: str | None = None, cost: float | None = None,
              reuse: bool | None = None) -> QueryResult:
        """Answer `sql` with noise keeping it epsilon-information private; charge the ledger.

        Ask either `epsilon` (the answer's own level) or `cost` (the most the transcript's
        level may rise; the answer alone is then at most cost-private too). The noise, the
        post-processing and the complete answer are made inside the charge's transaction and
        stored with it, so nothing can fail after a charge and a lost answer can be fetched
        again with `history`. Unless reuse is off (`reuse=False` here or at `connect`), a
        query that is post-processing of answers already released to the analyst, at most as
        accurately, is answered from them (`derived_from`), at no charge and not recorded
        again (docs/theory.md §22)."""
        analyst = self.analyst if analyst is None else check_analyst(analyst)
        if self._halted:
            raise EngineHalted
        before = self.ledger.state()  # read first: it says whether the engine halted
        if before.halted is not None:
            raise EngineHalted
        prepared = self._preparer.prepare(sql, epsilon, mode, cost)
        plan = prepared.plan
        books = self.bookkeeper.books(before)
        if (self.reuse if reuse is None else reuse):  # priced to know the accuracy asked
            price = self.bookkeeper.price(prepared, books)
            stored = self._reusable(analyst, prepared, price, reuse)
            if stored is not None:
                return self._derived(stored, sql, prepared, books, price)
        # Admit on the ledger as it is before touching the data, so that an analyst
        # with no budget left cannot run queries on the data at all (their timing or a
        # cancellation would otherwise be free); the charge admits again under the write lock.
        admitted = self.bookkeeper.admit(prepared, books, analyst)
        key = self._reuse_entry(prepared)
        exact = self._run(prepared, f"analyst {analyst!r}, query {sql!r}")

        def settle(state: LedgerState) -> tuple[Charge, QueryResult]:
            # Priced again only if another charge or the owner changed the books meanwhile;
            # the analyst's cap is always checked again, under the write lock.
            settled = self.bookkeeper.settle(prepared, self.bookkeeper.books(state), analyst,
                                             admitted if state == before else None)
            price, largest, status = settled.price, settled.largest_epsilon, settled.status
            cal = price.calibration
            mechanisms = self._preparer.mechanisms(plan, cal.epsilon_dp)
            infos = aggregate_infos(plan, mechanisms)
            try:
                answer, halfwidths, simultaneous = release_answer(
                    self._post, plan, prepared.post_sql, exact, mechanisms)
                possible, no_interval = postprocess.interval_notes(plan, mechanisms)
                result = QueryResult(
                    table=answer, ci95_table=halfwidths, simultaneous_table=simultaneous,
                    selection_adjusted=postprocess.selection_adjusted(plan), sql=sql,
                    epsilon=cal.epsilon,
                    epsilon_dp=cal.epsilon_dp, mode=cal.mode, k=self.policy.k,
                    eta=prepared.scope.eta, aggregates=infos,
                    budget=status,
                    level_before=price.level_before, level_after=price.level_after,
                    cost=price.cost, eta_from=prepared.scope.source,
                    columns_read=tuple(sorted(prepared.columns)),
                    **model_fields(prepared.declared, cal.epsilon_dp, prepared.times,
                             prepared.tight_dp),
                    largest_epsilon=largest,
                    possible=possible, no_interval=no_interval,
                )
                stored_answer = result.to_dict()
            except Exception as exc:
                raise PostProcessingFailed from exc
            charge = Charge(analyst, sql, result.answer_cost, infos, stored_answer,
                            prepared.columns, prepared.times, key)
            return charge, result

        try:
            ident, result = self.ledger.charge(settle, analyst)
        except PostProcessingFailed:
            self._halt(f"post-processing failed on noisy values (analyst {analyst!r}, query {sql!r})")
        return replace(result, id=ident)

    @_serialized
    def query_many(self, statements: list[str], epsilon: float | None = None,
                   mode: str | None = None, analyst: str | None = None,
                   cost: float | None = None, accuracy: float | None = None) -> WorkloadResult:
        """Answer a workload of statements together at one epsilon (or cost) for the whole set,
        charged once: linear counts over one table's public domain are measured by one strategy
        and answered by least squares; the others are answered alone within the same split
        (docs/theory.md §18). `accuracy=H` asks the smallest epsilon keeping every noisy
        cell's 95% half-width within ±H (`epsilon_for`)."""
        from . import workload_run  # here: the workload's code (SciPy, pandas) is not a query's

        if accuracy is not None:
            epsilon = workload_run.accuracy_epsilon(self, statements, accuracy, mode, epsilon,
                                                    cost)
        return workload_run.query_many(self, statements, epsilon, mode, analyst, cost)

    @_serialized
    def explain_many(self, statements: list[str], epsilon: float | None = None,
                     mode: str | None = None, cost: float | None = None,
                     accuracy: float | None = None) -> WorkloadExplanation:
        """The workload's strategy, each statement's expected per-cell error against asking
        the statements separately at epsilon / (their number), and the cost; reads no data."""
        from . import workload_run

        if accuracy is not None:
            epsilon = workload_run.accuracy_epsilon(self, statements, accuracy, mode, epsilon,
                                                    cost)
        return workload_run.explain_many(self, statements, epsilon, mode, cost)

    @_serialized
    def epsilon_for(self, sql: str | list[str], ci95: float,
                    mode: str | None = None) -> AccuracyPlan:
        """The smallest epsilon whose 95% half-width on every noisy cell of `sql` (a query, or
        a list of statements asked as one workload) is at most `ci95`; reads no data, spends
        nothing (docs/theory.md §18)."""
        if isinstance(sql, str):
            def widest(epsilon: float) -> float:
                prepared = self._prepare(sql, epsilon, mode)
                return max(m.ci95 for m in prepared.mechanisms.values())

            return smallest_epsilon(widest, ci95, "this query")
        from . import workload_run

        return smallest_epsilon(workload_run.workload_halfwidth(self, sql, mode), ci95,
                                "this workload")

    def _prepare(self, sql: str, epsilon: float | None, mode: str | None,
                 cost: float | None = None) -> PreparedQuery:
        """Everything decided before the data is touched (refused once the database halted)."""
        if self._halted or self.ledger.halted() is not None:
            raise EngineHalted
        return self._preparer.prepare(sql, epsilon, mode, cost)

    def _reusable(self, analyst: str, prepared: PreparedQuery, price: Price,
                  asked: bool | None = None) -> reuse.Reused | None:
        """The analyst's released answers `prepared` may be answered from, when reuse is on
        (`asked`, else this database's setting)."""
        if not (self.reuse if asked is None else asked):
            return None
        fresh = self._preparer.mechanisms(prepared.plan, price.calibration.epsilon_dp)
        return reuse.find(self.ledger, self.ledger.binding, analyst, prepared, price, fresh)

    def _derived(self, stored: reuse.Reused, sql: str, prepared: PreparedQuery, books: reuse.Books,
                 price: Price) -> QueryResult:
        """The answer given for `sql` from released ones, at cost 0 (`reuse.derived`)."""
        return reuse.derived(stored, sql, self.bookkeeper, prepared, books, price)

    def _reuse_entry(self, prepared: PreparedQuery) -> reuse.Entry:
        """How this query's answer is indexed for later reuse (`reuse.entry`)."""
        return reuse.entry(prepared, self.ledger.binding)

    def _run(self, prepared: PreparedQuery, who: str) -> ExactAnswer:
        """The exact values of the rewritten query, on the bounded copies of the tables it
        reads. A failure on the data halts the engine (naming `who` asked); an interruption
        comes before the charge, so nothing is spent."""
        plan = prepared.plan
        try:
            for table, columns in copies_to_bound(plan):
                self._backend.bound(table, self.ledger.hash_key, columns)
            return self._backend.run(prepared.sql, len(plan.group_by))
        except DataFailure as failure:
            self._halt(f"{failure} ({who})")
        except KeyboardInterrupt:  # Ctrl-C outside DuckDB
            raise QueryInterrupted() from None
        except RuntimeError as exc:
            # DuckDB stops a statement on Ctrl-C with a plain RuntimeError of this text.
            if isinstance(exc, DpsqlError) or str(exc) != "Query interrupted":
                raise
            raise QueryInterrupted() from None

    def _halt(self, reason: str) -> NoReturn:
        """SQL that passed the gate failed on the data, or post-processing failed on noisy
        values: record it durably and refuse this and every later query. Never a per-query
        refusal, which would answer a data-dependent question for free; the one bit a halt
        reveals is revealed once, and the owner sees it. The output is the same even if the
        ledger cannot record it (this process stays halted)."""
        self._halted = True
        with contextlib.suppress(LedgerError):
            self.ledger.halt(reason)
        raise EngineHalted


ENGINES = ("duckdb", "spark")


def _open_backend(db: Any, policy: Policy, engine: str, spark: Any, ledger: str | Path,
                  create: bool) -> Backend:
    """The backend `engine` names, over `db` (Spark is imported only when asked for). DuckDB
    uses the owner's prepared bounded copies kept beside the ledger, when current."""
    if engine == "duckdb":
        if spark is not None:
            raise InputError("spark= is given but engine is 'duckdb'; pass engine='spark' to "
                             "compute on that Spark session")
        if not isinstance(db, (str, Path)):
            return DuckDBBackend.copy_of(_frames(db, policy), policy)
        key = None if create else peek_hash_key(ledger)  # finds the owner's prepared copies
        return DuckDBBackend.open(db, policy, ledger, key)
    if engine == "spark":
        from .backends.spark import SparkBackend

        return SparkBackend.open(spark, db, policy)
    raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")


def _frames(db: Any, policy: Policy) -> dict[str, Any]:
    """In-memory tables by policy table name: a mapping as given (its names checked), or one
    table (a DataFrame, an Arrow table, a DuckDB relation) for a policy with one data table."""
    names = sorted({*policy.tables, *policy.parent_tables,
                    *(n for n, t in policy.public_tables.items() if t.data is None)})
    if isinstance(db, Mapping):
        unknown = sorted(str(name) for name in db if str(name).lower() not in names)
        missing = [name for name in names if name not in {str(n).lower() for n in db}]
        if unknown or missing:
            raise InputError(f"the tables given must be the policy's: {', '.join(names)} "
                             f"(unknown: {', '.join(unknown) or 'none'}; missing: "
                             f"{', '.join(missing) or 'none'})")
        return {str(name).lower(): frame for name, frame in db.items()}
    if len(names) != 1:
        raise InputError(f"the policy has tables {', '.join(names)}: pass a mapping of each "
                         "table's name to its DataFrame, Arrow table or DuckDB relation")
    return {names[0]: db}
