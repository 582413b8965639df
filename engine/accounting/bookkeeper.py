"""The bookkeeper: the one place that prices an answer at the books, admits it against the
budget and the analyst's cap (raising BudgetExhausted with its numbers), gives the books once
it is charged, the largest epsilon a query can still ask and the budget's status.

Who must admit a charge: this connection's policy and, when the owner has tightened the
ledger's binding since it opened, the ledger's binding as well (the strictest count wins)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Protocol

from ...calibration import Calibration, CalibrationError, DependenceModel, calibrate, guarantee
from ...calibration.declared import DeclaredModel, model_calibration
from ..errors import AccessDenied, BudgetExhausted, InputError
from ..policy import Policy, ScopedEta
from ..result import BudgetStatus
from .analysts import AnalystAccount
from .books import Books
from .ledger import Ledger, LedgerState
from .ledger_binding import LedgerBinding, binding_of
from .transcript import AnswerMap, ScopedAccountant, inverse, no_column_answers, union


class Asked(Protocol):
    """What the books need of a query asked of them (`prepare.PreparedQuery` is one)."""

    @property
    def calibration(self) -> Calibration: ...  # as the policy's accountant calibrates it
    @property
    def mode(self) -> str: ...  # the mode the analyst asked for
    @property
    def cost(self) -> float | None: ...  # when asked by cost: the most the level may rise
    @property
    def columns(self) -> frozenset[str]: ...  # the columns it reads
    @property
    def scope(self) -> ScopedEta: ...  # the eta of those columns, and its declaration
    @property
    def model(self) -> DependenceModel: ...  # k and the eta of its columns
    @property
    def declared(self) -> DeclaredModel | None: ...  # the declared model calibrating it
    @property
    def times(self) -> tuple[int, ...] | None: ...  # a chain answer's time points


@dataclass(frozen=True)
class Price:
    """An answer priced at the books: its calibration, the transcript's level before and
    after it, whether every accountant admits it, and the books once it is charged."""

    calibration: Calibration
    level_before: float
    level_after: float
    admissible: bool
    charged: Books

    @property
    def cost(self) -> float:
        """How much the answer raises the transcript's level."""
        return self.level_after - self.level_before


@dataclass(frozen=True)
class Settled:
    """A charge as the bookkeeper settles it: the admitted price, and once it is charged the
    largest epsilon the query can still ask and the budget's status (both as admission sees
    them for the analyst)."""

    price: Price
    largest_epsilon: float
    status: BudgetStatus


class Bookkeeper:
    """Prices, admits and reports on the budget of one policy's connection to a ledger."""

    def __init__(self, policy: Policy, ledger: Ledger) -> None:
        self.policy = policy
        self.ledger = ledger
        self.accountant = ScopedAccountant(policy.budget_epsilon, policy.k, policy.eta,
                                           policy.mode, policy.eta_by_columns, policy.models,
                                           policy.shared_columns)
        self._binding = binding_of(policy)

    def books(self, state: LedgerState | None = None) -> Books:
        """The ledger's books as they are now (or as `state` holds them, inside a charge), with
        who must admit a charge."""
        state = self.ledger.state() if state is None else state
        return replace(state.books, accountants=self._accountants(state.binding))

    def price(self, query: Asked, books: Books) -> Price:
        """The answer's calibration at the books (the smallest eps_dp every accountant allows,
        under the asked mode and each accountant's own mode, each with the eta it gives the
        columns the query reads), and what it does to the transcript's level."""
        cal = self._calibration(query, books)
        before, after = books.levels(cal.epsilon_dp, query.columns, query.times)
        return Price(cal, before, after, books.admits(cal.epsilon_dp, query.columns, query.times),
                     books.after(cal.epsilon_dp, query.columns, query.times))

    def admit(self, query: Asked, books: Books, analyst: str) -> Price:
        """The answer's price, or BudgetExhausted unless every accountant admits it on top of
        the books and a registered analyst's cap admits it (AccessDenied: a revoked analyst)."""
        price = self._admitted(query, books)
        self._admit_analyst(query, price.calibration, self.ledger.account(analyst),
                            books.accountants)
        return price

    def settle(self, query: Asked, books: Books, analyst: str,
               price: Price | None = None) -> Settled:
        """Inside a charge: admit the answer as `admit` does (`price`, when given, is its price
        at these very books, computed before the run, so it is not computed again), reading the
        analyst's account once, and give the figures once it is charged."""
        price = self._admitted(query, books) if price is None else price
        account = self.ledger.account(analyst)
        self._admit_analyst(query, price.calibration, account, books.accountants)
        largest, status = self._charged(query, price, account)
        return Settled(price, largest, status)

    def largest_epsilon(self, query: Asked, books: Books) -> float:
        """The largest epsilon `query` can still ask at the books."""
        return books.largest_epsilon(query.mode, query.columns, *_answer(query),
                                     times=query.times)

    def figures(self, query: Asked, books: Books, price: Price,
                analyst: str) -> tuple[bool, float, BudgetStatus]:
        """For `analyst`, as admission sees them: whether the priced answer is admitted (every
        accountant and their cap), the largest epsilon `query` can still ask at the books and
        the budget's status (its largest epsilon also bounded by their cap)."""
        own = _own_books(self.ledger.account(analyst), books.accountants)
        status, largest = self.status(books), self.largest_epsilon(query, books)
        admissible = price.admissible
        if own is not None:
            cal = price.calibration
            admissible = admissible and own.admits(cal.epsilon_dp, query.columns, query.times)
            largest = min(largest, self.largest_epsilon(query, own))
            status = replace(status, largest_epsilon=min(status.largest_epsilon,
                                                         self._largest_left(own)))
        return admissible, largest, status

    def _admitted(self, query: Asked, books: Books) -> Price:
        """The answer's price at the books, or BudgetExhausted unless every accountant admits it."""
        price = self.price(query, books)
        if not price.admissible:
            self._refuse(query, price, books)
        return price

    def _charged(self, query: Asked, price: Price,
                 account: AnalystAccount | None) -> tuple[float, BudgetStatus]:
        """For the analyst of `account` (as read in the charge), once the priced answer is
        charged: the largest epsilon `query` can still ask and the budget's status, bounded by
        their cap as admission bounds them."""
        charged = price.charged
        own = _own_books(account, charged.accountants)
        status = self.status(charged)
        largest = status.largest_epsilon if self._asks_as_status(query) \
            else self.largest_epsilon(query, charged)
        if own is not None:
            own = own.after(price.calibration.epsilon_dp, query.columns, query.times)
            largest = min(largest, self.largest_epsilon(query, own))
            status = replace(status, largest_epsilon=min(status.largest_epsilon,
                                                         self._largest_left(own)))
        return largest, status

    def status(self, books: Books) -> BudgetStatus:
        """What is spent and left, under the strictest of the accountants; what is left is for
        queries that read no column beyond those already read."""
        spent = books.spent
        now = [a.at(books.read, books.times) for a in books.accountants]
        levels = [a.level(spent) for a in now]
        scope = self.accountant.scope(books.read)
        return BudgetStatus(
            total=min(a.budget for a in now),
            spent_ip=max(levels),
            spent_dp=spent,
            remaining=max(0.0, min(a.budget - level for a, level in zip(now, levels,
                                                                         strict=True))),
            remaining_dp=max(0.0, min(a.dp_budget() - spent for a in now)),
            largest_epsilon=self._largest_left(books),
            mode=self.policy.mode, eta=scope.eta, eta_from=scope.source,
        )

    def _asks_as_status(self, query: Asked) -> bool:
        """Whether the query's largest epsilon is the status's by definition: it reads no
        column and no time point, under the policy's mode, and the status's is the mode's."""
        return (not query.columns and query.times is None and query.declared is None
                and query.mode == self.policy.mode and self._no_column_answers() == (None,))

    def _no_column_answers(self) -> tuple[AnswerMap | None, ...]:
        return no_column_answers(self.policy.models, tuple(self.policy.tables),
                                 self.policy.prefer_model)

    def _largest_left(self, books: Books) -> float:
        """The status's largest epsilon: the least a query reading no column beyond those
        already read can ask, over how such a query is calibrated on each table."""
        return min(books.largest_epsilon(self.policy.mode, frozenset(), answer)
                   for answer in self._no_column_answers())

    def cap_status(self, analyst: str) -> BudgetStatus | None:
        """A registered analyst's cap as a budget: the level of their own answers, what is left
        and the largest epsilon their cap still admits (None when they have no cap)."""
        account = self.ledger.account(analyst)
        if account is None or account.analyst.cap is None:
            return None
        accountants = self._accountants(self.ledger.state().binding)
        return self.status(_capped(account.books, account.analyst.cap, accountants))

    def _accountants(self, stored: LedgerBinding) -> tuple[ScopedAccountant, ...]:
        """Who must admit a charge: this connection's policy and, if the owner has changed the
        ledger's binding since this connection opened, the ledger's binding as well."""
        if stored == self._binding:
            return (self.accountant,)
        return (self.accountant, stored.accountant())

    def _calibration(self, query: Asked, books: Books) -> Calibration:
        """The calibration to charge at the books (see `price`)."""
        cal, mode, columns = query.calibration, query.mode, query.columns
        if query.declared is not None:  # every binding holds the same models (ledger.py),
            for a in books.accountants:  # but a tightened one has a smaller tight floor
                if a is not self.accountant:
                    other, _ = calibrate_by_model(query.declared, cal.epsilon, a.model(columns),
                                                  query.times or ())
                    cal = other if other.epsilon_dp < cal.epsilon_dp else cal
            return cal
        if query.cost is None:
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
        limit = query.cost
        before, _ = books.levels(0.0, columns)
        after = union(books.read, columns)
        epsilon_dp = min(min(inverse(before + limit, a.model(after), a.mode) - books.spent,
                             inverse(limit, a.model(columns), mode),
                             inverse(limit, a.model(columns), a.mode)) for a in books.accountants)
        if epsilon_dp <= 0.0:
            raise InputError(f"cost {limit:g} cannot be certified under mode {mode} with k="
                             f"{self.policy.k}, eta={query.scope.eta:g} (from "
                             f"{query.scope.source}) for the columns this query reads and the "
                             "transcript so far; ask a larger cost")
        own = guarantee(mode, epsilon_dp, query.model)
        named = calibrate_no_looser(own, mode, query.model, self.policy.mode)
        return replace(named, epsilon=own, epsilon_dp=min(named.epsilon_dp, epsilon_dp))

    def _refuse(self, query: Asked, price: Price, books: Books) -> None:
        """Raise BudgetExhausted for an answer the books do not admit, with its numbers."""
        cal, status = price.calibration, self.status(books)
        if query.cost is None:
            asked, what = cal.epsilon, f"epsilon {cal.epsilon:g} (epsilon_dp {cal.epsilon_dp:.4g})"
        else:
            asked, what = query.cost, f"cost {query.cost:g}"
        largest = self.largest_epsilon(query, books)
        room = max(0.0, status.total - status.spent_ip)
        left = (f"the largest epsilon you can still ask is {largest:.4g} (or a cost of at most "
                f"{room:.4g})" if largest > 0 else "nothing more can be asked: the budget is "
                "used up")
        raise BudgetExhausted(
            f"over budget: this query asks {what}, which would cost {price.cost:.4g} (the "
            f"transcript's information-privacy level {price.level_before:.4g} -> "
            f"{price.level_after:.4g}, over the budget of {status.total:g}); {left}; nothing "
            "was charged", asked=asked, cost=price.cost, largest_epsilon=largest)

    def _admit_analyst(self, query: Asked, cal: Calibration, account: AnalystAccount | None,
                       accountants: tuple[ScopedAccountant, ...]) -> None:
        """Refuse a revoked analyst, and raise BudgetExhausted unless a registered analyst's cap
        admits eps_dp: the cap bounds the level of their own answers, accounted like the whole
        transcript (the global budget stays the guarantee; analysts may collude)."""
        if account is None:
            return
        analyst = account.analyst.name
        if account.analyst.revoked is not None:
            raise AccessDenied(f"analyst {analyst!r} was revoked by the data owner at "
                               f"{account.analyst.revoked}; nothing was charged")
        cap = account.analyst.cap
        if cap is None:
            return
        books = _capped(account.books, cap, accountants)
        if books.admits(cal.epsilon_dp, query.columns, query.times):
            return
        before, after = books.levels(cal.epsilon_dp, query.columns, query.times)
        largest = self.largest_epsilon(query, books)
        asked = cal.epsilon if query.cost is None else query.cost
        left = (f"the largest epsilon you can still ask is {largest:.4g}" if largest > 0
                else "nothing more can be asked: your cap is used up")
        raise BudgetExhausted(
            f"over your cap: this query asks epsilon {cal.epsilon:g} (epsilon_dp "
            f"{cal.epsilon_dp:.4g}), which would take the level of your own answers {before:.4g} "
            f"-> {after:.4g}, over your cap of {cap:g} set by the data owner; {left}; nothing was "
            "charged", asked=asked, cost=after - before, largest_epsilon=largest)


@functools.lru_cache(maxsize=1024, typed=True)
def calibrate_no_looser(epsilon: float, mode: str, model: DependenceModel,
                        policy_mode: str) -> Calibration:
    """Calibrate under `mode` and `model` (k and the eta of the columns read); the mode may
    be more conservative than the policy's, never looser: its eps_dp for this epsilon must
    not exceed the policy mode's. A pure function of its arguments, remembered (each query
    asks it; a refusal is not remembered, it is raised again)."""
    try:
        cal = calibrate(epsilon, model, mode)
        if mode != policy_mode:
            owner = calibrate(epsilon, model, policy_mode)
            if cal.epsilon_dp > owner.epsilon_dp:
                raise InputError(
                    f"mode {mode} is looser than the policy's mode {policy_mode} at "
                    f"epsilon {epsilon:g} (epsilon_dp {cal.epsilon_dp:.4g} > "
                    f"{owner.epsilon_dp:.4g}): an analyst may ask for a more conservative "
                    "mode (smaller epsilon_dp, more noise), never a looser one")
    except CalibrationError as exc:
        raise InputError(str(exc)) from None
    return cal


def calibrate_by_model(declared: DeclaredModel, epsilon: float, model: DependenceModel,
                       times: tuple[int, ...]) -> tuple[Calibration, float]:
    """A declared model's calibration of one answer and the tight map's eps_dp (InputError
    when the model cannot calibrate it)."""
    try:
        return model_calibration(declared, epsilon, model, times)
    except CalibrationError as exc:
        raise InputError(str(exc)) from None


def _answer(query: Asked) -> tuple[AnswerMap | None, tuple[float, tuple[int, ...]] | None]:
    """Under a declared model, the answer's own level at an eps_dp (for a query model) and,
    for a chain, its cap and time points (what `Books.largest_epsilon` needs)."""
    declared = query.declared
    if declared is None:
        return None, None
    times = query.times or ()
    chain = None if declared.chain is None else (declared.cap, times)
    return (lambda model: lambda eps_dp: declared.answer_level(eps_dp, model, times)), chain


def _own_books(account: AnalystAccount | None,
               accountants: tuple[ScopedAccountant, ...]) -> Books | None:
    """A capped analyst's own books with their cap as the budget (None: no cap); a revoked
    analyst's books admit nothing."""
    if account is None:
        return None
    if account.analyst.revoked is not None:
        return _capped(account.books, 0.0, accountants)
    if account.analyst.cap is None:
        return None
    return _capped(account.books, account.analyst.cap, accountants)


def _capped(books: Books, cap: float, accountants: tuple[ScopedAccountant, ...]) -> Books:
    """An analyst's own books as the accountants see them, with their cap as the budget."""
    return replace(books, accountants=tuple(replace(a, budget=cap) for a in accountants))
