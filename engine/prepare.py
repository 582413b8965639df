"""Everything decided about a query before the data is touched: plan, SQL, calibration, noise.

`Preparer.prepare` is a function of the query text, the asked epsilon (or cost) and mode, the
policy and the data's schema: it reads no data and spends nothing, and `explain` shows what it
decides. Repeated texts reuse their plan and checked SQL, like a prepared statement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import duckdb
from sqlglot import exp

from ..calibration import (
    MODE_CHOICES,
    MODEL_MODE,
    Calibration,
    CalibrationError,
    DependenceModel,
    require_epsilon,
)
from ..calibration.declared import DeclaredModel
from . import postprocess
from .accounting.bookkeeper import calibrate_by_model, calibrate_no_looser
from .backends import Backend
from .backends.duckdb_gate import SchemaGate
from .errors import InputError
from .noise import Mechanism, build_mechanism
from .plan import QueryPlan
from .policy import Policy, ScopedEta
from .result import AggregateInfo
from .rewrite import read_columns, rewrite
from .sensitivity import sensitivity
from .sql.bind import build_plan, check_size, series_points, time_points
from .sql.columns import columns_read
from .sql.flatten import flatten
from .sql.parse import parse_select
from .sql.planning_limits import Deadline, check_text, check_width

PLAN_CACHE_SIZE = 256
MECHANISM_CACHE_SIZE = 256
POST_GATES = 16


@dataclass(frozen=True)
class PreparedQuery:
    """Everything decided before the data is touched: plan, calibration, noise, SQL."""

    plan: QueryPlan
    calibration: Calibration
    mechanisms: dict[str, Mechanism]
    sql: str  # the rewritten query run on the data
    post_sql: str  # the post-processing query run on the noisy values
    mode: str  # the mode the analyst asked for (the policy's by default)
    cost: float | None  # when asking by cost: the most the transcript level may rise
    columns: frozenset[str]  # the policy columns the exact query reads (table.column)
    scope: ScopedEta  # the eta of those columns under the policy, and its declaration
    model: DependenceModel  # what the answer is calibrated under: k and the columns' eta
    declared: DeclaredModel | None = None  # the declared model that calibrated it (mode model)
    times: tuple[int, ...] | None = None  # a chain answer's time points (charged per time point)
    tight_dp: float | None = None  # the tight map's eps_dp, when a declared model calibrated it

class Preparer:
    """Prepares queries for one policy and backend; its caches hold only text-derived values."""

    def __init__(self, policy: Policy, backend: Backend, post: postprocess.Post) -> None:
        self.policy = policy
        self._backend = backend
        self._post = post
        self._plans: dict[str, tuple[QueryPlan, str, str, frozenset[str]]] = {}
        self._post_gates: dict[tuple[tuple[str, str], ...], SchemaGate] = {}
        self._post_checked: set[str] = set()
        self._mechanisms: dict[tuple[int, float], tuple[QueryPlan, dict[str, Mechanism]]] = {}

    def prepare(self, sql: str, epsilon: float | None, mode: str | None,
                cost: float | None = None) -> PreparedQuery:
        """Validate and plan; everything here is independent of the data's values. Planning
        longer than the policy's limits.plan_seconds is refused between its steps."""
        deadline = Deadline(self.policy.limits)
        if (epsilon is None) == (cost is None):
            given = "neither was given" if epsilon is None else \
                f"both were given (epsilon {epsilon!r}, cost {cost!r})"
            raise InputError("ask either an epsilon (the answer's level, e.g. epsilon=0.5; "
                             "--epsilon 0.5 on the command line) or a cost (how much the "
                             f"transcript level may rise), exactly one of them; {given}")
        target = check_level("epsilon" if cost is None else "cost",
                             epsilon if cost is None else cost)
        wants_model = mode == MODEL_MODE or (mode is None and self.policy.prefer_model)
        mode = self.policy.mode if mode is None else mode
        if mode not in MODE_CHOICES + (MODEL_MODE,):
            raise InputError(f"mode must be one of {', '.join(MODE_CHOICES)} or {MODEL_MODE}, "
                             f"got {mode!r}")
        plan, rewritten, post_sql, columns = self._plan(sql, deadline)
        scope = self.policy.eta_for(columns)
        model = DependenceModel(self.policy.k, scope.eta)
        declared, times, why = self._covering(plan, columns)
        if cost is not None and declared is not None:
            declared, times, why = None, None, "a cost was asked (a model calibrates an epsilon)"
        tight_dp = None
        if wants_model and declared is not None:
            mode = MODEL_MODE
            cal, tight_dp = calibrate_by_model(declared, target, model, times or ())
        elif mode == MODEL_MODE:
            raise InputError(f"mode model cannot calibrate this query: {why}; ask mode "
                             f"{', '.join(m for m in MODE_CHOICES if m != 'auto')} or auto")
        else:
            cal = self.calibrate(target, mode, model)
            if wants_model:
                cal = replace(cal, justification=f"{cal.justification}; no declared model: {why}")
        deadline.check()
        mechanisms = self.mechanisms(plan, cal.epsilon_dp)
        deadline.check()
        self._check_post_processing(plan, post_sql, mechanisms)
        deadline.check()
        return PreparedQuery(plan, cal, mechanisms, rewritten, post_sql, mode,
                             None if cost is None else target, columns, scope, model,
                             declared if mode == MODEL_MODE else None,
                             times if declared is not None else None, tight_dp)

    def _covering(self, plan: QueryPlan, columns: frozenset[str]
                  ) -> tuple[DeclaredModel | None, tuple[int, ...] | None, str]:
        """The declared model covering a query (with a chain answer's time points), or None
        and why not: a function of the query text and the policy only."""
        if plan.inner is not None:
            return None, None, "it aggregates per-unit values (a two-level query)"
        if plan.unnest is not None:
            return None, None, f"it reads the items of the list column {plan.unnest.column}"
        models = [m for m in self.policy.models if m.table == plan.table.name]
        if not models:
            return None, None, f"no model is declared for table {plan.table.name}"
        plain = ""  # why a Gaussian household model reading the same columns does not cover it
        for declared in models:
            if not declared.covers(columns):
                continue
            if declared.gaussian is not None:
                if not plain_sum(plan, declared.column):
                    plain = (f"it is not SUM or AVG of {declared.table}.{declared.column} over "
                             f"the whole table, which is all the {declared.describe()} covers")
                    continue
                return declared, (), ""  # charged at no time point: the books see a plain SUM
            if declared.chain is None:
                return declared, None, ""
            assert declared.time is not None
            times = time_points(plan, declared.time, declared.first, declared.last)
            if times is None and columns:
                times = series_points(plan, declared.time, declared.first, declared.last)
            if times is None:
                return None, None, ("it reads no time point of the chain" if not columns else
                                    "it joins another table")
            return declared, times, ""
        if plain:
            return None, None, plain
        return None, None, (f"it reads {', '.join(sorted(columns))}, beyond the columns of "
                            f"{' or '.join(sorted(m.describe() for m in models))}")

    def calibrate(self, epsilon: float, mode: str, model: DependenceModel) -> Calibration:
        """Calibrate under `mode` and `model`, a mode never looser than the policy's."""
        return calibrate_no_looser(epsilon, mode, model, self.policy.mode)

    def mechanisms(self, plan: QueryPlan, epsilon_dp: float) -> dict[str, Mechanism]:
        """The noise of each measurement, splitting epsilon_dp equally between them. Built
        once per (plan, epsilon_dp): OpenDP measurements are reusable, each call draws fresh
        noise, and building them (with the check of OpenDP's privacy map) dominates a small
        query's cost."""
        key = (id(plan), epsilon_dp)
        cached = self._mechanisms.get(key)
        if cached is not None and cached[0] is plan:
            return cached[1]
        share = epsilon_dp / len(plan.measurements)
        built = {m.name: build_mechanism(m, sensitivity(m, plan), share) for m in plan.measurements}
        if len(self._mechanisms) >= MECHANISM_CACHE_SIZE:
            self._mechanisms.pop(next(iter(self._mechanisms)))
        self._mechanisms[key] = (plan, built)  # the plan is kept, so its id is not reused
        return built

    def _plan(self, sql: str, deadline: Deadline) -> tuple[QueryPlan, str, str, frozenset[str]]:
        """Plan, rewritten SQL and post-processing SQL of a query text, both passed by the gate,
        and the columns it reads. They depend only on the text and the policy, so repeated
        texts reuse them, like a prepared statement. The size limits are checked before the
        step whose cost they bound, the time limit after each step."""
        cached = self._plans.get(sql)
        if cached is None:
            limits = self.policy.limits
            check_text(sql, limits)
            parsed = parse_select(sql)
            deadline.check()
            flat = flatten(parsed, self.policy)
            deadline.check()
            plan = build_plan(flat, self.policy, sql, self._backend.data_columns(),
                              self._backend.public_rows)
            if flat is not parsed:
                plan = replace(plan, flattened_sql=flat.sql(dialect="duckdb"))
            check_size(plan, limits)
            check_width(plan, limits)
            deadline.check()
            rewritten = self._backend.render(rewrite(plan))
            deadline.check()
            post_sql = postprocess.query_sql(plan)
            self._backend.check(rewritten)
            deadline.check()
            if not postprocess.answered_directly(plan):
                # A direct answer runs no post-processing SQL (`release_answer`), so there is
                # nothing to gate (nor to run on zeros, `_check_post_processing`): no in-memory
                # DuckDB is opened for it (issue 26, a one-shot query process).
                self._post_gate(plan).check(post_sql)
            cached = (plan, rewritten, post_sql, _columns_read(plan))
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

    def _check_post_processing(self, plan: QueryPlan, post_sql: str,
                               mechanisms: dict[str, Mechanism]) -> None:
        """Run the post-processing on zeros before anything is charged, so that it cannot fail
        after the charge; a query that passed once, or whose answer is built without the
        post-processing query (`postprocess.answered_directly`), is not checked."""
        if post_sql in self._post_checked or postprocess.answered_directly(plan):
            return
        zeros = {cell: [0] * plan.group_count if plan.group_by else [0]
                 for m in plan.measurements for cell in m.cells}
        frame = postprocess.noisy_frame(plan, _all_keys(plan), zeros, mechanisms)
        try:
            postprocess.finish(self._post, plan, post_sql, frame)
        except duckdb.Error as exc:
            raise InputError(
                f"HAVING/ORDER BY/SELECT expression cannot be evaluated: {str(exc).splitlines()[0]}"
            ) from None
        self._post_checked.add(post_sql)

    def close(self) -> None:
        for gate in self._post_gates.values():
            gate.close()


def plain_sum(plan: QueryPlan, column: str) -> bool:
    """Whether every value `plan` releases is a SUM of `column` itself over the whole table or a
    count of its rows (COUNT(*), or COUNT of the column: the model gives every row a value), as
    AVG(column) is: what a Gaussian household model covers (docs/theory.md §21)."""
    if plan.where is not None or plan.group_by or plan.join is not None:
        return False
    spec = plan.table.columns[column]
    for m in plan.measurements:
        operand = m.operand
        if operand is None and m.kind.name == "COUNT":
            continue
        if operand is None or m.kind.name not in ("SUM", "COUNT") \
                or not isinstance(operand.value, exp.Column) or operand.value.name != column \
                or [c.name for c in operand.columns] != [column] \
                or (operand.lower, operand.upper) != spec.bounds:
            return False
    return bool(plan.measurements)


def aggregate_infos(plan: QueryPlan, mechanisms: dict[str, Mechanism]
                    ) -> tuple[AggregateInfo, ...]:
    """What a result says of each measurement's noise: its column, function, mechanism,
    sensitivity, eps_dp, scale and 95% half-width."""
    infos = []
    for m in plan.measurements:
        mech = mechanisms[m.name]
        column = next((o.name for o in plan.outputs if m.name in o.measurements), m.label)
        infos.append(AggregateInfo(column=column, function=m.label, mechanism=mech.mechanism,
                                   sensitivity=mech.sensitivity, epsilon_dp=mech.epsilon,
                                   scale=mech.scale, ci95_halfwidth=mech.ci95))
    return tuple(infos)


def _all_keys(plan: QueryPlan) -> list[tuple]:
    if plan.key_rows is not None:
        return list(plan.key_rows)
    keys: list[tuple] = [()]
    for col in plan.group_by:
        keys = [k + (v,) for k in keys for v in col.keys]
    return keys if plan.group_by else []


def check_level(name: str, value) -> float:
    """An epsilon or cost asked of one answer, inside the accepted range (docs/theory.md)."""
    try:
        return require_epsilon(name, value)
    except CalibrationError as exc:
        raise InputError(str(exc), **{k: v for k, v in vars(exc).items()
                                      if k in ("value", "lower", "upper")}) from exc


def _columns_read(plan: QueryPlan) -> frozenset[str]:
    """The qualified columns whose eta calibrates `plan`: `columns_read`'s, except that a table
    with a privacy unit is read through its bounded copy of exactly the columns the query
    reads, kept by the rule over those alone (docs/theory.md §28), so only they count."""
    every = columns_read(plan)
    table = plan.table
    if table.privacy_unit is None:
        return every
    own = frozenset(f"{table.name}.{name}" for name in table.columns)
    return (every - own) | frozenset(f"{table.name}.{name}" for name in read_columns(plan))
