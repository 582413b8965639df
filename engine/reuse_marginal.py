"""Marginals for free: a COUNT or SUM grouped by some of the keys of a released finer table
(or by none, a total), over the same table, WHERE, mode and policy, optionally keeping only
some of its groups by `WHERE key IN (...)`, is the sum of released cells, answered from them at
no charge when its intervals are at most as wide as a fresh answer's (docs/theory.md §22).

Reads the query's plan, the policy binding and released answers only: never the data."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from sqlglot import exp

from .accounting.ledger_binding import LedgerBinding
from .accounting.reuse_index import Entry, Summable
from .aggregates.count import Count
from .aggregates.sum import Sum
from .noise import Mechanism, NoiseKind
from .plan import Measurement, QueryPlan
from .prepare import PreparedQuery
from .workload_intervals import sum_halfwidth

SLACK = 1e-9  # relative: a derived half-width this close to a fresh one counts as no wider


@dataclass(frozen=True)
class Shape:
    """What a simple grouped COUNT/SUM answer is, apart from its base: per group key its row
    value (SQL) and public keys (each as a SQL literal and as its answer's JSON value); per
    output column a group key's value or a measurement's signature; the WHERE's conjuncts
    that keep whole groups (a key's value and the literals kept)."""

    groups: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    outputs: tuple[tuple[str, str], ...]  # ("key", value SQL) or ("cell", signature)
    filters: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def record(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def read(cls, stored: Mapping) -> Shape:
        return cls(tuple((v, tuple((s, j) for s, j in keys)) for v, keys in stored["groups"]),
                   tuple((a, b) for a, b in stored["outputs"]),
                   tuple((v, tuple(lits)) for v, lits in stored["filters"]))


@dataclass(frozen=True)
class Asked:
    """One reading of a query as a marginal: the base it shares with finer answers and its
    shape (a query with key filters is read twice: with them kept in the base, and split)."""

    base: str
    shape: Shape


def entry(key: str, found: tuple[Asked, ...]) -> Entry:
    """How a charged answer is indexed: its key, and when simple (`found`: its `readings`),
    its base without the filters that keep whole groups and its shape with them, so later
    marginals and sums of several answers find it (`reuse_combine`)."""
    if not found:
        return Entry(key)
    split = found[-1]  # its filters kept apart from its base, so other answers add up with it
    return Entry(key, split.base, split.shape.record())


def readings(prepared: PreparedQuery, binding: LedgerBinding) -> tuple[Asked, ...]:
    """The bases and shapes a query may be derived under (none when it is not simple)."""
    return _readings(prepared, binding)


def _readings(prepared: PreparedQuery, binding: LedgerBinding) -> tuple[Asked, ...]:
    plan = prepared.plan
    if (plan.having is not None or plan.order or plan.limit is not None or plan.offset
            or plan.join is not None or plan.distinct or plan.inner is not None
            or plan.unnest is not None):
        return ()
    groups = {g.name: g for g in plan.group_by}
    by_name = {m.name: m for m in plan.measurements}
    outputs: list[tuple[str, str]] = []
    for out in plan.outputs:
        column = out.expression.name if isinstance(out.expression, exp.Column) else None
        if column in groups and not out.measurements:
            outputs.append(("key", groups[column].value.sql()))
        elif column in by_name and out.measurements == (column,) and out.aggregate is not None:
            signature = _signature(by_name[column])
            if signature is None:
                return ()
            outputs.append(("cell", signature))
        else:
            return ()
    keyed = tuple((g.value.sql(), tuple((_literal(k), json_key(k)) for k in g.keys))
                  for g in plan.group_by)
    conjuncts: list[exp.Expr] = list(plan.where.flatten()) if isinstance(plan.where, exp.And) \
        else ([] if plan.where is None else [plan.where])
    found = [Asked(_base(plan, prepared.mode, binding, conjuncts), Shape(keyed, tuple(outputs)))]
    filters = [(c, f) for c in conjuncts if (f := _filter(c)) is not None]
    if filters:
        rest = [c for c in conjuncts if all(c is not kept for kept, _ in filters)]
        found.append(Asked(_base(plan, prepared.mode, binding, rest),
                           Shape(keyed, tuple(outputs), tuple(f for _, f in filters))))
    return tuple(found)


def _signature(m: Measurement) -> str | None:
    """A COUNT's or SUM's identity across answers (kind, operand and its bounds), or None
    for an aggregate whose cells do not add up to the coarser cell (a COUNT(DISTINCT unit),
    an AVG, a quantile's histogram)."""
    if type(m.kind) not in (Count, Sum) or len(m.cells) != 1:
        return None
    operand = m.operand
    return json.dumps([type(m.kind).__name__, m.label, m.integer,
                       None if operand is None else [operand.value.sql(), operand.lower,
                                                     operand.upper]])


def _base(plan: QueryPlan, mode: str, binding: LedgerBinding,
          conjuncts: list[exp.Expr]) -> str:
    """The digest of what a marginal and its finer answer must share: the table, the WHERE's
    other conjuncts, the asked mode and the policy's ledger binding."""
    text = json.dumps([plan.table.name, sorted(c.sql() for c in conjuncts), mode,
                       asdict(binding)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _filter(node: exp.Expr) -> tuple[str, tuple[str, ...]] | None:
    """`value IN (literals)` or `value = literal` as (value SQL, literals' SQL), else None."""
    if isinstance(node, exp.In) and not node.args.get("query") and node.expressions:
        items = node.expressions
        value = node.this
    elif isinstance(node, exp.EQ) and _is_literal(node.expression):
        items, value = [node.expression], node.this
    else:
        return None
    if not all(_is_literal(i) for i in items) or _is_literal(value):
        return None
    return value.sql(), tuple(sorted({i.sql() for i in items}))


def _is_literal(node: exp.Expr) -> bool:
    return isinstance(node, (exp.Literal, exp.Boolean)) or (
        isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal))


def _literal(key: object) -> str:
    return exp.convert(key).sql()


def json_key(key: object) -> str:
    return json.dumps(key if isinstance(key, (bool, int, float, str)) else str(key))


@dataclass(frozen=True)
class Derivation:
    """A marginal summed from one released answer: its id and the answer in the stored JSON
    form (values, intervals, levels of the cells it sums)."""

    ids: tuple[int, ...]
    answer: dict


def derive(asked: Asked, plan: QueryPlan, candidate: Summable,
           fresh: Mapping[str, Mechanism], possible: tuple, no_interval: tuple
           ) -> Derivation | None:
    """`plan` answered by summing `candidate`'s cells, or None when it cannot be (a group,
    filter or column the candidate does not release) or when a derived cell's 95% half-width
    is wider than the fresh answer's (`fresh`, the mechanisms pricing would draw now)."""
    fine = Shape.read(candidate.shape)
    if fine.filters:  # it keeps some groups only: summed by `reuse_combine`, which knows which
        return None
    stored = candidate.answer
    values = {v: dict(keys) for v, keys in fine.groups}
    columns = list(stored["columns"])
    at: dict[str, int] = {}
    for i, (kind, what) in enumerate(fine.outputs):
        at.setdefault(f"{kind}:{what}", i)
    if any(f"key:{v}" not in at for v in values):
        return None
    chosen: list[tuple[str, set[str]]] = []  # (group value, the JSON keys kept)
    for v, kept in [(v, [s for s, _ in keys]) for v, keys in asked.shape.groups] + \
            list(asked.shape.filters):
        if v not in values or not set(kept) <= set(values[v]):
            return None
        chosen.append((v, {values[v][s] for s in kept}))
    if len(stored["rows"]) != math.prod(len(keys) for keys in values.values()):
        return None
    found = [(at.get(f"cell:{what}"), out.name, measurement)
             for (kind, what), out, measurement in cells_of(asked, plan) if kind == "cell"]
    cells = [(i, name, measurement) for i, name, measurement in found if i is not None]
    if len(cells) != len(found):
        return None
    records = {a["column"]: a for a in stored["aggregates"]}
    group_at = [at[f"key:{v}"] for v, _ in asked.shape.groups]
    sums: dict[tuple, list[float]] = {}
    counted: dict[tuple, int] = {}
    for row in stored["rows"]:
        if any(json_key(row[at[f"key:{v}"]]) not in kept for v, kept in chosen):
            continue
        group = tuple(row[i] for i in group_at)
        sums.setdefault(group, [0.0] * len(cells))
        counted[group] = counted.get(group, 0) + 1
        for j, (i, _, _) in enumerate(cells):
            sums[group][j] += row[i]
    terms = set(counted.values())
    if len(terms) != 1:
        return None
    n = terms.pop()
    order = sorted(sums, key=lambda g: tuple(json.loads(json_key(k)) for k in g))
    halfwidths, simultaneous, infos = [], [], []
    for i, name, measurement in cells:
        record = records.get(columns[i])
        if record is None:
            return None
        kind = NoiseKind(record["mechanism"])
        width = sum_halfwidth(kind, record["scale"], n, 0.05)
        if width > fresh[measurement].ci95 * (1 + SLACK):
            return None
        halfwidths.append(width)
        simultaneous.append(sum_halfwidth(kind, record["scale"], n, 0.05 / len(order)))
        infos.append(record | {"column": name, "ci95_halfwidth": width, "function":
                               f"{record['function']} summed over {n} released cell"
                               f"{'s' if n > 1 else ''} of answer {candidate.id}"})
    keys = len(group_at)
    rows, ci95, both = [], [], []
    for group in order:
        rows.append(list(group) + [_typed(s, i, stored)
                                   for s, (i, _, _) in zip(sums[group], cells, strict=True)])
        ci95.append([None] * keys + halfwidths)
        both.append([None] * keys + simultaneous)
    names = [out.name for out in plan.outputs]
    order_of = output_order(asked)
    answer = dict(stored) | {
        "columns": names,
        "rows": [[row[j] for j in order_of] for row in rows],
        "ci95": [[row[j] for j in order_of] for row in ci95],
        "ci95_simultaneous": [[row[j] for j in order_of] for row in both],
        "possible": [None if r is None else [finite(r[0]), finite(r[1])] for r in possible],
        "no_interval": dict(no_interval), "selection_adjusted": True,
        "aggregates": infos,
    }
    return Derivation((candidate.id,), answer)


def cells_of(asked: Asked, plan: QueryPlan) -> list:
    """Each output's shape entry, output column and measurement name."""
    return [(shape, out, out.measurements[0] if out.measurements else "")
            for shape, out in zip(asked.shape.outputs, plan.outputs, strict=True)]


def output_order(asked: Asked) -> list[int]:
    """Where each output column is in a row built as the group keys, then the cells."""
    keys = [v for v, _ in asked.shape.groups]
    cells = 0
    order = []
    for kind, what in asked.shape.outputs:
        if kind == "key":
            order.append(keys.index(what))
        else:
            order.append(len(keys) + cells)
            cells += 1
    return order


def _typed(total: float, i: int, stored: dict) -> float | int:
    """A sum of released cells, an integer when they are (a COUNT's)."""
    cell = next((row[i] for row in stored["rows"]), 0)
    return int(round(total)) if isinstance(cell, int) and not isinstance(cell, bool) else total


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
