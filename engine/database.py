"""PrivateDatabase: the Python API tying parse, plan, calibrate, rewrite, run, charge, noise."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

import duckdb

from calibration import (
    Calibration,
    CalibrationError,
    DependenceModel,
    admits,
    calibrate,
    dp_budget,
    transcript_level,
)

from . import execute, postprocess
from .errors import EngineHalted, InputError, LedgerError
from .gate import SchemaGate
from .ledger import Charge, Ledger, LedgerBinding
from .noise import Mechanism, build_mechanism, release
from .parse import parse_select
from .plan import QueryPlan, build_plan
from .policy import MODES, Policy, load_policy
from .report import Report, build_report
from .result import AggregateInfo, BudgetStatus, Explanation, QueryResult
from .rewrite import rewrite
from .sensitivity import sensitivity

DEFAULT_ANALYST = "analyst"
PLAN_CACHE_SIZE = 256
POST_GATES = 16


@dataclass(frozen=True)
class _Prepared:
    """Everything decided before the data is touched: plan, calibration, noise, SQL."""

    plan: QueryPlan
    calibration: Calibration
    mechanisms: dict[str, Mechanism]
    sql: str  # the rewritten query run on the data
    post_sql: str  # the post-processing query run on the noisy values


class PrivateDatabase:
    """A private table collection: answers SQL with calibrated noise and charges a ledger."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, policy: Policy, ledger: Ledger,
                 analyst: str = DEFAULT_ANALYST) -> None:
        self._conn = conn
        self.policy = policy
        self.ledger = ledger
        self.analyst = _check_analyst(analyst)
        self.model = DependenceModel(policy.k, policy.eta)
        self._post = postprocess.connect()
        self._gate = execute.schema_gate(conn, policy)
        self._post_gates: dict[tuple[tuple[str, str], ...], SchemaGate] = {}
        self._bounded_tables: set[str] = set()
        self._halted = False
        self._plans: dict[str, tuple[QueryPlan, str, str]] = {}
        self._post_checked: set[str] = set()

    @classmethod
    def connect(cls, db: str | Path, policy: str | Path | Policy, ledger: str | Path,
                analyst: str = DEFAULT_ANALYST) -> PrivateDatabase:
        """Open the data (DuckDB, CSV or Parquet) under a policy, with a budget ledger."""
        policy = policy if isinstance(policy, Policy) else load_policy(policy)
        conn = execute.open_data(db, policy)
        try:
            book = Ledger(ledger, LedgerBinding(policy.budget_epsilon, policy.k, policy.eta))
        except BaseException:
            conn.close()
            raise
        return cls(conn, policy, book, analyst)

    def __enter__(self) -> PrivateDatabase:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for gate in self._post_gates.values():
            gate.close()
        self._gate.close()
        self._post.close()
        self._conn.close()
        self.ledger.close()

    def budget(self) -> BudgetStatus:
        """What the ledger has spent and what is left."""
        return self._status(self.ledger.spent_dp())

    def report(self, analyst: str | None = None) -> Report:
        """What the ledger has spent, by whom, and what the transcript guarantees."""
        return build_report(self.ledger.path, policy=self.policy, analyst=analyst)

    def explain(self, sql: str, epsilon: float, mode: str | None = None) -> Explanation:
        """The plan, rewritten SQL, sensitivities, epsilon_dp and expected error; spends nothing.

        Reads no data: the SQL was bound on the schema-only gate, so every word of the
        explanation is a function of the query text, the policy and the ledger."""
        prepared = self._prepare(sql, epsilon, mode)
        plan, cal = prepared.plan, prepared.calibration
        spent = self.ledger.spent_dp()
        return Explanation(
            sql=sql, table=plan.table.name, privacy_unit=plan.table.privacy_unit,
            max_rows_per_unit=plan.table.max_rows_per_unit,
            group_by=tuple(c.name for c in plan.group_by),
            groups=plan.group_count if plan.group_by else 1,
            rewritten_sql=prepared.sql, epsilon=cal.epsilon, epsilon_dp=cal.epsilon_dp,
            mode=cal.mode, justification=cal.justification, k=self.policy.k, eta=self.policy.eta,
            aggregates=_aggregate_infos(plan, prepared.mechanisms),
            budget=self._status(spent),
            level_before=transcript_level(spent, self.model),
            level_after=transcript_level(spent + cal.epsilon_dp, self.model),
            admissible=admits(spent, cal.epsilon_dp, self.policy.budget_epsilon, self.model),
        )

    def query(self, sql: str, epsilon: float, mode: str | None = None,
              analyst: str | None = None) -> QueryResult:
        """Answer `sql` with noise keeping it epsilon-information private; charge the ledger."""
        analyst = self.analyst if analyst is None else _check_analyst(analyst)
        prepared = self._prepare(sql, epsilon, mode)
        plan, cal = prepared.plan, prepared.calibration
        try:
            self._bound(plan)
            exact = execute.run(self._conn, prepared.sql, len(plan.group_by))
        except execute.DataFailure as failure:
            self._halt(f"{failure} (analyst {analyst!r}, query {sql!r})")
        infos = _aggregate_infos(plan, prepared.mechanisms)
        charge = Charge(analyst, sql, cal.epsilon, cal.epsilon_dp, cal.mode, self.policy.k,
                        self.policy.eta, tuple(_ledger_entry(a) for a in infos))
        budget = self.policy.budget_epsilon
        spent = self.ledger.charge(
            charge,
            admits=lambda used, new: admits(used, new, budget, self.model),
            refusal=lambda used: self._refusal(cal, used),
        )
        noisy = {name: release(mech, exact.values[name])
                 for name, mech in prepared.mechanisms.items()}
        frame = postprocess.noisy_frame(plan, exact.keys, noisy, prepared.mechanisms)
        answer, halfwidths = postprocess.finish(self._post, plan, prepared.post_sql, frame)
        return QueryResult(
            df=answer, ci95=halfwidths, sql=sql, epsilon=cal.epsilon, epsilon_dp=cal.epsilon_dp,
            mode=cal.mode, k=self.policy.k, eta=self.policy.eta, aggregates=infos,
            budget=self._status(spent + cal.epsilon_dp),
            level_before=transcript_level(spent, self.model),
            level_after=transcript_level(spent + cal.epsilon_dp, self.model),
        )

    def _prepare(self, sql: str, epsilon: float, mode: str | None) -> _Prepared:
        """Validate and plan; everything here is independent of the data's values."""
        if self._halted or self.ledger.halted() is not None:
            raise EngineHalted(_HALTED)
        epsilon = _check_epsilon(epsilon)
        mode = self.policy.mode if mode is None else mode
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        plan, rewritten, post_sql = self._plan(sql)
        try:
            cal = calibrate(epsilon, self.model, mode)
        except CalibrationError as exc:
            raise InputError(str(exc)) from None
        share = cal.epsilon_dp / len(plan.measurements)
        mechanisms = {m.name: build_mechanism(m, sensitivity(m, plan), share)
                      for m in plan.measurements}
        self._check_post_processing(plan, post_sql, mechanisms)
        return _Prepared(plan, cal, mechanisms, rewritten, post_sql)

    def _plan(self, sql: str) -> tuple[QueryPlan, str, str]:
        """Plan, rewritten SQL and post-processing SQL of a query text, both passed by the gate.
        They depend only on the text and the policy, so repeated texts reuse them, like a
        prepared statement."""
        cached = self._plans.get(sql)
        if cached is None:
            plan = build_plan(parse_select(sql), self.policy, sql)
            rewritten, post_sql = rewrite(plan), postprocess.query_sql(plan)
            self._gate.check(rewritten)
            self._post_gate(plan).check(post_sql)
            cached = (plan, rewritten, post_sql)
            if len(self._plans) >= PLAN_CACHE_SIZE:
                self._plans.pop(next(iter(self._plans)))
            self._plans[sql] = cached
        return cached

    def _post_gate(self, plan: QueryPlan) -> SchemaGate:
        """The gate for post-processing SQL over the plan's table of noisy values, one per
        distinct table schema (a few recent ones are kept open)."""
        columns = tuple(postprocess.noisy_columns(plan))
        gate = self._post_gates.pop(columns, None)
        if gate is None:
            gate = SchemaGate({("noisy",): list(columns)})
            if len(self._post_gates) >= POST_GATES:
                self._post_gates.pop(next(iter(self._post_gates))).close()
        self._post_gates[columns] = gate
        return gate

    def _bound(self, plan: QueryPlan) -> None:
        """Make the bounded copy of the plan's table on its first query (never for explain):
        the data is read-only, so the copy stays valid for the connection."""
        table = plan.table
        if table.privacy_unit is not None and table.name not in self._bounded_tables:
            execute.bound_units(self._conn, table, self.ledger.hash_key)
            self._bounded_tables.add(table.name)

    def _halt(self, reason: str) -> None:
        """SQL that passed the gate failed on the data: record it durably and refuse this and
        every later query. Never a per-query refusal, which would answer a data-dependent
        question for free; the one bit a halt reveals is revealed once, and the owner sees it.
        The output is the same even if the ledger cannot record it (this process stays halted)."""
        self._halted = True
        with contextlib.suppress(LedgerError):
            self.ledger.halt(reason)
        raise EngineHalted(_HALTED)

    def _check_post_processing(self, plan: QueryPlan, post_sql: str,
                               mechanisms: dict[str, Mechanism]) -> None:
        """Run the post-processing on zeros before anything is charged, so that it cannot fail
        after the charge; a query that passed once is not checked again."""
        if post_sql in self._post_checked:
            return
        zeros = {m.name: [0] * plan.group_count if plan.group_by else [0]
                 for m in plan.measurements}
        frame = postprocess.noisy_frame(plan, _all_keys(plan), zeros, mechanisms)
        try:
            postprocess.finish(self._post, plan, post_sql, frame)
        except duckdb.Error as exc:
            raise InputError(
                f"HAVING/ORDER BY/SELECT expression cannot be evaluated: {str(exc).splitlines()[0]}"
            ) from None
        self._post_checked.add(post_sql)

    def _status(self, spent: float) -> BudgetStatus:
        total = self.policy.budget_epsilon
        level = transcript_level(spent, self.model)
        return BudgetStatus(total=total, spent_ip=level, spent_dp=spent,
                            remaining=max(0.0, total - level),
                            remaining_dp=max(0.0, dp_budget(total, self.model) - spent))

    def _refusal(self, cal: Calibration, spent: float) -> str:
        status = self._status(spent)
        after = transcript_level(spent + cal.epsilon_dp, self.model)
        return (
            f"budget exhausted: this query asks epsilon {cal.epsilon:g} (epsilon_dp "
            f"{cal.epsilon_dp:.4g}) and would take the transcript's information-privacy level "
            f"from {status.spent_ip:.4g} to {after:.4g}, over the budget of {status.total:g}; "
            f"spent {status.spent_ip:.4g}, remaining {status.remaining:.4g} "
            f"(epsilon_dp {status.remaining_dp:.4g}); nothing was charged"
        )


_HALTED = ("internal error: a query that passed every check failed on the data, so this database "
           "is halted and refuses every query until its owner has inspected it (the ledger "
           "records why); nothing was charged")


def _all_keys(plan: QueryPlan) -> list[tuple]:
    keys: list[tuple] = [()]
    for col in plan.group_by:
        keys = [k + (v,) for k in keys for v in col.group_values]
    return keys if plan.group_by else []


def _aggregate_infos(plan: QueryPlan, mechanisms: dict[str, Mechanism]) -> tuple:
    infos = []
    for m in plan.measurements:
        mech = mechanisms[m.name]
        column = next((o.name for o in plan.outputs if m.name in o.measurements), m.label)
        infos.append(AggregateInfo(column=column, function=m.label, mechanism=mech.mechanism,
                                   sensitivity=mech.sensitivity, epsilon_dp=mech.epsilon,
                                   scale=mech.scale, ci95_halfwidth=mech.ci95))
    return tuple(infos)


def _ledger_entry(info: AggregateInfo) -> dict:
    return {"column": info.column, "function": info.function, "mechanism": info.mechanism,
            "sensitivity": info.sensitivity, "epsilon_dp": info.epsilon_dp, "scale": info.scale}


def _check_epsilon(epsilon) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) \
            or not math.isfinite(epsilon) or epsilon <= 0:
        raise InputError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


def _check_analyst(analyst) -> str:
    if not isinstance(analyst, str) or not analyst.strip() or len(analyst) > 100 \
            or not analyst.isprintable():
        raise InputError(f"analyst must be a printable name of 1 to 100 characters, got {analyst!r}")
    return analyst.strip()

