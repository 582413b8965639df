"""The accountant of a transcript: its level, what a query costs, and the largest epsilon left.

The ledger keeps S, the sum of every released answer's eps_dp; the transcript is then
L(S)-information private, where L is the guarantee map of the policy's mode under its
(k, eta). The budget B bounds L(S). Because L is convex, "B - L(S)" cannot be spent as an
epsilon; what a user can spend is expressed here:

* cost(S, eps_dp) = L(S + eps_dp) - L(S): how much one answer raises the level;
* largest_epsilon(S) = L_m(L^-1(B) - S): the largest epsilon a query calibrated under mode m
  (eps_dp = L_m^-1(epsilon)) can still ask and be admitted.

With column-scoped eta the map depends on the columns read: a transcript whose answers read
the columns U is L(S; k, eta_U)-private (docs/theory.md §11). `ScopedAccountant` holds a
binding's declarations and gives the `Accountant` of any column set.

A declared model (docs/theory.md §14) is one more guarantee map for the transcripts it covers
(every answer read only the model's columns; for a chain, each answer also read one time point
per released value, or several as a series; for a Gaussian household model, each answer
reading its column was a plain SUM, charged at no time point so that the books keep a time
spending): their level is min(L_mode, L_model), with the model's map counted only up to its cap
(max(L_model(S), L_tight(S / cap))), so the DP budget stays finite.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from ...calibration import (
    CalibrationError,
    DependenceModel,
    dp_budget,
    guarantee,
    only_residue,
    transcript_level,
    within_budget,
)
from ...calibration.declared import DeclaredModel, SeriesSpend
from ..policy import EtaDeclaration, ScopedEta, scoped_eta

TimeSpend = Mapping[int, float]
"""eps_dp spent per time point by the answers charged per time point (chains, §14)."""

AnswerMap = Callable[[DependenceModel], Callable[[float], float]]
"""Under a declared model, one answer's level at an eps_dp, given the (k, eta) of its columns."""

T = TypeVar("T")
_KNOWN = 1024  # column sets an accountant remembers (then it starts over)
_MISSING = object()
_LEVELS = 8  # levels an accountant remembers (then it starts over)


@dataclass(frozen=True)
class Accountant:
    """The budget B and the map L (the policy's mode under its model) that admit answers."""

    budget: float
    model: DependenceModel
    mode: str
    exact: tuple[DeclaredModel, ...] = ()  # declared models covering the transcript
    spend: tuple[float, ...] | None = None  # a covering chain's per-time spending (with the new)
    series: bool = False  # an answer of the transcript read several time points together (§20)
    # The last few levels computed (a function of S and the fields above): a charge asks the
    # level after it when pricing, admitting and reporting the budget.
    _levels: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def level(self, spent_dp: float) -> float:
        """L(S): the information-privacy level of a transcript that spent S in DP terms (the
        smallest of the mode's map and each covering model's capped map)."""
        known = self._levels.get(spent_dp)
        if known is not None:
            return known
        level = transcript_level(spent_dp, self.model, self.mode)
        for declared in self.exact:
            level = min(level, declared.capped(spent_dp, self.model, self.spend, self.series))
        if len(self._levels) >= _LEVELS:
            self._levels.clear()
        self._levels[spent_dp] = level
        return level

    def dp_budget(self) -> float:
        """L^-1(B): the most DP level the whole transcript may spend (0 if L cannot reach B).
        A chain's level depends on the spending per time point, not on S alone, so its model
        only widens the budget of a household model's transcript."""
        return _dp_budget(self.budget, self.model, self.mode,
                          tuple(m for m in self.exact if m.chain is None))

    def admits(self, spent_dp: float, new_dp: float) -> bool:
        """True if an answer of new_dp keeps the transcript level within the budget."""
        total = spent_dp + new_dp
        return not math.isinf(total) and within_budget(self.level(total), self.budget)

    def cost(self, spent_dp: float, new_dp: float) -> float:
        """How much an answer of new_dp raises the transcript level: L(S + new) - L(S)."""
        return self.level(spent_dp + new_dp) - self.level(spent_dp)

    def largest_epsilon(self, spent_dp: float, mode: str | None = None,
                        query: DependenceModel | None = None,
                        answer: Callable[[float], float] | None = None) -> float:
        """The largest epsilon a query calibrated under `mode` (default: the policy's) and the
        model `query` (default: this accountant's) can ask; under a declared model, `answer`
        is the query's own level at an eps_dp (its eps_dp is the inverse of it)."""
        total = self.dp_budget()
        room = total - spent_dp
        if only_residue(room, total):
            return 0.0
        if answer is not None:
            return answer(room)
        return guarantee(self.mode if mode is None else mode, room,
                         self.model if query is None else query)


@functools.lru_cache(maxsize=256)
def _dp_budget(budget: float, model: DependenceModel, mode: str,
               households: tuple[DeclaredModel, ...]) -> float:
    """`Accountant.dp_budget`, a pure function of the budget, model, mode and household
    models, kept per binding so a charge's admission and figures invert the map once."""
    total = inverse(budget, model, mode)
    tight = inverse(budget, model, "tight")
    for declared in households:
        from ...calibration.model_maps import capped_inverse  # only a declared model needs it

        total = max(total, capped_inverse(declared.level, budget, tight, declared.cap))
    return total


def inverse(level: float, model: DependenceModel, mode: str) -> float:
    """The largest eps_dp with L_mode(eps_dp) <= level; 0 where the mode cannot reach it.

    A level here is a total (a budget, or a transcript level plus a cost), so it is checked
    against the budget range, not the range of one answer's epsilon."""
    try:
        return dp_budget(level, model, mode)
    except CalibrationError:
        return 0.0


@dataclass(frozen=True)
class ScopedAccountant:
    """A budget, mode and dependence declarations (k, the default eta and eta per column set):
    the accountant of a transcript depends on the columns its answers read."""

    budget: float
    k: int
    eta: float
    mode: str
    eta_by_columns: tuple[EtaDeclaration, ...] = ()
    models: tuple[DeclaredModel, ...] = ()
    shared: frozenset[str] = frozenset()  # the parent tables' columns: their eta defaults to 1
    # The scope, model and accountant of each column set asked (functions of it and the fields
    # above), kept per accountant: a charge asks them several times, each query again.
    _known: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def scope(self, columns: frozenset[str] | None) -> ScopedEta:
        """The eta that applies to `columns` (None: every column) and where it comes from."""
        return self._remembered(("scope", columns), lambda: scoped_eta(
            self.eta, self.eta_by_columns, columns, self.shared))

    def model(self, columns: frozenset[str] | None) -> DependenceModel:
        return self._remembered(("model", columns),
                                lambda: DependenceModel(self.k, self.scope(columns).eta))

    def at(self, columns: frozenset[str] | None, times: TimeSpend | None = None) -> Accountant:
        """The accountant of a transcript whose answers read `columns` and, when every answer
        reading a column was charged per time point, spent `times` (None otherwise; a
        `SeriesSpend` when one of them read several time points together)."""
        if times is None:
            return self._remembered(("at", columns), lambda: self._at(columns, None))
        return self._at(columns, times)

    def _remembered(self, key: tuple, compute: Callable[[], T]) -> T:
        """The value kept under `key`, else `compute()`, kept."""
        known = self._known
        value = known.get(key, _MISSING)
        if value is _MISSING:
            value = compute()
            if len(known) >= _KNOWN:
                known.clear()
            known[key] = value
        return value

    def _at(self, columns: frozenset[str] | None, times: TimeSpend | None) -> Accountant:
        exact = tuple(m for m in self.models if m.covers(columns)
                      and (m.household is not None or times is not None))
        households = tuple(m for m in exact if m.chain is None)
        # A charged time point was read through its chain's time column, so a chain covering
        # the columns is the chain of every time point (several only when none was charged).
        chain = next((m for m in exact if m.chain is not None), None)
        if chain is None or times is None or any(not chain.first <= t <= chain.last
                                                 for t in times):
            return Accountant(self.budget, self.model(columns), self.mode, households)
        spend = tuple(times.get(t, 0.0) for t in range(chain.first, chain.last + 1))
        return Accountant(self.budget, self.model(columns), self.mode, households + (chain,),
                          spend, isinstance(times, SeriesSpend))


def union(read: frozenset[str] | None, more: frozenset[str] | None) -> frozenset[str] | None:
    """Columns read by two sets of answers (None stands for every column)."""
    return None if read is None or more is None else read | more


def no_column_answers(models: tuple[DeclaredModel, ...], tables: tuple[str, ...],
                      prefer_model: bool) -> tuple[AnswerMap | None, ...]:
    """How a query reading no column (COUNT(*)) is calibrated on each of `tables`: by the
    policy's mode (None) or, under mode model, by the first model declared for its table when
    that is a household model (the one a query is given; a chain needs a time point, so such a
    query falls back to the mode). The status's largest epsilon is the least over them."""
    answers: list[AnswerMap | None] = []
    for table in tables:
        first = next((m for m in models if m.table == table), None)
        answers.append(None if not prefer_model or first is None or first.chain is not None
                       else _answer_map(first))
    return tuple(dict.fromkeys(answers)) or (None,)


def _answer_map(declared: DeclaredModel) -> AnswerMap:
    """One answer's level under `declared`, reading no time point."""
    def level(query: DependenceModel) -> Callable[[float], float]:
        return lambda eps_dp: declared.answer_level(eps_dp, query)
    return level
