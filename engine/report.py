"""Budget reports: what a ledger has spent, by whom, and what the transcript guarantees.

Answers compose in DP space (docs/theory.md §7): the transcript's information-privacy
level is L(sum of epsilon_dp), never the sum of per-answer levels, and the budget
counts only that global level.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path

import pandas as pd

from ..calibration import mutual_information_bound, within_budget
from ..calibration.declared import SeriesPoints, SeriesSpend
from .accounting.transcript import AnswerMap, ScopedAccountant, TimeSpend, no_column_answers, union
from .errors import InputError, LedgerError
from .policy import Policy, declarations_json
from .report_ledger import LedgerAnswer, LedgerSnapshot, read_ledger

AGREEMENT = 1e-9
"""Relative gap below which the sum of epsilon asked and the transcript level count as equal."""

LEVELS_DO_NOT_ADD = (
    "An analyst's own level is L of that analyst's DP spending; levels do not add up, so the "
    "budget counts only the level of the whole transcript."
)


@dataclass(frozen=True)
class ReportTotals:
    """The whole ledger's spending in DP and information-privacy terms."""

    answers: int
    budget: float  # the policy's information-privacy (IP) budget B
    k: int
    eta: float  # the transcript's eta: that of the union of the columns its answers read
    mode: str  # the policy's mode: its map L accounts for the transcript
    epsilon_asked: float  # sum of the per-answer IP levels analysts asked for
    spent_dp: float  # sum of epsilon_dp: the transcript is one spent_dp-DP mechanism
    transcript_level: float  # L(spent_dp): the transcript's IP level under (k, eta)
    information_nats: float  # bound on I(X_i; Y) implied by the transcript level
    information_bits: float
    remaining: float  # B - transcript_level
    dp_budget: float  # L^-1(B): the most DP level the whole transcript may spend
    remaining_dp: float  # dp_budget - spent_dp
    # The largest epsilon any query reading only columns already read can still ask.
    largest_epsilon: float
    difference: str | None  # why epsilon_asked and transcript_level differ, when they do
    eta_from: str = ""  # the policy declaration the transcript's eta comes from


@dataclass(frozen=True)
class AnalystTotals:
    """One analyst's share of the spending."""

    analyst: str
    answers: int
    epsilon_asked: float
    spent_dp: float
    own_level: float  # L(this analyst's spent_dp); not a share of the budget
    share_dp: float  # fraction of the ledger's spent_dp


@dataclass(frozen=True)
class Report:
    """A ledger's answers, totals and per-analyst subtotals, optionally showing one analyst."""

    ledger: str
    generated: datetime
    analyst: str | None  # when set, entries and subtotals show only this analyst
    answers: tuple[LedgerAnswer, ...]  # every answer, in ledger order
    cumulative_dp: tuple[float, ...]  # the ledger's spent_dp after each answer
    levels: tuple[float, ...]  # the transcript level after each answer
    totals: ReportTotals
    subtotals: tuple[AnalystTotals, ...]

    @property
    def shown(self) -> tuple[int, ...]:
        """Positions in `answers` of the answers this report shows."""
        return tuple(i for i, a in enumerate(self.answers)
                     if self.analyst is None or a.analyst == self.analyst)

    @property
    def entries(self) -> pd.DataFrame:
        """One row per shown answer; aggregates as readable text; the global level after it."""
        rows = [self._entry(i, "; ".join(a.describe() for a in self.answers[i].aggregates))
                for i in self.shown]
        frame = pd.DataFrame(rows, columns=ENTRY_COLUMNS)
        frame["time"] = pd.to_datetime(frame["time"], utc=True)
        return frame

    @property
    def analysts(self) -> pd.DataFrame:
        """Per-analyst subtotals (only the selected analyst when filtered)."""
        rows = [asdict(s) for s in self.subtotals if self.analyst in (None, s.analyst)]
        return pd.DataFrame(rows, columns=ANALYST_COLUMNS)

    def notes(self) -> tuple[str, ...]:
        """Plain sentences a reader needs to interpret the numbers."""
        notes = []
        if not self.answers:
            notes.append("The ledger has no answers yet: nothing has been spent.")
        if self.analyst is not None:
            known = ", ".join(s.analyst for s in self.subtotals) or "none"
            notes.append(
                f"Showing only the {len(self.shown)} answer(s) of analyst {self.analyst} out of "
                f"{len(self.answers)} (analysts in this ledger: {known}); the totals are for the "
                "whole ledger, which is what the budget counts."
            )
        t = self.totals
        if not within_budget(t.transcript_level, t.budget):
            notes.append(f"The transcript's level {t.transcript_level:.4g} is over the budget of "
                         f"{t.budget:g}: the ledger holds more spending than the accountant "
                         "admits, so no further answer can be admitted.")
        if t.difference:
            notes.append(t.difference)
        if self.subtotals:
            notes.append(LEVELS_DO_NOT_ADD)
        return tuple(notes)

    def _repr_html_(self) -> str:
        """Jupyter's view: the report's tables (`render_html` makes the whole page, with the plot)."""
        from .report_render import render_fragment  # the renderer imports this module

        return render_fragment(self)

    def to_dict(self) -> dict:
        """JSON-ready form whose keys do not depend on the ledger's contents."""
        return {
            "ledger": self.ledger,
            "generated": self.generated.isoformat(),
            "analyst": self.analyst,
            "totals": asdict(self.totals),
            "analysts": [asdict(s) for s in self.subtotals if self.analyst in (None, s.analyst)],
            "entries": [
                {**self._entry(i, [asdict(a) for a in self.answers[i].aggregates]),
                 "time": self.answers[i].time.isoformat()}
                for i in self.shown
            ],
            "notes": list(self.notes()),
        }

    def _entry(self, i: int, aggregates: object) -> dict:
        """The i-th answer with the ledger's cumulative spending and level after it."""
        answer = self.answers[i]
        return {
            "id": answer.id, "time": answer.time, "analyst": answer.analyst, "sql": answer.sql,
            "epsilon": answer.cost.epsilon, "epsilon_dp": answer.cost.epsilon_dp,
            "mode": answer.cost.mode, "k": answer.cost.k, "eta": answer.cost.eta,
            "columns_read": names_read(answer.columns), "aggregates": aggregates,
            "cumulative_epsilon_dp": self.cumulative_dp[i], "transcript_level": self.levels[i],
        }


ENTRY_COLUMNS = ["id", "time", "analyst", "sql", "epsilon", "epsilon_dp", "mode", "k", "eta",
                 "columns_read", "aggregates", "cumulative_epsilon_dp", "transcript_level"]
EVERY_COLUMN = "(every column: recorded before ledgers kept the columns read)"


def names_read(columns: frozenset[str] | None) -> str:
    """The columns an answer read, as a report shows them."""
    return EVERY_COLUMN if columns is None else ", ".join(sorted(columns)) or "(none)"
ANALYST_COLUMNS = ["analyst", "answers", "epsilon_asked", "spent_dp", "own_level", "share_dp"]


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
