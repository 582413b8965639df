"""Running a workload on a database: plan, price and admit it as one answer, run the exact
counts and the statements answered alone, then noise, least squares and intervals inside the
one charge (docs/theory.md §18). `PrivateDatabase.query_many` and `explain_many` call it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import NoReturn, Protocol

import numpy as np

from ..calibration import MODEL_MODE, DependenceModel
from . import postprocess
from .accounting.analysts import check_analyst
from .accounting.bookkeeper import Bookkeeper, Price
from .accounting.ledger import Charge, Ledger, LedgerState
from .accuracy import AccuracyPlan
from .backends import Backend, DataFailure
from .errors import EngineHalted, InputError
from .noise import Mechanism, build_mechanism, release
from .policy import Policy
from .prepare import PreparedQuery, Preparer, aggregate_infos
from .release import PostProcessingFailed, release_answer
from .result import AggregateInfo, AnswerCost
from .rewrite import copies_to_bound, read_columns
from .workload import (
    Member,
    WorkloadPlan,
    answer_frame,
    check_statements,
    plan_workload,
)
from .workload_result import (
    ADMITTED_LIMIT,
    QueryError,
    WorkloadAnswer,
    WorkloadExplanation,
    WorkloadResult,
)


class Database(Protocol):
    """What a workload runs on (`database.PrivateDatabase` is one): its policy, ledger,
    bookkeeper, preparer, data and post-processing connections, and its halt."""

    analyst: str
    policy: Policy
    ledger: Ledger
    bookkeeper: Bookkeeper
    _backend: Backend
    _preparer: Preparer
    _post: postprocess.Connection
    _halted: bool

    def _halt(self, reason: str) -> NoReturn: ...

    def epsilon_for(self, sql: str | list[str], ci95: float,
                    mode: str | None = None) -> AccuracyPlan: ...


def query_many(db: Database, statements: list[str], epsilon: float | None = None,
               mode: str | None = None, analyst: str | None = None,
               cost: float | None = None) -> WorkloadResult:
    """Answer a workload of statements together at one epsilon (or cost) for the whole set,
    charged once: linear counts over one table's public domain are measured by one strategy
    and answered by least squares; the others are answered alone within the same split
    (docs/theory.md §18)."""
    analyst = db.analyst if analyst is None else check_analyst(analyst)
    work, combined = _plan_workload(db, statements, epsilon, mode, cost)
    db.bookkeeper.admit(combined, db.bookkeeper.books(), analyst)
    text = ";\n".join(statements)
    try:
        exact_cells = []
        for group in work.groups:
            db._backend.bound(group.contingency.plan.table, db.ledger.hash_key,
                              read_columns(group.contingency.plan))
            exact_cells.append(db._backend.run(group.contingency.sql,
                                               len(group.contingency.plan.group_by)))
        exact_alone = {}
        for member in work.alone:
            plan = member.prepared.plan
            for table, columns in copies_to_bound(plan):
                db._backend.bound(table, db.ledger.hash_key, columns)
            exact_alone[member.sql] = db._backend.run(member.prepared.sql, len(plan.group_by))
    except DataFailure as failure:
        db._halt(f"{failure} (analyst {analyst!r}, workload {text!r})")

    def settle(state: LedgerState) -> tuple[Charge, WorkloadResult]:
        price = db.bookkeeper.admit(combined, db.bookkeeper.books(state), analyst)
        cal = price.calibration
        try:
            answers, infos = _workload_answers(db, work, cal.epsilon_dp, exact_cells,
                                                    exact_alone)
            result = WorkloadResult(
                answers=answers, strategy=_strategy_text(work),
                sensitivity=work.sensitivity, epsilon=cal.epsilon, epsilon_dp=cal.epsilon_dp, mode=cal.mode,
                k=db.policy.k, eta=combined.scope.eta, budget=db.bookkeeper.status(price.charged),
                level_before=price.level_before, level_after=price.level_after, cost=price.cost,
                columns_read=tuple(sorted(combined.columns)))
            stored_answer = result.to_dict()
        except Exception as exc:
            raise PostProcessingFailed from exc
        cost_record = AnswerCost(cal.epsilon, cal.epsilon_dp, cal.mode, db.policy.k,
                                 combined.scope.eta)
        return Charge(analyst, text, cost_record, infos, stored_answer, combined.columns,
                      None), result

    try:
        ident, result = db.ledger.charge(settle)
    except PostProcessingFailed:
        db._halt(f"post-processing failed on noisy values (analyst {analyst!r}, "
                   f"workload {text!r})")
    return replace(result, id=ident)

def explain_many(db: Database, statements: list[str], epsilon: float | None = None,
                 mode: str | None = None, cost: float | None = None) -> WorkloadExplanation:
    """The workload's strategy, each statement's expected per-cell error against asking
    the statements separately at epsilon / (their number), and the cost; reads no data."""
    work, combined = _plan_workload(db, statements, epsilon, mode, cost)
    price = db.bookkeeper.price(combined, db.bookkeeper.books())
    cal = price.calibration
    share = cal.epsilon_dp / len(work.members)
    errors = []
    for member in work.members:
        if member.matrix is not None:
            group = work.groups[member.group]
            mine = member.unit_rmse * group.sensitivity / (share * group.size)
        else:
            mine = _rmse(db._preparer.mechanisms(member.prepared.plan, share))
        alone = db._preparer.prepare(member.sql, cal.epsilon / len(work.members),
                                       combined.mode, None)
        errors.append(QueryError(member.sql, _answered(member), mine,
                                 _rmse(alone.mechanisms)))
    return WorkloadExplanation(
        strategy=_strategy_text(work), candidates=_candidates(work),
        sensitivity=work.sensitivity, errors=tuple(errors), epsilon=cal.epsilon,
        epsilon_dp=cal.epsilon_dp, mode=cal.mode,
        k=db.policy.k, eta=combined.scope.eta, level_before=price.level_before,
        level_after=price.level_after, cost=price.cost, admissible=price.admissible,
        admitted=admitted(db, combined, price))


def admitted(db: Database, combined: PreparedQuery, price: Price) -> int:
    """How many workloads like `combined` the global budget admits in a row from `price`'s
    books: each priced, as admission prices it, on the books the ones before it leave (a
    function of the ledger's books and the text only), counted up to ADMITTED_LIMIT."""
    count = 0
    while price.admissible and count < ADMITTED_LIMIT:
        count += 1
        price = db.bookkeeper.price(combined, price.charged)
    return count

def _plan_workload(db: Database, statements: list[str], epsilon: float | None, mode: str | None,
                   cost: float | None) -> tuple[WorkloadPlan, PreparedQuery]:
    """The workload's plan, and one PreparedQuery standing for its single charge: calibrated
    for the union of the columns every statement reads (their eta), under the asked mode."""
    statements = check_statements(statements)
    if db._halted or db.ledger.halted() is not None:
        raise EngineHalted
    if mode == MODEL_MODE:
        raise InputError("a workload is calibrated under the policy's dependence map, not a "
                         "declared model; ask without mode model")
    mode = db.policy.mode if mode is None else mode
    work = plan_workload(db._preparer, statements, epsilon, mode, cost)
    base = work.contingency if work.contingency is not None else work.members[0].prepared
    columns = frozenset().union(*(m.prepared.columns for m in work.members))
    scope = db.policy.eta_for(columns)
    model = DependenceModel(db.policy.k, scope.eta)
    cal = base.calibration if cost is not None else \
        db._preparer.calibrate(base.calibration.epsilon, mode, model)
    return work, replace(base, calibration=cal, columns=columns, scope=scope, model=model,
                         declared=None, times=None, tight_dp=None, mode=mode)

def _workload_answers(db: Database, work: WorkloadPlan, epsilon_dp: float, exact_cells: list,
                      exact_alone: dict) -> tuple[tuple[WorkloadAnswer, ...],
                                                  tuple[AggregateInfo, ...]]:
    """Noise, least squares and intervals: every statement's answer from one split of
    epsilon_dp (a 1 / n share per statement; each group's strategy gets its statements')."""
    share = epsilon_dp / len(work.members)
    infos: list[AggregateInfo] = []
    estimates: dict[str, np.ndarray] = {}
    scales: list[float] = []
    for group, exact in zip(work.groups, exact_cells, strict=True):
        (measurement,) = group.contingency.plan.measurements
        x = np.asarray(exact.values[measurement.name], dtype=float)
        mech = build_mechanism(measurement, group.sensitivity, share * group.size,
                               integer=False)
        scales.append(mech.scale)
        y = np.asarray(release(mech, list(group.solved.measure(x))), dtype=float)
        for member in work.measured:
            if member.group == len(scales) - 1:
                assert member.matrix is not None
                estimates[member.sql] = group.solved.estimate(y, member.matrix)
        infos.append(AggregateInfo(
            column="workload", function=f"{group.solved.name} of {group.label}",
            mechanism=mech.mechanism, sensitivity=mech.sensitivity, epsilon_dp=mech.epsilon,
            scale=mech.scale, ci95_halfwidth=mech.ci95))
    groups = tuple(infos)
    answers = []
    for member in work.members:
        plan = member.prepared.plan
        if member.matrix is not None:
            df, ci, cs = answer_frame(member, estimates[member.sql], scales[member.group])
            answers.append(WorkloadAnswer(member.sql, df, ci, cs, _answered(member),
                                          share, (groups[member.group],)))
            continue
        mechanisms = db._preparer.mechanisms(plan, share)
        exact = exact_alone[member.sql]
        finished = release_answer(db._post, plan, member.prepared.post_sql, exact, mechanisms)
        own = aggregate_infos(plan, mechanisms)
        infos += own
        answer, ci95, simultaneous = finished
        answers.append(WorkloadAnswer(member.sql, answer.frame(), ci95.frame(), simultaneous.frame(),
                                      _answered(member), share, own))
    return tuple(answers), tuple(infos)


def _strategy_text(work: WorkloadPlan) -> str:
    """The workload's strategies in words, one per group with its share of the statements'
    split and its sensitivity ("" when every statement is answered alone)."""
    n = len(work.members)
    return "; ".join(
        f"{g.label}: {g.solved.name}: {g.solved.detail} (L1 norm {g.solved.l1:.4g}, "
        f"sensitivity {g.sensitivity:.4g}, {g.size}/{n} of epsilon_dp)"
        if [g.label for g in work.groups] != ["COUNT(*)"] else
        f"{g.solved.name}: {g.solved.detail} (L1 norm {g.solved.l1:.4g})"
        for g in work.groups)


def _candidates(work: WorkloadPlan) -> tuple[tuple[str, float], ...]:
    """Every group's candidate strategies and their per-cell RMSE at scale 1, named after
    their group when the workload has SUMs."""
    named = [g.label for g in work.groups] != ["COUNT(*)"]
    return tuple((f"{g.label} {name}" if named else name, rmse)
                 for g in work.groups for name, rmse in g.compared)


def _answered(member: Member) -> str:
    return ("least squares from the workload's strategy" if member.matrix is not None
            else f"alone: {member.alone}")


def _rmse(mechanisms: dict[str, Mechanism]) -> float:
    """Root mean squared error of one noisy value of a statement's first measurement."""
    mech = next(iter(mechanisms.values()))
    if mech.mechanism == "discrete_laplace":
        r = math.exp(-1.0 / mech.scale)
        return math.sqrt(2.0 * r) / (1.0 - r)
    return math.sqrt(2.0) * mech.scale




def workload_halfwidth(db: Database, statements: list[str],
                       mode: str | None) -> Callable[[float], float]:
    """The widest 95% half-width of a noisy cell of the workload at an epsilon (under this
    connection's policy): non-increasing in epsilon, for `epsilon_for`'s bisection."""
    work, combined = _plan_workload(db, statements, 1.0, mode, None)
    n = len(work.members)
    widest = [max(m.unit_halfwidths) * work.groups[m.group].sensitivity / work.groups[m.group].size
              for m in work.measured]

    def halfwidth(epsilon: float) -> float:
        share = db._preparer.calibrate(epsilon, combined.mode, combined.model).epsilon_dp / n
        out = [w / share for w in widest]
        out += [mech.ci95 for member in work.alone
                for mech in db._preparer.mechanisms(member.prepared.plan, share).values()]
        return max(out)

    return halfwidth


def accuracy_epsilon(db: Database, statements: list[str], accuracy: float,
                     mode: str | None, epsilon: float | None, cost: float | None) -> float:
    """The epsilon `accuracy=` asks for a workload (refused beside an epsilon or a cost)."""
    if epsilon is not None or cost is not None:
        raise InputError("ask by accuracy, epsilon or cost: exactly one of them; got "
                         f"accuracy={accuracy!r}, epsilon={epsilon!r}, cost={cost!r}")
    return db.epsilon_for(list(statements), accuracy, mode).epsilon
