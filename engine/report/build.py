"""A budget report built from a ledger: one read-only snapshot accounted for under the ledger's
own binding (k, eta, mode, budget), checked against a given policy and filtered to an analyst.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path

from ...calibration import mutual_information_bound
from ...calibration.declared import SeriesPoints, SeriesSpend
from ..accounting.transcript import AnswerMap, ScopedAccountant, TimeSpend, no_column_answers, union
from ..errors import InputError, LedgerError
from ..policy import Policy, declarations_json
from .ledger import LedgerAnswer, LedgerSnapshot, read_ledger
from .values import AnalystTotals, Report, ReportTotals

AGREEMENT = 1e-9
"""Relative gap below which the sum of epsilon asked and the transcript level count as equal."""


def build_report(ledger: str | Path, policy: Policy | None = None,
                 analyst: str | None = None) -> Report:
    """Read `ledger` in one transaction and account for it under its bound (k, eta) and budget.

    A given `policy` must match the ledger's binding: spending recorded under one
    dependence model cannot be re-interpreted under another.
    """
    snapshot = read_ledger(ledger)
    if policy is not None:
        _check_policy(snapshot, policy)
    if analyst is not None:
        analyst = _check_analyst(analyst)
    scoped = snapshot.binding.accountant()
    answers = snapshot.answers
    cumulative = tuple(accumulate(a.cost.epsilon_dp for a in answers))
    return Report(
        ledger=str(snapshot.path),
        generated=datetime.now(UTC),
        analyst=analyst,
        answers=answers,
        cumulative_dp=cumulative,
        levels=tuple(scoped.at(read, times).level(s) for s, (read, times)
                     in zip(cumulative, _reads(answers), strict=True)),
        totals=_totals(snapshot, scoped, no_column_answers(
            scoped.models, tuple(policy.tables) if policy is not None else (),
            policy is not None and policy.prefer_model)),
        subtotals=_subtotals(answers, scoped),
    )


def _reads(answers: tuple[LedgerAnswer, ...]
           ) -> tuple[tuple[frozenset[str] | None, TimeSpend | None], ...]:
    """The union of the columns read by the answers up to each one (None: every column), and
    their spending per time point (None once an answer that read a column had no time points,
    as the engine's accountant counts it, docs/theory.md §14)."""
    reads: list[tuple[frozenset[str] | None, TimeSpend | None]] = []
    read: frozenset[str] | None = frozenset()
    spend: dict[int, float] | None = {}
    for answer in answers:
        read = union(read, answer.columns)
        if spend is not None and answer.times is not None:
            if isinstance(answer.times, SeriesPoints):
                spend = SeriesSpend(spend)
            for t in answer.times:
                spend[t] = spend.get(t, 0.0) + answer.cost.epsilon_dp
        elif answer.columns is None or answer.columns:
            spend = None
        reads.append((read, None if spend is None else type(spend)(spend)))
    return tuple(reads)


def _totals(snapshot: LedgerSnapshot, scoped: ScopedAccountant,
            no_column: tuple[AnswerMap | None, ...]) -> ReportTotals:
    answers, budget = snapshot.answers, scoped.budget
    read, times = _reads(answers)[-1] if answers else (frozenset[str](), {})
    accountant, scope = scoped.at(read, times), scoped.scope(read)
    spent = math.fsum(a.cost.epsilon_dp for a in answers)
    asked = math.fsum(a.cost.epsilon for a in answers)
    level = accountant.level(spent)
    nats, bits = mutual_information_bound(level)
    space = accountant.dp_budget()
    return ReportTotals(
        answers=len(answers), budget=budget, k=scoped.k, eta=scope.eta,
        mode=accountant.mode, epsilon_asked=asked, spent_dp=spent, transcript_level=level,
        information_nats=nats, information_bits=bits, remaining=max(0.0, budget - level),
        dp_budget=space, remaining_dp=max(0.0, space - spent),
        largest_epsilon=min(accountant.largest_epsilon(
            spent, query=scoped.model(frozenset()),
            answer=None if answer is None else answer(scoped.model(frozenset())))
            for answer in no_column),
        difference=_difference(asked, level, spent), eta_from=scope.source,
    )


def _difference(asked: float, level: float, spent: float) -> str | None:
    """One plain sentence on why the sum of epsilon asked is not the transcript level."""
    if math.isclose(asked, level, rel_tol=AGREEMENT, abs_tol=AGREEMENT):
        return None
    if level > asked:
        return (
            f"The transcript's level {level:.4g} is above the {asked:.4g} asked in total because "
            f"answers add up in DP terms (sum of epsilon_dp {spent:.4g}) and, with dependent "
            "records, the guarantee grows faster than the DP spending, so per-answer levels "
            "understate the whole."
        )
    return (
        f"The transcript's level {level:.4g} is below the {asked:.4g} asked in total because the "
        f"guarantee is computed once for the whole transcript (sum of epsilon_dp {spent:.4g}) "
        "with the tightest valid bound, so per-answer slack, such as a looser mode or Theorem 2's "
        "fixed ln 2, is not paid again for every answer."
    )


def _subtotals(answers: tuple[LedgerAnswer, ...],
               scoped: ScopedAccountant) -> tuple[AnalystTotals, ...]:
    total = math.fsum(a.cost.epsilon_dp for a in answers)
    names = sorted({a.analyst for a in answers})
    subtotals = []
    for name in names:
        own = tuple(a for a in answers if a.analyst == name)
        spent = math.fsum(a.cost.epsilon_dp for a in own)
        accountant = scoped.at(*_reads(own)[-1])
        subtotals.append(AnalystTotals(
            analyst=name, answers=len(own), epsilon_asked=math.fsum(a.cost.epsilon for a in own),
            spent_dp=spent, own_level=accountant.level(spent),
            share_dp=spent / total if total > 0 else 0.0,
        ))
    return tuple(subtotals)


def _check_policy(snapshot: LedgerSnapshot, policy: Policy) -> None:
    bound = snapshot.binding
    for key, theirs, ours in (("budget", bound.budget, policy.budget_epsilon),
                              ("k", bound.k, policy.k), ("eta", bound.eta, policy.eta),
                              ("mode", bound.mode, policy.mode),
                              ("eta_by_columns", bound.eta_by_columns,
                               declarations_json(policy.eta_by_columns))):
        if theirs != ours:
            raise LedgerError(
                f"ledger {snapshot.path} is bound to a policy with {key} = {theirs!r}, but the "
                f"given policy has {key} = {ours!r}; report with the ledger's own policy, or "
                "omit --policy"
            )


def _check_analyst(analyst: object) -> str:
    if not isinstance(analyst, str) or not analyst.strip():
        raise InputError(f"analyst must be a non-empty name, got {analyst!r}")
    return analyst.strip()
