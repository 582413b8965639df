"""Answers for free from released ones: before a query is priced, find an answer already
released to the same analyst that it is post-processing of (the same query, at least as
accurate), so it is answered from it at no charge (docs/theory.md §22).

Depends only on the query text as the engine normalised it, the policy, the asked level and
the ledger's released answers: never on the data."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace

from .accounting.bookkeeper import Bookkeeper, Price
from .accounting.books import Books
from .accounting.ledger import Ledger
from .accounting.ledger_binding import LedgerBinding
from .accounting.reuse_index import StoredAnswer
from .prepare import PreparedQuery
from .result import QueryResult


def reuse_key(prepared: PreparedQuery, binding: LedgerBinding) -> str:
    """What an answer answers: the query as the engine normalised it (the flattened SELECT,
    the rewritten SQL run on the data and the post-processing SQL, all generated from the
    plan, not the raw text), its output columns and public group keys, the asked mode, each
    measurement's mechanism and sensitivity, and the policy's ledger binding; a digest."""
    plan = prepared.plan
    mechanisms = sorted((name, str(m.mechanism), float(m.sensitivity))
                        for name, m in prepared.mechanisms.items())
    outputs = [(o.name, o.expression.sql(), o.measurements) for o in plan.outputs]
    groups = [(g.label, repr(g.keys)) for g in plan.group_by]
    text = json.dumps([plan.flattened_sql, prepared.sql, prepared.post_sql, outputs, groups,
                       prepared.mode, mechanisms, asdict(binding)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def find(ledger: Ledger, binding: LedgerBinding, analyst: str, prepared: PreparedQuery,
         price: Price) -> StoredAnswer | None:
    """The analyst's released answer to the same query whose noise is at most what `price`
    would draw now (its eps_dp at least the one asked), or None: a less accurate answer is
    not the answer asked for, so it is charged afresh. A revoked analyst gets none (the
    charge then refuses them)."""
    account = ledger.account(analyst)
    if account is not None and account.analyst.revoked is not None:
        return None
    return ledger.reusable(analyst, reuse_key(prepared, binding), price.calibration.epsilon_dp)


def derived(stored: StoredAnswer, sql: str, bookkeeper: Bookkeeper, prepared: PreparedQuery,
            books: Books, price: Price) -> QueryResult:
    """The stored answer given again for `sql`: its values, intervals and levels, at cost 0,
    with today's budget, and saying which answer it came from."""
    return replace(QueryResult.from_dict(stored.answer), sql=sql, cost=0.0,
                   level_before=price.level_before, level_after=price.level_before,
                   budget=bookkeeper.status(books),
                   largest_epsilon=bookkeeper.largest_epsilon(prepared, books),
                   derived_from=(stored.id,))
