"""A workload of statements planned together before the data is touched: which statements are
linear counts over one public contingency domain, their query matrices, the measurement
strategy with the least expected error, and the intervals it gives (docs/theory.md §18)."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
from sqlglot import exp

from .aggregates.sum import SUM
from .errors import DpsqlError, InputError
from .plan import GroupKey, QueryPlan
from .prepare import PreparedQuery, Preparer
from .sql_types import SqlType
from .workload_intervals import laplace_combination_halfwidth
from .workload_strategy import Strategy, candidates, squared_errors

ALPHA = 0.05
MAX_STATEMENTS = 100


def split_statements(text: str) -> list[str]:
    """The statements of a workload file, separated by `;` (blank ones dropped)."""
    import sqlglot

    try:
        parsed = [s for s in sqlglot.parse(text, dialect="duckdb") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise InputError(f"the workload is not SQL statements separated by ';': "
                         f"{str(exc).splitlines()[0]}") from None
    return [s.sql(dialect="duckdb") for s in parsed]


def check_statements(statements: object) -> list[str]:
    """A list of 1 to MAX_STATEMENTS SQL texts, or a one-line refusal."""
    if isinstance(statements, str) or not isinstance(statements, (list, tuple)) \
            or not all(isinstance(s, str) and s.strip() for s in statements):
        raise InputError("a workload is a list of SQL statements (non-empty strings), got "
                         f"{type(statements).__name__}")
    if not 1 <= len(statements) <= MAX_STATEMENTS:
        raise InputError(f"a workload holds 1 to {MAX_STATEMENTS} statements, got "
                         f"{len(statements)}", value=len(statements))
    return list(statements)


@dataclass(frozen=True)
class Member:
    """One statement of the workload: its preparation and, when it is a linear count over the
    contingency domain, its matrix W (one row per answer cell); else why it is answered alone."""

    sql: str
    prepared: PreparedQuery
    matrix: np.ndarray | None = None
    alone: str = ""  # why the statement is answered alone ("" when it is in the workload)
    group: int = -1  # the index of its group in WorkloadPlan.groups (-1 when alone)
    unit_halfwidths: tuple[float, ...] = ()  # per cell, 95%, at noise scale 1
    unit_simultaneous: tuple[float, ...] = ()  # per cell, all cells at once (Bonferroni)
    unit_rmse: float = 0.0  # root mean squared error per cell at noise scale 1


@dataclass(frozen=True)
class Group:
    """The statements measured together: the COUNT(*)s, or the SUMs of one clamped column,
    over the workload's domain; one strategy and one noisy measurement of its cell vector."""

    label: str  # "COUNT(*)" or "SUM(x)"
    contingency: PreparedQuery  # the grouped aggregate over every cell of the domain
    solved: Strategy
    compared: tuple[tuple[str, float], ...]  # each candidate strategy and its per-cell RMSE at scale 1
    size: int  # how many statements it answers (its share of the split is size / n)

    @property
    def cell_sensitivity(self) -> float:
        """The cell vector's L1 sensitivity: the grouped aggregate's (2m for COUNT(*),
        2m·max(|L|, |U|) for a SUM clamped to [L, U]; engine/aggregates/)."""
        (mech,) = self.contingency.mechanisms.values()
        return float(mech.sensitivity)

    @property
    def sensitivity(self) -> float:
        """The strategy measurement's L1 sensitivity: its L1 norm times the vector's."""
        return self.solved.l1 * self.cell_sensitivity


@dataclass(frozen=True)
class WorkloadPlan:
    """Everything decided before the data is touched."""

    members: tuple[Member, ...]
    groups: tuple[Group, ...]  # the COUNT(*) group first when there is one, then SUMs

    @property
    def measured(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.matrix is not None)

    @property
    def alone(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.matrix is None)

    @property
    def contingency(self) -> PreparedQuery | None:
        """The first group's cell vector query (the counts' when there are counts)."""
        return self.groups[0].contingency if self.groups else None

    @property
    def solved(self) -> Strategy | None:
        return self.groups[0].solved if self.groups else None

    @property
    def compared(self) -> tuple[tuple[str, float], ...]:
        return self.groups[0].compared if self.groups else ()

    @property
    def sensitivity(self) -> float:
        """The first group's measurement sensitivity (every group's is in its own info)."""
        return self.groups[0].sensitivity if self.groups else 0.0


def plan_workload(preparer: Preparer, statements: list[str], epsilon: float | None,
                  mode: str | None, cost: float | None) -> WorkloadPlan:
    """Prepare every statement (a bad one refuses the workload), find those that are linear
    counts over one table's public domain, and choose their strategy."""
    prepared = [preparer.prepare(sql, epsilon, mode, cost) for sql in statements]
    why = [_outside_shape(p.plan) for p in prepared]
    tables = [p.plan.table.name for p, w in zip(prepared, why, strict=True) if not w]
    table = max(set(tables), key=tables.count) if tables else None
    why = [w or (f"it reads table {p.plan.table.name}, the workload's counts read {table}"
                 if p.plan.table.name != table else "") for p, w in zip(prepared, why, strict=True)]
    public: dict[str, bool] = {}  # whether each column read has a public domain
    for i, (p, w) in enumerate(zip(prepared, why, strict=True)):
        if w or table is None:
            continue
        for column in _attributes(p.plan):
            if column not in public:
                public[column] = _contingency(preparer, table, [column], epsilon, mode,
                                              cost) is not None
            if not public[column]:
                why[i] = f"it reads {column}, which has no public domain"
                break
    attributes: list[str] = []
    for p, w in zip(prepared, why, strict=True):
        if not w:
            attributes += [a for a in _attributes(p.plan) if a not in attributes]
    contingency = None
    if table is not None and attributes:
        contingency = _contingency(preparer, table, attributes, epsilon, mode, cost)
        if contingency is None:
            why = [w or "the public domain of the workload's columns is too large to measure"
                   for w in why]
    if table is None or contingency is None or all(why):
        return WorkloadPlan(tuple(Member(s, p, alone=w or "it is the only count")
                                  for s, p, w in zip(statements, prepared, why, strict=True)),
                            ())
    keys = contingency.plan.group_by
    sizes = tuple(len(k.keys) for k in keys)
    cells = _cells(keys)
    labels = {i: _aggregate(p.plan) for i, (p, w) in enumerate(zip(prepared, why, strict=True))
              if not w}
    order = sorted(set(labels.values()), key=lambda a: (a != "COUNT(*)",
                                                        list(labels.values()).index(a)))
    ordered = len(keys) == 1 and keys[0].type == SqlType.INT
    groups = []
    units: dict[int, tuple[tuple[float, ...], tuple[float, ...], float]] = {}
    matrices = {i: _matrix(prepared[i].plan, cells, keys) for i in labels}
    for label in order:
        chosen = [i for i in labels if labels[i] == label]
        cube = contingency if label == "COUNT(*)" else \
            _contingency(preparer, table, attributes, epsilon, mode, cost, label)
        assert cube is not None  # the same domain as the counts', only the aggregate differs
        sets = [tuple(sorted(attributes.index(a) for a in _attributes(prepared[i].plan)))
                for i in chosen]
        compared, solved, found = _strategy(sizes, tuple(sets),
                                            tuple(_Frozen(matrices[i]) for i in chosen), ordered)
        units.update(zip(chosen, found, strict=True))
        groups.append(Group(label, cube, solved, compared, len(chosen)))
    members = []
    for i, (sql, p, w) in enumerate(zip(statements, prepared, why, strict=True)):
        if w:
            members.append(Member(sql, p, alone=w))
            continue
        members.append(Member(sql, p, matrices[i], "", order.index(labels[i]), *units[i]))
    return WorkloadPlan(tuple(members), tuple(groups))


@dataclass(frozen=True)
class _Frozen:
    """A query matrix as a cache key (compared by its shape and bytes)."""

    matrix: np.ndarray

    def __hash__(self) -> int:
        return hash((self.matrix.shape, self.matrix.tobytes()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and self.matrix.shape == other.matrix.shape \
            and bool(np.array_equal(self.matrix, other.matrix))


@functools.lru_cache(maxsize=4)
def _strategy(sizes: tuple[int, ...], sets: tuple[tuple[int, ...], ...],
              queries: tuple[_Frozen, ...], ordered: bool
              ) -> tuple[tuple[tuple[str, float], ...], Strategy,
                         list[tuple[tuple[float, ...], tuple[float, ...], float]]]:
    """The chosen strategy and, per query, its cells' 95% half-widths (alone and all at once)
    and per-cell RMSE at noise scale 1: a function of public shapes only, so a repeated
    workload reuses it."""
    compared, solved = _choose(sizes, list(sets), [q.matrix for q in queries], ordered)
    units = []
    for q in queries:
        coeff = solved.coefficients(q.matrix)
        count = coeff.shape[0]
        units.append((tuple(laplace_combination_halfwidth(row, 1.0, ALPHA) for row in coeff),
                      tuple(laplace_combination_halfwidth(row, 1.0, ALPHA / count) for row in coeff),
                      math.sqrt(2.0 * float(np.square(coeff).sum()) / count)))
    return compared, solved, units


def _choose(sizes: tuple[int, ...], sets: list[tuple[int, ...]], queries: list[np.ndarray],
            ordered: bool) -> tuple[tuple[tuple[str, float], ...], Strategy]:
    """The candidate with the least expected squared error over every answer cell (its L1 norm
    squared times Σ u²), shown as the workload's per-cell RMSE at noise scale 1."""
    cells = sum(q.shape[0] for q in queries)
    scored = []
    for strategy in candidates(sizes, sets, queries, ordered):
        error = strategy.l1 ** 2 * sum(float(squared_errors(strategy, q).sum()) for q in queries)
        scored.append((math.sqrt(2.0 * error / cells), strategy))
    best = min(scored, key=lambda s: s[0])[1]
    return tuple((s.name, rmse) for rmse, s in scored), best


def _outside_shape(plan: QueryPlan) -> str:
    """Why a plan is not a linear count over public columns ("" when it is one)."""
    if plan.join is not None:
        return "it joins another table"
    if plan.inner is not None:
        return "it aggregates per-unit values (a two-level query)"
    if plan.unnest is not None:
        return f"it reads the items of the list column {plan.unnest.column}"
    if len(plan.measurements) != 1 or not _aggregate(plan):
        return "it is not one COUNT(*) or one SUM of a column"
    if plan.having is not None or plan.order or plan.limit is not None or plan.offset is not None \
            or plan.distinct:
        return "it has HAVING, DISTINCT, ORDER BY, LIMIT or OFFSET"
    name = plan.measurements[0].name
    for out in plan.outputs:
        if out.aggregate is not None and out.expression != exp.column(name, quoted=True):
            return f"its output {out.name} is an expression of the count"
    for key in plan.group_by:
        if not isinstance(key.value, exp.Column):
            return f"it groups by the expression {key.label}"
    names = {k.name for k in plan.group_by}
    for out in plan.outputs:
        if out.aggregate is None and not (isinstance(out.expression, exp.Column)
                                          and out.expression.name in names):
            return f"its output {out.name} is an expression"
    return ""


def _aggregate(plan: QueryPlan) -> str:
    """The group a one-measurement plan joins: "COUNT(*)", "SUM(x)" for the SUM of a bounded
    column x (the SQL it is measured by), or "" for any other aggregate."""
    (measurement,) = plan.measurements
    operand = measurement.operand
    if measurement.label == "COUNT(*)" and operand is None:
        return "COUNT(*)"
    if measurement.kind is SUM and operand is not None and isinstance(operand.value, exp.Column):
        return f'SUM("{operand.value.name}")'
    return ""


def _attributes(plan: QueryPlan) -> list[str]:
    """The policy columns a count reads: its GROUP BY columns and its WHERE columns."""
    names = [k.value.name for k in plan.group_by]
    if plan.where is not None:
        names += [c.name for c in plan.where.find_all(exp.Column) if c.name not in names]
    return list(dict.fromkeys(names))


def _contingency(preparer: Preparer, table: str, attributes: list[str], epsilon: float | None,
                 mode: str | None, cost: float | None,
                 aggregate: str = "COUNT(*)") -> PreparedQuery | None:
    """The grouped aggregate over every workload column (None if some column has no public
    domain or the table is over the size limits: a function of the text and the policy)."""
    columns = ", ".join(f'"{a}"' for a in attributes)
    sql = f'SELECT {columns}, {aggregate} AS "n" FROM "{table}" GROUP BY {columns}'
    try:
        return preparer.prepare(sql, epsilon, mode, cost)
    except DpsqlError:
        return None


def _cells(keys: tuple[GroupKey, ...]) -> pd.DataFrame:
    """Every cell of the domain, in C order, with its position in `__cell`."""
    rows = list(itertools.product(*(k.keys for k in keys)))
    frame = pd.DataFrame(rows, columns=[k.value.name for k in keys])
    frame["__cell"] = np.arange(len(rows))
    return frame


def _matrix(plan: QueryPlan, cells: pd.DataFrame, keys: tuple[GroupKey, ...]) -> np.ndarray:
    """W: one row per answer cell (the plan's groups in key order), one column per domain
    cell; 1 where the domain cell satisfies WHERE and falls in that group. The WHERE is run by
    DuckDB on the public cells, never on data."""
    conn = duckdb.connect(":memory:")
    try:
        conn.register("cells", cells)
        where = "TRUE" if plan.where is None else plan.where.sql(dialect="duckdb")
        picked = conn.execute(f"SELECT * FROM cells WHERE {where}").df()
    finally:
        conn.close()
    groups = [k.value.name for k in plan.group_by]
    index = {key: i for i, key in enumerate(itertools.product(*(k.keys for k in plan.group_by)))}
    w = np.zeros((len(index), len(cells)))
    rows = [index[tuple(r)] for r in picked[groups].itertuples(index=False, name=None)] \
        if groups else [0] * len(picked)
    w[rows, picked["__cell"].to_numpy()] = 1.0
    return w


def answer_frame(member: Member, values: np.ndarray, scale: float
                 ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A workload answer in the shape of a single one: group keys then the count column, with
    its per-cell and simultaneous 95% half-widths (key columns have none)."""
    plan = member.prepared.plan
    keys = list(itertools.product(*(k.keys for k in plan.group_by))) if plan.group_by else [()]
    data: dict[str, list] = {}
    ci: dict[str, list] = {}
    cs: dict[str, list] = {}
    for out in plan.outputs:
        if out.aggregate is None:
            position = [k.name for k in plan.group_by].index(out.expression.name)
            data[out.name] = [k[position] for k in keys]
            ci[out.name] = cs[out.name] = [math.nan] * len(keys)
        else:
            data[out.name] = [float(v) for v in values]
            ci[out.name] = [h * scale for h in member.unit_halfwidths]
            cs[out.name] = [h * scale for h in member.unit_simultaneous]
    return (pd.DataFrame(data), pd.DataFrame(ci, dtype=float), pd.DataFrame(cs, dtype=float))
