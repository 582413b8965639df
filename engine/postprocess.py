"""Post-processing on noisy values only: outputs (AVG = SUM/COUNT), HAVING, ORDER BY, LIMIT.

Runs in a separate in-memory DuckDB that sees nothing but the noisy table, so everything
here is post-processing and costs no privacy. An answer that is nothing but group keys, noisy
measurements as they are, quantiles read from a histogram and AVG's clamped ratios skips it
(`direct`): the same table, built without a query and without pandas (engine/answer_table.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import duckdb
import numpy as np
from sqlglot import exp

from . import intervals
from .aggregates import quantile
from .answer_table import NoisyCells, Table, Values, frame_dtypes
from .noise import Mechanism
from .plan import OutputColumn, QueryPlan
from .plan_memo import per_plan
from .result import ExpectedError
from .sql_types import SqlType

if TYPE_CHECKING:
    import pandas as pd

ALPHA = 0.05  # 1 - the intervals' coverage
_DTYPES = {"BOOLEAN": "bool", "BIGINT": "int64", "DOUBLE": "float64", "VARCHAR": "object",
           "DATE": "object", "TIMESTAMP": "object"}  # dates as Python date / datetime objects
_KEY_TYPES = {SqlType.BOOL: "BOOLEAN", SqlType.INT: "BIGINT", SqlType.STR: "VARCHAR",
              SqlType.DATE: "DATE", SqlType.TIMESTAMP: "TIMESTAMP"}


def noisy_columns(plan: QueryPlan) -> list[tuple[str, str]]:
    """The table `noisy` that post-processing reads, as (column, DuckDB type): a function of
    the plan alone, so the gate can bind the post-processing query before anything runs."""
    columns = [(col.name, _KEY_TYPES[col.type]) for col in plan.group_by]
    columns += [(cell, "BIGINT" if m.integer else "DOUBLE") for m in plan.measurements for cell in m.cells]
    columns += [(name, "DOUBLE") for name in read_from_cells(plan)]
    return columns + [(f"{prefix}{j}", "DOUBLE") for j in range(len(plan.outputs))
                      for prefix in ("__ci", "__cs")]


def noisy_frame(plan: QueryPlan, keys: list[tuple], noisy: dict[str, list],
                mechanisms: dict[str, Mechanism]) -> pd.DataFrame:
    """Group keys, noisy measurements, and each output's 95% half-widths per group: `__ci` for
    each cell alone, `__cs` for all groups at once (Bonferroni: each cell at ALPHA / groups),
    which stays valid for rows chosen by their noisy values; with the types `noisy_columns`
    promises."""
    import pandas as pd  # here: an answer built directly (`direct`) needs no DataFrame

    rows = len(next(iter(noisy.values())))
    frame = pd.concat([pd.DataFrame(keys, columns=[c.name for c in plan.group_by], index=range(rows)),
                       pd.DataFrame(noisy, index=range(rows))], axis=1)
    frame = pd.concat([frame, pd.DataFrame(_read_values(plan, frame, mechanisms),
                                           index=frame.index)], axis=1)
    groups = max(rows, 1)
    known = intervals.readings(plan, mechanisms)
    halfwidths = {}
    for j, out in enumerate(plan.outputs):
        halfwidths[f"__ci{j}"] = _halfwidths(out, plan, frame, mechanisms, known, ALPHA)
        halfwidths[f"__cs{j}"] = _halfwidths(out, plan, frame, mechanisms, known, ALPHA / groups)
    frame = pd.concat([frame, pd.DataFrame(halfwidths, index=frame.index)], axis=1)
    return frame.astype({name: _DTYPES[kind] for name, kind in noisy_columns(plan)})


def _read_values(plan: QueryPlan, frame: pd.DataFrame | NoisyCells,
                 mechanisms: dict[str, Mechanism]) -> dict[str, np.ndarray]:
    """Each value the plan reads from a measurement's noisy cells in `frame` (a quantile from
    its histogram's counts, `read_from_cells`), one per group."""
    measurements = {m.name: m for m in plan.measurements}
    derived = {}
    for name, (counts, q) in read_from_cells(plan).items():
        operand = measurements[counts].operand
        if operand is None:
            raise TypeError(f"{counts} has no operand to read quantiles of")
        derived[name] = quantile.values(frame, counts, operand, q, mechanisms[counts])
    return derived


def _halfwidths(out: OutputColumn, plan: QueryPlan, frame: pd.DataFrame | NoisyCells,
                mechanisms: dict[str, Mechanism], known: dict[str, intervals.Reading],
                alpha: float) -> np.ndarray:
    """Per group, a half-width that covers the exact value with probability >= 1 - alpha: the
    output's aggregate gives it, interval arithmetic gives an expression's (engine/intervals.py),
    and a group key has none (NaN)."""
    if out.aggregate is None:
        if not out.measurements:
            return np.full(len(frame), np.nan)
        return intervals.halfwidths(out, plan, frame, known, alpha)
    return out.aggregate.halfwidths(out.measurements, out.operand, frame, mechanisms, alpha)


def expected_errors(plan: QueryPlan, mechanisms: dict[str, Mechanism]) -> tuple[ExpectedError, ...]:
    """Each noisy output's own expected 95% error, before the data is read (explain)."""
    return intervals.expected_errors(plan, mechanisms, ALPHA)


def interval_notes(plan: QueryPlan, mechanisms: dict[str, Mechanism]
                   ) -> tuple[tuple[tuple[float, float] | None, ...], tuple[tuple[str, str], ...]]:
    """Per output column, what its exact statistic can be (None for a group key), and the noisy
    columns that have no interval in some or all rows with why: a function of the plan alone."""
    known = intervals.readings(plan, mechanisms)
    ranges = tuple(intervals.possible(out, plan, known) for out in plan.outputs)
    missing = tuple((out.name, why) for out in plan.outputs
                    if (why := intervals.reason(out, plan, known)) is not None)
    return ranges, missing


@per_plan
def read_from_cells(plan: QueryPlan) -> dict[str, tuple[str, float]]:
    """The values post-processing reads from a measurement's noisy cells (a quantile from a
    histogram's counts) that the plan's expressions use: column -> (measurement, q); a function
    of the plan, walked once per plan (every answer asks it)."""
    histograms = {m.name for m in plan.measurements if isinstance(m.kind, quantile.Histogram)}
    clauses = [out.expression for out in plan.outputs] + list(plan.order) \
        + ([plan.having] if plan.having is not None else [])
    found = {}
    for clause in clauses:
        for column in clause.find_all(exp.Column):
            parsed = quantile.parse_value_column(column.name)
            if parsed is not None and parsed[0] in histograms:
                found[column.name] = parsed
    return found


@per_plan
def selection_adjusted(plan: QueryPlan) -> bool:
    """Whether the per-cell intervals keep their coverage for the rows shown: true unless
    HAVING or ORDER BY uses a noisy value, since then which rows are shown (or where, and so
    which LIMIT/OFFSET keeps) depends on the noise, and a chosen row's interval is biased."""
    noisy = {m.name for m in plan.measurements} | set(read_from_cells(plan))
    clauses = ([plan.having] if plan.having is not None else []) + list(plan.order)
    return not any(col.name in noisy for clause in clauses for col in clause.find_all(exp.Column))


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB for post-processing: no files, no extensions, settings locked."""
    return duckdb.connect(":memory:", config={
        "enable_external_access": False, "autoinstall_known_extensions": False,
        "autoload_known_extensions": False, "error_on_division_by_zero": False,
        "lock_configuration": True,
    })


class Connection:
    """The post-processing DuckDB (`connect`) of a database, opened when a post-processing
    query first runs: an answer built directly (`answered_directly`) needs none, and opening an
    in-memory DuckDB is a measurable part of a one-shot query process (issue 26)."""

    def __init__(self) -> None:
        self._conn: duckdb.DuckDBPyConnection | None = None

    def get(self) -> duckdb.DuckDBPyConnection:
        if self._conn is None:
            self._conn = connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


Post = duckdb.DuckDBPyConnection | Connection
"""Where post-processing runs: a DuckDB connection, or a database's `Connection` opened on use."""


def query_sql(plan: QueryPlan) -> str:
    """The post-processing query over the table `noisy`: outputs, their half-widths (per cell
    and simultaneous), HAVING, DISTINCT (rows equal in every value and half-width once),
    ORDER BY, LIMIT and OFFSET."""
    items = []
    # An aggregate over released rows (docs/theory.md §33) gives one row; each of its half-widths
    # is the same in every noisy row, and one row's simultaneous interval is its own.
    one_row = any(out.expression.find(exp.AggFunc) for out in plan.outputs)
    for j, out in enumerate(plan.outputs):
        items.append(exp.alias_(out.expression, f"__o{j}", quoted=True))
        for prefix in ("__ci", "__cs"):
            column = exp.column(f"__ci{j}" if one_row else f"{prefix}{j}", quoted=True)
            items.append(exp.alias_(exp.Max(this=column), f"{prefix}{j}", quoted=True) if one_row else column)
    query = exp.select(*items).from_("noisy")
    if plan.distinct:
        query = query.distinct(copy=False)
    if plan.having is not None:
        query = query.where(plan.having)
    if plan.order:
        query = query.order_by(*plan.order)
    if plan.limit is not None:
        query = query.limit(plan.limit, copy=False)
    if plan.offset is not None:
        query = query.offset(plan.offset, copy=False)
    return query.sql("duckdb")


def finish(post: Post, plan: QueryPlan, sql: str,
           frame: pd.DataFrame) -> tuple[Table, Table, Table]:
    """Run the post-processing `sql` on the noisy frame; return (answer, per-cell half-widths,
    simultaneous half-widths)."""
    conn = post.get() if isinstance(post, Connection) else post
    conn.register("noisy", frame)
    try:
        cursor = conn.execute(sql)
        kinds = [str(column[1]) for column in cursor.description]
        result = _python_times(cursor.fetchdf(), kinds)
    finally:
        conn.unregister("noisy")
    names = [out.name for out in plan.outputs]
    answer = result[[f"__o{j}" for j in range(len(names))]].set_axis(names, axis=1)
    halfwidths = [result[[f"{prefix}{j}" for j in range(len(names))]].set_axis(names, axis=1)
                  .astype(float).reset_index(drop=True) for prefix in ("__ci", "__cs")]
    per_cell, simultaneous = halfwidths
    return (Table.of_frame(answer.reset_index(drop=True)), Table.of_frame(per_cell),
            Table.of_frame(simultaneous))


def answered_directly(plan: QueryPlan) -> bool:
    """Whether `direct` builds the answer (no post-processing query runs): every output is a
    group key, one noisy measurement as it is, a quantile read from one histogram, or a
    clamped ratio of two measurements (AVG), and nothing is filtered, ordered or cut. A
    function of the plan alone."""
    return _recipe(plan) is not None


Source = str | exp.Expression
"""What `direct` builds an output from: a key or measurement by name, or a ratio expression."""


@per_plan
def _recipe(plan: QueryPlan) -> tuple[tuple[Source, ...], tuple[str, ...]] | None:
    """Per output, what it is built from (`_sources`) and its DuckDB type; None when the
    post-processing query is needed. A function of the plan alone, remembered per plan."""
    sources = _sources(plan)
    if sources is None:
        return None
    types = dict(noisy_columns(plan))
    return tuple(sources), tuple(types[source] if isinstance(source, str) else "DOUBLE"
                                 for source in sources)


def _sources(plan: QueryPlan) -> list[Source] | None:
    """Per output, the key or measurement it is, or the ratio expression it computes; None
    when the post-processing query is needed."""
    if plan.having is not None or plan.order or plan.limit is not None or plan.offset is not None \
            or plan.distinct:
        return None
    types = dict(noisy_columns(plan))
    key_names = {col.name for col in plan.group_by}
    measured = {cell for m in plan.measurements for cell in m.cells}
    read = {name: (counts,) for name, (counts, _) in read_from_cells(plan).items()}
    sources: list[Source] = []
    for out in plan.outputs:
        name = out.expression.name if isinstance(out.expression, exp.Column) else None
        if name is not None and name in types and (
                name in key_names or (name in measured and out.measurements == (name,))
                or (name in read and out.measurements == read[name])):
            sources.append(name)
        elif name is None and _is_ratio(out.expression, measured - key_names):
            sources.append(out.expression)
        else:
            return None
    return sources


def direct(plan: QueryPlan, keys: list[tuple], noisy: dict[str, list],
           mechanisms: dict[str, Mechanism]) -> tuple[Table, Table, Table] | None:
    """The answer and its half-widths (as `finish` returns them) built directly, without a
    DataFrame, when `answered_directly`; None when the post-processing query is needed."""
    recipe = _recipe(plan)
    if recipe is None:
        return None
    sources, types = recipe
    columns: dict[str, Values] = {col.name: [key[i] for key in keys]
                                  for i, col in enumerate(plan.group_by)}
    columns.update(noisy)
    rows = len(keys) if plan.group_by else len(next(iter(noisy.values())))
    measured = NoisyCells(noisy, rows)
    columns.update(_read_values(plan, measured, mechanisms))
    values: dict[str, Values] = {out.name: columns[source] if isinstance(source, str) else _ratio(source, noisy)
              for out, source in zip(plan.outputs, sources, strict=True)}
    kinds = {out.name: kind for out, kind in zip(plan.outputs, types, strict=True)}
    if any(v is None for col in plan.group_by for v in columns[col.name]):
        answer = _keys_with_null(values, kinds, rows)  # a NULL key: pandas' own conversion
    else:
        answer = Table.of_columns(values, kinds, rows)
    groups = max(rows, 1)
    known = intervals.readings(plan, mechanisms)
    per_cell, simultaneous = (
        Table.of_columns({out.name: _halfwidths(out, plan, measured, mechanisms, known,
                                                alpha).astype(float) for out in plan.outputs},
                         {out.name: "DOUBLE" for out in plan.outputs}, rows)
        for alpha in (ALPHA, ALPHA / groups))
    return answer, per_cell, simultaneous


def _keys_with_null(values: Mapping[str, Values], kinds: dict[str, str], rows: int) -> Table:
    """An answer with a NULL group key as a frame of the types a fetched frame has, whose
    missing values pandas represents its own way (NaN in a text column of pandas 3)."""
    import pandas as pd

    dtypes = frame_dtypes()
    return Table.of_frame(pd.DataFrame({name: pd.Series(column, dtype=dtypes[kinds[name]])
                                        for name, column in values.items()}, index=range(rows)))


def _python_times(frame: pd.DataFrame, kinds: list[str]) -> pd.DataFrame:
    """DATE and TIMESTAMP columns as Python date and datetime objects (NULL as None), as the
    answers without post-processing hold them (`fetchdf` gives pandas timestamps)."""
    import pandas as pd

    for name, kind in zip(list(frame.columns), kinds, strict=True):
        if kind in ("DATE", "TIMESTAMP"):
            values = [None if pd.isna(v) else v.date() if kind == "DATE" else v.to_pydatetime()
                      for v in frame[name]]
            frame[name] = pd.Series(values, index=frame.index, dtype=object)
    return frame


def _is_ratio(node: exp.Expression, noisy: set[str]) -> bool:
    """Whether `node` is a noisy value divided by GREATEST(noisy value, c >= 1), inside any
    GREATEST/LEAST with number literals (AVG's clamped mean): over finite noisy values DuckDB
    computes it in DOUBLE, never divides by zero and never overflows, so `_ratio` gives the
    same bits."""
    while isinstance(node, (exp.Greatest, exp.Least)) and node.args.get("ignore_nulls"):
        if not all(_number(arg) is not None for arg in node.expressions):
            return False
        node = node.this
    if not isinstance(node, exp.Div) or node.args.get("typed") or node.args.get("safe"):
        return False
    divisor = _as_double(node.expression)
    return (_noisy_name(_as_double(node.this), noisy) and isinstance(divisor, exp.Greatest)
            and bool(divisor.args.get("ignore_nulls")) and _noisy_name(divisor.this, noisy)
            and len(divisor.expressions) == 1 and (_number(divisor.expressions[0]) or 0.0) >= 1.0)


def _as_double(node: exp.Expression) -> exp.Expression:
    """What a (TRY_)CAST to DOUBLE converts, which over a number is DOUBLE conversion; else
    the node itself."""
    if isinstance(node, (exp.Cast, exp.TryCast)) and node.to.this == exp.DataType.Type.DOUBLE:
        return node.this
    return node


def _ratio(node: exp.Expression, noisy: dict[str, list]) -> np.ndarray:
    """The value of an expression `_is_ratio` accepts, in float64 as DuckDB evaluates it:
    both sides converted to DOUBLE, then divided, then clamped by each GREATEST/LEAST."""
    if isinstance(node, (exp.Greatest, exp.Least)):
        value = _ratio(node.this, noisy)
        for arg in node.expressions:
            value = (np.maximum if isinstance(node, exp.Greatest) else np.minimum)(value, _bound(arg))
        return value
    if isinstance(node, exp.Div):
        divisor = _as_double(node.expression)
        return (np.asarray(noisy[_as_double(node.this).name], dtype=np.float64)
                / np.maximum(np.asarray(noisy[divisor.this.name], dtype=np.float64),
                             _bound(divisor.expressions[0])))
    raise TypeError(f"not a ratio of noisy values: {node.sql()}")


def _bound(node: exp.Expression) -> float:
    """A literal `_is_ratio` accepted, as a DOUBLE."""
    value = _number(node)
    if value is None:
        raise TypeError(f"not a number literal: {node.sql()}")
    return value


def _noisy_name(node: exp.Expression, noisy: set[str]) -> bool:
    return isinstance(node, exp.Column) and not node.table and node.name in noisy


def _number(node: exp.Expression) -> float | None:
    """A number literal's value as a DOUBLE (None for anything else)."""
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        value = _number(node.this)
        return None if value is None else -value
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return float(node.this)
        except ValueError:
            return None
    return None
