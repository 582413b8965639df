"""Answers for free from several released ones: a simple COUNT/SUM whose every cell is an exact
sum of released cells of one or more of the analyst's answers over the same table, WHERE (but
for `key IN (...)` filters that keep whole groups), mode and policy: e.g. `COUNT(*) WHERE
region IN ('a', 'b')` from the released `... WHERE region = 'a'` and `... WHERE region = 'b'`,
or from cells of a released table by region (docs/theory.md §22, several answers).

Reads the query's plan, the policy binding and released answers only: never the data."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .accounting.reuse_index import Summable
from .noise import Mechanism, NoiseKind
from .plan import QueryPlan
from .reuse_intervals import mixed_sum_halfwidth
from .reuse_marginal import SLACK, Asked, Derivation, Shape, cells_of, finite, json_key, output_order

MAX_ATOMS = 100_000  # the largest grid of key values a query's cells are checked on

Box = dict[str, frozenset[str] | None]  # per key (its value SQL): the SQL literals covered; None: all


@dataclass(frozen=True)
class Released:
    """One released answer a cell may be summed from: its id, stored answer, where each output
    is in its rows, each row's box of key values, and each summed measurement's noise."""

    id: int
    answer: dict
    at: dict[str, int]  # "key:<value SQL>" or "cell:<signature>" -> column
    boxes: tuple[Box, ...]  # one per row


def derive(asked: Asked, plan: QueryPlan, candidates: Sequence[Summable],
           fresh: Mapping[str, Mechanism], possible: tuple, no_interval: tuple
           ) -> Derivation | None:
    """`plan` answered by summing released cells of `candidates` (most accurate first) sharing
    `asked`'s base, or None: when some cell of `plan` is not an exact disjoint union of
    released cells found greedily, or a summed cell's 95% half-width is wider than a fresh
    answer's (`fresh`, the mechanisms pricing would draw now). Key values are compared as the
    SQL literals the shapes record (a value spelled two ways is two values: never summed)."""
    shapes = [(c, Shape.read(c.shape)) for c in candidates if c.base == asked.base]
    signatures = [what for (kind, what), _, _ in cells_of(asked, plan) if kind == "cell"]
    full = _domains([asked.shape, *(s for _, s in shapes)])
    released = [r for c, s in shapes if (r := _released(c, s, signatures, full)) is not None]
    wanted = _kept(asked.shape.filters, full)
    if not released or wanted is None:
        return None
    keys = [v for v, _ in asked.shape.groups]
    groups = list(itertools.product(*[list(g) for _, g in asked.shape.groups]))
    grid = _grid(keys, wanted, full, released)
    if grid is None or len(groups) * math.prod(len(u) for u in grid.values()) > MAX_ATOMS:
        return None
    pinned: dict[tuple, list[tuple[Released, int]]] = {}  # cells by the group they can be in
    for r in released:
        for i, cell in enumerate(r.boxes):
            pins = [pin for v in keys if (pin := cell.get(v)) is not None and len(pin) == 1]
            if len(pins) == len(keys):
                pinned.setdefault(tuple(next(iter(pin)) for pin in pins), []).append((r, i))
    picks: list[list[tuple[Released, int]]] = []
    for group in groups:
        literals = tuple(s for s, _ in group)
        box = dict(wanted) | {v: frozenset([s]) for v, s in zip(keys, literals, strict=True)}
        chosen = _cover(box, grid, pinned.get(literals, []))
        if chosen is None:
            return None
        picks.append(chosen)
    return _answer(asked, plan, signatures, [tuple(j for _, j in g) for g in groups], picks,
                   fresh, possible, no_interval)


def _domains(shapes: list[Shape]) -> dict[str, frozenset[str]]:
    """Each key's public values (SQL literals), from a shape grouping on it without filtering
    it (a filter can prune the keys listed; the WHERE they share prunes them alike)."""
    full: dict[str, frozenset[str]] = {}
    for shape in shapes:
        filtered = {v for v, _ in shape.filters}
        for v, keys in shape.groups:
            if v not in filtered:
                full.setdefault(v, frozenset(s for s, _ in keys))
    return full


def _kept(filters: tuple, full: Mapping[str, frozenset[str]]) -> Box | None:
    """The SQL literals each filter keeps (None when one lies outside its key's known public
    values: its rows are in no released cell)."""
    box: Box = {}
    for v, lits in filters:
        kept = frozenset(lits)
        if v in full and not kept <= full[v]:
            return None
        before = box.get(v)
        box[v] = kept if before is None else kept & before
    return box


def _released(candidate: Summable, shape: Shape, signatures: list[str],
              full: Mapping[str, frozenset[str]]) -> Released | None:
    """A candidate's rows as boxes, or None when it does not release every summed statistic,
    every group key as a column, or all of its groups."""
    stored = candidate.answer
    at: dict[str, int] = {}
    for i, (kind, what) in enumerate(shape.outputs):
        at.setdefault(f"{kind}:{what}", i)
    groups = {v: {j: s for s, j in keys} for v, keys in shape.groups}  # JSON -> SQL literal
    if any(f"cell:{s}" not in at for s in signatures) or any(f"key:{v}" not in at for v in groups):
        return None
    if len(stored["rows"]) != math.prod(len(keys) for keys in groups.values()):
        return None
    kept = _kept(shape.filters, full)
    if kept is None:
        return None
    boxes = []
    for row in stored["rows"]:
        literals = {v: groups[v].get(json_key(row[at[f"key:{v}"]])) for v in groups}
        if any(s is None for s in literals.values()):
            return None
        boxes.append(dict(kept) | {v: frozenset([s]) for v, s in literals.items() if s})
    return Released(candidate.id, stored, at, tuple(boxes))


def _grid(keys: list[str], wanted: Box, full: Mapping[str, frozenset[str]],
          released: list[Released]) -> dict[str, list[str]] | None:
    """The values each key other than the query's group keys is checked on: its kept keys, or
    all its public values, or one value standing for all when no released cell splits it
    (None when a cell splits a key whose public values are not known)."""
    grid: dict[str, list[str]] = {}
    for v in sorted({v for r in released for box in r.boxes for v in box} | set(wanted)):
        if v in keys:
            continue
        kept = wanted.get(v)
        if kept is not None:
            grid[v] = sorted(kept)
        elif v in full:
            grid[v] = sorted(full[v])
        elif all(box.get(v) is None for r in released for box in r.boxes):
            grid[v] = ["*"]
        else:
            return None
    return grid


def _cover(box: Box, grid: Mapping[str, list[str]],
           cells: list[tuple[Released, int]]) -> list[tuple[Released, int]] | None:
    """Released cells (answer, row) whose union is exactly `box` and which do not overlap,
    taken greedily in the order given (the most accurate answers first), or None."""
    dims = list(grid)
    covered = np.zeros([len(grid[v]) for v in dims], dtype=bool)
    chosen: list[tuple[Released, int]] = []
    for r, i in cells:
        mask = _mask(r.boxes[i], box, dims, grid)
        if mask is None or (covered & mask).any():
            continue
        covered |= mask
        chosen.append((r, i))
    return chosen if chosen and covered.all() else None


def _mask(cell: Box, box: Box, dims: list[str], grid: Mapping[str, list[str]]
          ) -> np.ndarray | None:
    """The grid points a released cell covers, or None when it reaches outside `box`: it does
    not pin a group key of the query to the group's value, it covers every value of a key the
    query keeps some of, or it keeps a value the grid leaves out."""
    for v, want in box.items():
        have = cell.get(v)
        if v not in grid and (have is None or want is None or not have <= want):
            return None
    mask = np.ones([len(grid[v]) for v in dims], dtype=bool)
    for axis, v in enumerate(dims):
        have = cell.get(v)
        if have is None:
            if box.get(v) is not None:
                return None
            continue
        values = grid[v]
        if not have <= set(values):
            return None
        shape = [1] * len(dims)
        shape[axis] = len(values)
        mask = mask & np.array([x in have for x in values]).reshape(shape)
    return mask if mask.any() else None


def _answer(asked: Asked, plan: QueryPlan, signatures: list[str], groups: list[tuple],
            picks: list[list[tuple[Released, int]]], fresh: Mapping[str, Mechanism],
            possible: tuple, no_interval: tuple) -> Derivation | None:
    """The derived answer in the stored JSON form, or None when a cell's 95% half-width is
    wider than the fresh answer's or its terms' noises are of two mechanisms."""
    cells = [(out.name, measurement, what) for (kind, what), out, measurement
             in cells_of(asked, plan) if kind == "cell"]
    used = sorted({r.id for chosen in picks for r, _ in chosen})
    answers = {r.id: r for chosen in picks for r, _ in chosen}
    rows, ci95, both, widest = [], [], [], [0.0] * len(cells)
    for group, chosen in zip(groups, picks, strict=True):
        values, widths, simultaneous = [], [], []
        for j, (_, measurement, what) in enumerate(cells):
            terms: dict[tuple[str, float], int] = {}
            total = 0.0
            for r, i in chosen:
                column = r.at[f"cell:{what}"]
                record = _record(r, column)
                if record is None:
                    return None
                total += r.answer["rows"][i][column]
                key = (record["mechanism"], float(record["scale"]))
                terms[key] = terms.get(key, 0) + 1
            if len({kind for kind, _ in terms}) != 1:
                return None
            kind = NoiseKind(next(iter(terms))[0])
            scales = tuple((scale, n) for (_, scale), n in sorted(terms.items()))
            width = mixed_sum_halfwidth(kind, scales, 0.05)
            if width > fresh[measurement].ci95 * (1 + SLACK):
                return None
            values.append(_typed(total, chosen, what))
            widths.append(width)
            simultaneous.append(mixed_sum_halfwidth(kind, scales, 0.05 / len(groups)))
            widest[j] = max(widest[j], width)
        rows.append([json.loads(j) for j in group] + values)
        ci95.append([None] * len(group) + widths)
        both.append([None] * len(group) + simultaneous)
    least = min((answers[i] for i in used), key=lambda r: r.answer["epsilon_dp"])
    infos = []
    for j, (name, _, what) in enumerate(cells):
        lines = [line for r in answers.values()
                 if (line := _record(r, r.at[f"cell:{what}"])) is not None]
        infos.append(lines[0] | {
            "column": name, "ci95_halfwidth": widest[j],
            "scale": max(float(line["scale"]) for line in lines),
            "epsilon_dp": least.answer["epsilon_dp"],
            "function": f"{lines[0]['function']} summed over released cells of answers "
                        f"{', '.join(map(str, used))}"})
    order = output_order(asked)
    answer = dict(least.answer) | {
        "columns": [out.name for out in plan.outputs],
        "rows": [[row[k] for k in order] for row in rows],
        "ci95": [[row[k] for k in order] for row in ci95],
        "ci95_simultaneous": [[row[k] for k in order] for row in both],
        "possible": [None if p is None else [finite(p[0]), finite(p[1])] for p in possible],
        "no_interval": dict(no_interval), "selection_adjusted": True, "aggregates": infos,
    }
    return Derivation(tuple(used), answer)


def _record(r: Released, column: int) -> dict | None:
    """The stored aggregate line of a released answer's column."""
    name = r.answer["columns"][column]
    return next((a for a in r.answer["aggregates"] if a["column"] == name), None)


def _typed(total: float, chosen: list[tuple[Released, int]], what: str) -> float | int:
    """A sum of released cells, an integer when they all are (a COUNT's)."""
    cells = [r.answer["rows"][i][r.at[f"cell:{what}"]] for r, i in chosen]
    whole = all(isinstance(c, int) and not isinstance(c, bool) for c in cells)
    return int(round(total)) if whole else total
