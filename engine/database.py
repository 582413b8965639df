"""PrivateDatabase: the Python API tying parse, plan, calibrate, rewrite, run, charge, noise."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

from ..calibration import (
    Calibration,
    CalibrationError,
    calibrate,
    guarantee,
)
from ..calibration.model_exact import largest_within
from . import postprocess
from .accounting import AnswerMap, ScopedAccountant, TimeSpend, inverse, no_column_answers, union
from .accuracy import AccuracyPlan
from .backends import Backend, DataFailure
from .backends.duckdb import DuckDBBackend
from .declared_models import SeriesPoints, SeriesSpend, models_json
from .errors import (
    AccessDenied,
    BudgetExhausted,
    DpsqlError,
    EngineHalted,
    InputError,
    LedgerError,
    QueryInterrupted,
)
from .ledger import AnalystAccount, Charge, Ledger, LedgerBinding, peek_hash_key
from .noise import Mechanism, release_cells
from .plan import QueryPlan, UnitJoin
from .policy import Policy, declarations_json, shared_json
from .policy_yaml import load_policy
from .prepare import PreparedQuery, Preparer, model_calibration
from .report.build import build_report
from .report.values import Report
from .result import (
    AggregateInfo,
    BudgetStatus,
    Explanation,
    HistoryEntry,
    ModelCheck,
    QueryResult,
)
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
                 analyst: str = DEFAULT_ANALYST) -> None:
        self._backend = backend
        self.policy = policy
        self.ledger = ledger
        self.analyst = _check_analyst(analyst)
        self.accountant = ScopedAccountant(policy.budget_epsilon, policy.k, policy.eta, policy.mode,
                                           policy.eta_by_columns, policy.models,
                                           policy.shared_columns)
        self._post = postprocess.connect()
        self._preparer = Preparer(policy, backend, self._post)
        self._halted = False
        # One thread at a time uses the data connection, the preparer's caches, the
        # post-processing connection and the ledger connection (see `_serialized`).
        self._lock = threading.RLock()

    @classmethod
    def connect(cls, db: str | Path | Any, policy: str | Path | Policy, ledger: str | Path,
                analyst: str = DEFAULT_ANALYST, create: bool = False, engine: str = "duckdb",
                spark: Any = None) -> PrivateDatabase:
        """Open the data under a policy, with a budget ledger.

        With engine="duckdb" (the default) `db` is a DuckDB, CSV or Parquet file, or tables the
        caller holds (a pandas or Polars DataFrame, an Arrow table or a DuckDB relation such as
        `con.table("people")`, or a mapping of policy table names to them), which are copied
        into a locked-down DuckDB of the engine's own. With
        engine="spark" it is a Spark DataFrame, a Parquet file or folder, or a catalog table (or
        a mapping of policy table names to them), computed on the session `spark` (a local one
        if None). The ledger must exist unless `create=True`, which creates a new one bound to
        this policy (and refuses a path that exists): a mistyped path never starts a fresh
        budget."""
        policy = policy if isinstance(policy, Policy) else load_policy(policy)
        backend = _open_backend(db, policy, engine, spark, ledger, create)
        try:
            book = Ledger(ledger, binding_of(policy), create=create)
        except BaseException:
            backend.close()
            raise
        return cls(backend, policy, book, analyst)

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
        spent, stored, read, times = self.ledger.state()
        return self._status(_Books(spent, read, self._accountants(stored), times))

    @_serialized
    def cap_status(self, analyst: str) -> BudgetStatus | None:
        """A registered analyst's cap as a budget: the level of their own answers, what is left
        and the largest epsilon their cap still admits (None when they have no cap)."""
        account = self.ledger.account(analyst)
        if account is None or account.analyst.cap is None:
            return None
        _, stored, _, _ = self.ledger.state()
        return self._status(_cap_books(account, account.analyst.cap, self._accountants(stored)))

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
        return build_report(self.ledger.path, policy=self.policy, analyst=analyst)

    @_serialized
    def explain(self, sql: str, epsilon: float | None = None, mode: str | None = None,
                cost: float | None = None) -> Explanation:
        """The plan, rewritten SQL, sensitivities, epsilon_dp, cost and expected error; spends
        nothing. Asked by cost, epsilon_dp is the one today's spending gives (a later charge
        recomputes it against the spending it reads).

        Reads no data: the SQL was bound on the schema-only gate, so every word of the
        explanation is a function of the query text, the policy and the ledger."""
        prepared = self._prepare(sql, epsilon, mode, cost)
        plan = prepared.plan
        books = _Books(*self._state())
        cal = self._price(prepared, books)
        mechanisms = self._preparer.mechanisms(plan, cal.epsilon_dp)
        before, after = books.levels(cal.epsilon_dp, prepared.columns, prepared.times)
        return Explanation(
            sql=sql, table=plan.table.name, privacy_unit=plan.table.privacy_unit,
            max_rows_per_unit=plan.rows_per_unit,
            group_by=tuple(c.label for c in plan.group_by),
            groups=plan.group_count if plan.group_by else 1,
            rewritten_sql=prepared.sql, epsilon=cal.epsilon, epsilon_dp=cal.epsilon_dp,
            mode=cal.mode, justification=cal.justification, k=self.policy.k,
            eta=prepared.scope.eta, aggregates=_aggregate_infos(plan, mechanisms),
            budget=self._status(books), level_before=before, level_after=after,
            cost=after - before, admissible=books.admits(cal.epsilon_dp, prepared.columns, prepared.times),
            eta_from=prepared.scope.source, columns_read=tuple(sorted(prepared.columns)),
            transcript_eta=self.accountant.scope(union(books.read, prepared.columns)).eta,
            largest_epsilon=books.largest_epsilon(prepared.mode, prepared.columns, *_answer(prepared)),
            **_model_fields(prepared, cal.epsilon_dp),
            flattened_sql=plan.flattened_sql,
            errors=postprocess.expected_errors(plan, mechanisms),
        )

    @_serialized
    def query(self, sql: str, epsilon: float | None = None, mode: str | None = None,
              analyst: str | None = None, cost: float | None = None) -> QueryResult:
        """Answer `sql` with noise keeping it epsilon-information private; charge the ledger.

        Ask either `epsilon` (the answer's own level) or `cost` (the most the transcript's
        level may rise; the answer alone is then at most cost-private too). The noise, the
        post-processing and the complete answer are made inside the charge's transaction and
        stored with it, so nothing can fail after a charge and a lost answer can be fetched
        again with `history`."""
        analyst = self.analyst if analyst is None else _check_analyst(analyst)
        prepared = self._prepare(sql, epsilon, mode, cost)
        plan = prepared.plan
        # Admit on the ledger as it is before touching the data, so that an analyst with no
        # budget left cannot run queries on the data at all (their timing or a cancellation
        # would otherwise be free); the charge below admits again under the write lock.
        books = _Books(*self._state())
        cal = self._price(prepared, books)
        self._admit(prepared, cal, books)
        self._admit_analyst(prepared, cal, analyst, books.accountants)
        try:
            self._backend.bound(plan.table, self.ledger.hash_key)
            if isinstance(plan.join, UnitJoin):
                self._backend.bound(plan.join.other, self.ledger.hash_key)
            elif plan.join is not None and plan.join.parent is not None:
                self._backend.bound(plan.join.parent.one_per_key(), self.ledger.hash_key)
            exact = self._backend.run(prepared.sql, len(plan.group_by))
        except DataFailure as failure:
            self._halt(f"{failure} (analyst {analyst!r}, query {sql!r})")
        except KeyboardInterrupt:  # Ctrl-C outside DuckDB: before the charge, so nothing spent
            raise QueryInterrupted() from None
        except RuntimeError as exc:
            # DuckDB stops a statement on Ctrl-C with a plain RuntimeError of this text.
            if isinstance(exc, DpsqlError) or str(exc) != "Query interrupted":
                raise
            raise QueryInterrupted() from None

        def settle(spent: float, stored: LedgerBinding, read: frozenset[str] | None,
                   times: TimeSpend | None) -> tuple[Charge, QueryResult]:
            books = _Books(spent, read, self._accountants(stored), times)
            cal = self._price(prepared, books)
            self._admit(prepared, cal, books)
            self._admit_analyst(prepared, cal, analyst, books.accountants)
            mechanisms = self._preparer.mechanisms(plan, cal.epsilon_dp)
            infos = _aggregate_infos(plan, mechanisms)
            before, after = books.levels(cal.epsilon_dp, prepared.columns, prepared.times)
            charged = books.after(cal.epsilon_dp, prepared.columns, prepared.times)
            try:
                noisy = {cell: values for mech in mechanisms.values()
                         for cell, values in release_cells(mech, exact.values).items()}
                finished = postprocess.direct(plan, exact.keys, noisy, mechanisms)
                if finished is None:
                    frame = postprocess.noisy_frame(plan, exact.keys, noisy, mechanisms)
                    finished = postprocess.finish(self._post, plan, prepared.post_sql, frame)
                answer, halfwidths, simultaneous = finished
                possible, no_interval = postprocess.interval_notes(plan, mechanisms)
                result = QueryResult(
                    df=answer, ci95=halfwidths, ci95_simultaneous=simultaneous,
                    selection_adjusted=postprocess.selection_adjusted(plan), sql=sql,
                    epsilon=cal.epsilon,
                    epsilon_dp=cal.epsilon_dp, mode=cal.mode, k=self.policy.k,
                    eta=prepared.scope.eta, aggregates=infos, budget=self._status(charged),
                    level_before=before, level_after=after, cost=after - before,
                    eta_from=prepared.scope.source, columns_read=tuple(sorted(prepared.columns)),
                    **_model_fields(prepared, cal.epsilon_dp),
                    largest_epsilon=charged.largest_epsilon(prepared.mode, prepared.columns,
                                                            *_answer(prepared)),
                    possible=possible, no_interval=no_interval,
                )
                stored_answer = result.to_dict()
            except Exception as exc:
                raise _PostProcessingFailed from exc
            charge = Charge(analyst, sql, result.answer_cost, infos, stored_answer,
                            prepared.columns, prepared.times)
            return charge, result

        try:
            ident, result = self.ledger.charge(settle)
        except _PostProcessingFailed:
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
        from .workload_run import accuracy_epsilon, query_many

        if accuracy is not None:
            epsilon = accuracy_epsilon(self, statements, accuracy, mode, epsilon, cost)
        return query_many(self, statements, epsilon, mode, analyst, cost)

    @_serialized
    def explain_many(self, statements: list[str], epsilon: float | None = None,
                     mode: str | None = None, cost: float | None = None,
                     accuracy: float | None = None) -> WorkloadExplanation:
        """The workload's strategy, each statement's expected per-cell error against asking
        the statements separately at epsilon / (their number), and the cost; reads no data."""
        from .workload_run import accuracy_epsilon, explain_many

        if accuracy is not None:
            epsilon = accuracy_epsilon(self, statements, accuracy, mode, epsilon, cost)
        return explain_many(self, statements, epsilon, mode, cost)

    @_serialized
    def epsilon_for(self, sql: str | list[str], ci95: float,
                    mode: str | None = None) -> AccuracyPlan:
        """The smallest epsilon whose 95% half-width on every noisy cell of `sql` (a query, or
        a list of statements asked as one workload) is at most `ci95`; reads no data, spends
        nothing (docs/theory.md §18)."""
        from .accuracy import smallest_epsilon
        from .workload_run import workload_halfwidth

        if isinstance(sql, str):
            def widest(epsilon: float) -> float:
                prepared = self._prepare(sql, epsilon, mode)
                return max(m.ci95 for m in prepared.mechanisms.values())

            return smallest_epsilon(widest, ci95, "this query")
        return smallest_epsilon(workload_halfwidth(self, sql, mode), ci95, "this workload")

    def _prepare(self, sql: str, epsilon: float | None, mode: str | None,
                 cost: float | None = None) -> PreparedQuery:
        """Everything decided before the data is touched (refused once the database halted)."""
        if self._halted or self.ledger.halted() is not None:
            raise EngineHalted
        return self._preparer.prepare(sql, epsilon, mode, cost)

    def _state(self) -> tuple[float, frozenset[str] | None, tuple[ScopedAccountant, ...],
                              TimeSpend | None]:
        """The ledger's spending, the columns read so far, who must admit a charge and the
        spending per time point."""
        spent, stored, read, times = self.ledger.state()
        return spent, read, self._accountants(stored), times

    def _accountants(self, stored: LedgerBinding) -> tuple[ScopedAccountant, ...]:
        """Who must admit a charge: this connection's policy and, if the owner has changed the
        ledger's binding since this connection opened, the ledger's binding as well."""
        if stored == binding_of(self.policy):
            return (self.accountant,)
        return (self.accountant, stored.accountant())

    def _price(self, prepared: PreparedQuery, books: _Books) -> Calibration:
        """The calibration to charge at the ledger's state: the smallest eps_dp that every
        accountant allows, under the asked mode and each accountant's own mode, each with the
        eta it gives the columns the query reads."""
        cal, mode, columns = prepared.calibration, prepared.mode, prepared.columns
        if prepared.declared is not None:  # every binding holds the same models (ledger.py),
            for a in books.accountants:     # but a tightened one has a smaller tight floor
                if a is not self.accountant:
                    other, _ = model_calibration(prepared.declared, cal.epsilon,
                                                 a.model(columns), prepared.times or ())
                    cal = other if other.epsilon_dp < cal.epsilon_dp else cal
            return cal
        if prepared.cost is None:
            for a in books.accountants:
                if a is not self.accountant:
                    for m in (mode, a.mode):
                        try:
                            other = calibrate(cal.epsilon, a.model(columns), m)
                        except CalibrationError as exc:
                            raise InputError(f"the ledger's current policy cannot certify this "
                                             f"query: {exc}") from None
                        if other.epsilon_dp < cal.epsilon_dp:
                            cal = replace(other, epsilon=cal.epsilon)
            return cal
        limit = prepared.cost
        before, _ = books.levels(0.0, columns)
        after = union(books.read, columns)
        epsilon_dp = min(min(inverse(before + limit, a.model(after), a.mode) - books.spent,
                             inverse(limit, a.model(columns), mode),
                             inverse(limit, a.model(columns), a.mode)) for a in books.accountants)
        if epsilon_dp <= 0.0:
            raise InputError(f"cost {limit:g} cannot be certified under mode {mode} with k="
                             f"{self.policy.k}, eta={prepared.scope.eta:g} (from "
                             f"{prepared.scope.source}) for the columns this query reads and the "
                             "transcript so far; ask a larger cost")
        own = guarantee(mode, epsilon_dp, prepared.model)
        named = self._preparer.calibrate(own, mode, prepared.model)
        return replace(named, epsilon=own, epsilon_dp=min(named.epsilon_dp, epsilon_dp))

    def _admit(self, prepared: PreparedQuery, cal: Calibration, books: _Books) -> None:
        """Raise BudgetExhausted unless every accountant admits eps_dp on top of the ledger."""
        if books.admits(cal.epsilon_dp, prepared.columns, prepared.times):
            return
        status = self._status(books)
        before, after = books.levels(cal.epsilon_dp, prepared.columns, prepared.times)
        cost = after - before
        if prepared.cost is None:
            asked, what = cal.epsilon, f"epsilon {cal.epsilon:g} (epsilon_dp {cal.epsilon_dp:.4g})"
        else:
            asked, what = prepared.cost, f"cost {prepared.cost:g}"
        largest = books.largest_epsilon(prepared.mode, prepared.columns, *_answer(prepared))
        room = max(0.0, status.total - status.spent_ip)
        left = (f"the largest epsilon you can still ask is {largest:.4g} (or a cost of at most "
                f"{room:.4g})" if largest > 0 else "nothing more can be asked: the budget is "
                "used up")
        raise BudgetExhausted(
            f"over budget: this query asks {what}, which would cost {cost:.4g} (the transcript's "
            f"information-privacy level {before:.4g} -> {after:.4g}, over the budget of "
            f"{status.total:g}); {left}; nothing was charged",
            asked=asked, cost=cost, largest_epsilon=largest)

    def _admit_analyst(self, prepared: PreparedQuery, cal: Calibration, analyst: str,
                       accountants: tuple[ScopedAccountant, ...]) -> None:
        """Refuse a revoked analyst, and raise BudgetExhausted unless a registered analyst's cap
        admits eps_dp: the cap bounds the level of their own answers, accounted like the whole
        transcript (the global budget stays the guarantee; analysts may collude)."""
        account = self.ledger.account(analyst)
        if account is None:
            return
        if account.analyst.revoked is not None:
            raise AccessDenied(f"analyst {analyst!r} was revoked by the data owner at "
                               f"{account.analyst.revoked}; nothing was charged")
        cap = account.analyst.cap
        if cap is None:
            return
        books = _cap_books(account, cap, accountants)
        if books.admits(cal.epsilon_dp, prepared.columns, prepared.times):
            return
        before, after = books.levels(cal.epsilon_dp, prepared.columns, prepared.times)
        largest = books.largest_epsilon(prepared.mode, prepared.columns, *_answer(prepared))
        asked = cal.epsilon if prepared.cost is None else prepared.cost
        left = (f"the largest epsilon you can still ask is {largest:.4g}" if largest > 0
                else "nothing more can be asked: your cap is used up")
        raise BudgetExhausted(
            f"over your cap: this query asks epsilon {cal.epsilon:g} (epsilon_dp "
            f"{cal.epsilon_dp:.4g}), which would take the level of your own answers {before:.4g} "
            f"-> {after:.4g}, over your cap of {cap:g} set by the data owner; {left}; nothing was "
            "charged", asked=asked, cost=after - before, largest_epsilon=largest)

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

    def _status(self, books: _Books) -> BudgetStatus:
        """What is spent and left, under the strictest of the accountants; what is left is for
        queries that read no column beyond those already read."""
        spent, nothing = books.spent, frozenset[str]()
        now = [a.at(books.read, books.times) for a in books.accountants]
        scope = self.accountant.scope(books.read)
        return BudgetStatus(
            total=min(a.budget for a in now),
            spent_ip=max(a.level(spent) for a in now),
            spent_dp=spent,
            remaining=max(0.0, min(a.budget - a.level(spent) for a in now)),
            remaining_dp=max(0.0, min(a.dp_budget() - spent for a in now)),
            largest_epsilon=min(books.largest_epsilon(self.policy.mode, nothing, answer)
                                for answer in no_column_answers(self.policy.models,
                                                                tuple(self.policy.tables),
                                                                self.policy.prefer_model)),
            mode=self.policy.mode, eta=scope.eta, eta_from=scope.source,
        )



class _PostProcessingFailed(Exception):
    """Post-processing failed on noisy values inside the charge: the charge rolls back and the
    database halts (internal; never shown)."""


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


def binding_of(policy: Policy) -> LedgerBinding:
    """The ledger binding a policy asks for: its budget, dependence model (with its eta per
    column set), mode, the column that identifies an individual in each table and the parent
    tables' columns."""
    units = json.dumps({name: table.privacy_unit for name, table in policy.tables.items()},
                       sort_keys=True)
    return LedgerBinding(policy.budget_epsilon, policy.k, policy.eta, policy.mode, units,
                         declarations_json(policy.eta_by_columns), models_json(policy.models),
                         shared_json(policy.shared_columns))


@dataclass(frozen=True)
class _Books:
    """The ledger as the accountants see it: DP spending S, the columns U read so far (None:
    every column) and who must admit a charge. A transcript reading U is L(S; k, eta_U)-private."""

    spent: float
    read: frozenset[str] | None
    accountants: tuple[ScopedAccountant, ...]
    # eps_dp per time point of the answers charged per time point; None once an answer that
    # read a column was not (docs/theory.md §14: a chain then no longer covers the transcript)
    times: TimeSpend | None = None

    def after(self, new: float, columns: frozenset[str],
              times: tuple[int, ...] | None) -> _Books:
        """The books once an answer of eps_dp `new` reading `columns` (at the time points
        `times`, for a chain answer) is charged."""
        spend = self.times
        if spend is not None and times is not None:
            kind = SeriesSpend if isinstance(spend, SeriesSpend) or \
                isinstance(times, SeriesPoints) else dict
            spend = kind({t: spend.get(t, 0.0) + (new if t in times else 0.0)
                          for t in set(spend) | set(times)})
        elif columns:
            spend = None
        return _Books(self.spent + new, union(self.read, columns), self.accountants, spend)

    def level(self) -> float:
        """The transcript's level, the strictest count."""
        return max(a.at(self.read, self.times).level(self.spent) for a in self.accountants)

    def levels(self, new: float, columns: frozenset[str],
               times: tuple[int, ...] | None = None) -> tuple[float, float]:
        """The transcript level before, and after an answer of eps_dp `new` reading `columns`,
        the strictest count."""
        return self.level(), self.after(new, columns, times).level()

    def admits(self, new: float, columns: frozenset[str],
               times: tuple[int, ...] | None = None) -> bool:
        """True if every accountant admits an answer of eps_dp `new` reading `columns`."""
        after = self.after(new, columns, times)
        return all(a.at(after.read, after.times).admits(self.spent, new)
                   for a in self.accountants)

    def largest_epsilon(self, mode: str, columns: frozenset[str],
                        answer: AnswerMap | None = None,
                        chain: tuple[float, tuple[int, ...]] | None = None) -> float:
        """The largest epsilon a query reading `columns`, calibrated under `mode` (under a
        declared model: `answer(query model)` its level at an eps_dp), can ask. A chain
        answer (`chain`: the model's cap and the answer's time points) raises the level
        through its time points, not through S alone: its largest eps_dp is found by bisection
        on the level after it (non-decreasing in it), below cap times the tight DP budget."""
        after = union(self.read, columns)
        if answer is not None and chain is not None:
            cap, times = chain
            ceiling = cap * min(inverse(a.budget, a.model(after), "tight") for a in self.accountants)
            budget = min(a.budget for a in self.accountants)
            if isinstance(times, SeriesPoints):  # its level is at least eps_dp / cap (§20)
                ceiling = max(ceiling, cap * budget)
            room = largest_within(lambda x: self.after(x, columns, times).level(), budget, 0.0,
                                  ceiling)
            return 0.0 if room <= 0.0 else min(answer(a.model(columns))(room)
                                                for a in self.accountants)
        return min(a.at(after, self.times).largest_epsilon(
            self.spent, mode, a.model(columns), None if answer is None else answer(a.model(columns)))
            for a in self.accountants)


def _model_fields(prepared: PreparedQuery, epsilon_dp: float) -> dict:
    """What a result or explanation says of the declared model that calibrated it (if any)."""
    declared = prepared.declared
    if declared is None:
        return {}
    checks = declared.checks(epsilon_dp, prepared.times or ())
    return {"model": declared.describe(), "tight_epsilon_dp": prepared.tight_dp,
            "model_checks": tuple(ModelCheck(change, level) for change, level in checks)}


def _answer(prepared: PreparedQuery
            ) -> tuple[AnswerMap | None,
                       tuple[float, tuple[int, ...]] | None]:
    """Under a declared model, the answer's own level at an eps_dp (for a query model) and,
    for a chain, its cap and time points (what `_Books.largest_epsilon` needs)."""
    declared = prepared.declared
    if declared is None:
        return None, None
    times = prepared.times or ()
    chain = None if declared.chain is None else (declared.cap, times)
    return (lambda query: lambda eps_dp: declared.answer_level(eps_dp, query, times)), chain


def _cap_books(account: AnalystAccount, cap: float,
               accountants: tuple[ScopedAccountant, ...]) -> _Books:
    """An analyst's own answers as the accountants see them, with their cap as the budget."""
    return _Books(account.spent_dp, account.read,
                  tuple(replace(a, budget=cap) for a in accountants), account.times)


def _aggregate_infos(plan: QueryPlan, mechanisms: dict[str, Mechanism]) -> tuple[AggregateInfo, ...]:
    infos = []
    for m in plan.measurements:
        mech = mechanisms[m.name]
        column = next((o.name for o in plan.outputs if m.name in o.measurements), m.label)
        infos.append(AggregateInfo(column=column, function=m.label, mechanism=mech.mechanism,
                                   sensitivity=mech.sensitivity, epsilon_dp=mech.epsilon,
                                   scale=mech.scale, ci95_halfwidth=mech.ci95))
    return tuple(infos)


def _check_analyst(analyst) -> str:
    if not isinstance(analyst, str) or not analyst.strip() or len(analyst) > 100 \
            or not analyst.isprintable():
        raise InputError(f"analyst must be a printable name of 1 to 100 characters, got {analyst!r}")
    return analyst.strip()

