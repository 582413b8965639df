"""Answers for free from released ones: before a query is priced, find answers already
released to the same analyst that it is post-processing of: the same query, at least as
accurate (answered as that answer), or a marginal of a finer released table (`reuse_marginal`)
or a sum of released cells of several answers (`reuse_combine`) whose summed cells are at least
as accurate as a fresh answer; so it is answered from them at no charge (docs/theory.md §22).

Depends only on the query text as the engine normalised it, the policy, the asked level and
the ledger's released answers: never on the data."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace

from . import postprocess, reuse_combine, reuse_marginal
from .accounting.bookkeeper import Bookkeeper, Price
from .accounting.books import Books
from .accounting.ledger import Ledger
from .accounting.ledger_binding import LedgerBinding
from .accounting.reuse_index import Ask, Entry
from .noise import Mechanism
from .plan_memo import PlanMemo
from .prepare import PreparedQuery
from .result import QueryResult


@dataclass(frozen=True)
class Reused:
    """What a query is answered as without a charge: the released answers it comes from and
    the answer in the stored JSON form (theirs, or the marginal summed from their cells)."""

    ids: tuple[int, ...]
    answer: dict


_KEYS: PlanMemo[str] = PlanMemo()
_ENTRIES: PlanMemo[Entry] = PlanMemo()
_READINGS: PlanMemo[tuple[reuse_marginal.Asked, ...]] = PlanMemo()


def reuse_key(prepared: PreparedQuery, binding: LedgerBinding) -> str:
    """What an answer answers: the query as the engine normalised it (the flattened SELECT,
    the rewritten SQL run on the data and the post-processing SQL, all generated from the
    plan, not the raw text), its output columns and public group keys, the asked mode, each
    measurement's mechanism and sensitivity, and the policy's ledger binding; a digest,
    remembered per plan and those other inputs (every charge indexes its answer by it)."""
    return _KEYS.get(prepared.plan, _inputs(prepared, binding),
                     lambda: _digest(prepared, binding))


def _inputs(prepared: PreparedQuery, binding: LedgerBinding) -> tuple:
    """What `reuse_key` reads beside the plan."""
    return (prepared.sql, prepared.post_sql, prepared.mode, _mechanisms(prepared), binding)


def _mechanisms(prepared: PreparedQuery) -> tuple[tuple[str, str, float], ...]:
    """Each measurement's mechanism and sensitivity, by name."""
    return tuple(sorted((name, str(m.mechanism), float(m.sensitivity))
                        for name, m in prepared.mechanisms.items()))


def _digest(prepared: PreparedQuery, binding: LedgerBinding) -> str:
    plan = prepared.plan
    mechanisms = [list(m) for m in _mechanisms(prepared)]
    outputs = [(o.name, o.expression.sql(), o.measurements) for o in plan.outputs]
    groups = [(g.label, repr(g.keys)) for g in plan.group_by]
    text = json.dumps([plan.flattened_sql, prepared.sql, prepared.post_sql, outputs, groups,
                       prepared.mode, mechanisms, asdict(binding)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def entry(prepared: PreparedQuery, binding: LedgerBinding) -> Entry:
    """How a charged answer is indexed: its key, and its base and shape when marginals may
    later be summed from its cells (remembered as `reuse_key` is)."""
    return _ENTRIES.get(prepared.plan, _inputs(prepared, binding), lambda: reuse_marginal.entry(
        reuse_key(prepared, binding), _readings(prepared, binding)))


def _readings(prepared: PreparedQuery, binding: LedgerBinding) -> tuple[reuse_marginal.Asked, ...]:
    """`reuse_marginal.readings`, remembered per plan, mode and binding (its only inputs)."""
    return _READINGS.get(prepared.plan, (prepared.mode, binding),
                         lambda: reuse_marginal.readings(prepared, binding))


def find(ledger: Ledger, binding: LedgerBinding, analyst: str, prepared: PreparedQuery,
         price: Price, fresh: dict[str, Mechanism]) -> Reused | None:
    """The analyst's released answer to the same query whose noise is at most what `price`
    would draw now (its eps_dp at least the one asked); else a marginal summed from one of
    their finer released answers, else a sum of released cells of several of their answers,
    whose every cell's 95% half-width is at most that of `fresh` (the mechanisms `price`
    draws); else None: a less accurate answer is not the answer asked for, so it is charged
    afresh. A revoked analyst gets none (the charge then refuses them)."""
    account = ledger.account(analyst)
    if account is not None and account.analyst.revoked is not None:
        return None
    readings = _readings(prepared, binding)
    found = ledger.reusable(analyst, Ask(reuse_key(prepared, binding),
                                         tuple(r.base for r in readings)),
                            price.calibration.epsilon_dp)
    if found.same is not None:
        return Reused((found.same.id,), found.same.answer)
    possible, no_interval = postprocess.interval_notes(prepared.plan, fresh)
    for candidate in found.summable:
        for reading in readings:
            if reading.base != candidate.base:
                continue
            derived = reuse_marginal.derive(reading, prepared.plan, candidate, fresh,
                                            possible, no_interval)
            if derived is not None:
                return Reused(derived.ids, derived.answer)
    if readings and found.summable:  # cells of several answers (or of one keeping some groups)
        combined = reuse_combine.derive(readings[-1], prepared.plan, found.summable, fresh,
                                        possible, no_interval)
        if combined is not None:
            return Reused(combined.ids, combined.answer)
    return None


def derived(reused: Reused, sql: str, bookkeeper: Bookkeeper, prepared: PreparedQuery,
            books: Books, price: Price) -> QueryResult:
    """The answer given for `sql` from released ones: its values, intervals and levels, at
    cost 0, with today's budget, and saying which answers it came from."""
    return replace(QueryResult.from_dict(reused.answer), sql=sql, cost=0.0,
                   level_before=price.level_before, level_after=price.level_before,
                   budget=bookkeeper.status(books),
                   largest_epsilon=bookkeeper.largest_epsilon(prepared, books),
                   derived_from=reused.ids)
