"""The one per-unit bounding rule, as a sqlglot tree every backend renders in its own dialect.

Each privacy unit keeps the `max_rows_per_unit` of its rows with the smallest MD5 of (the
ledger's secret hash key | a canonical text of the row's unit and the columns a query reads),
ties broken by those values, and the copy holds only them: what a query sees is then a
function of the unit and the columns it reads alone (docs/theory.md §28). The
canonical text writes NULL apart from every value, integers, text and booleans as they print,
and floats as FLOOR(x * 2^20) (exact in double arithmetic), so DuckDB and Spark compute the same
text, the same hash and therefore keep the same rows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from sqlglot import exp

from ..policy import TableSpec
from ..rewrite import bounded_columns, copy_scope
from ..sql_types import SqlType
from ..stored_clamps import clamp_of, clamped_columns, companion

RULE_VERSION = "md5-canonical-2-read-columns"
"""Names this rule in the fingerprint of prepared copies (engine/backends/bounded_store.py): a changed
rule must never reuse rows kept by the old one."""
_SCALE = 2 ** 20
# |FLOOR(x)| below this fits a BIGINT on both engines; a double this large is already whole.
_WHOLE = 2 ** 62


def kept_rows(table: TableSpec, hash_key: str, source: exp.Expression, unit_is_float: bool,
              columns: Collection[str] | None = None) -> exp.Expression:
    """The unit and the policy columns `columns` a query reads (None: every policy column) of
    the rows each unit of `source` keeps under the bound, chosen by the rule over them alone.

    Policy columns of type float, and the unit when its data type is a floating one, are
    written as floats. A row whose unit is NULL is a unit of its own (one row, within any bound): always kept.
    The choice depends only on the unit's own rows, never on other units' rows or on row
    positions, so changing one unit cannot change what another contributes; rows that tie on
    the hash and on every column read are identical in the copy, so which is kept cannot change
    any answer, and the copy is a function of the unit and those columns alone. Only
    units over the bound are ranked: one aggregate finds them, the window sorts only their rows.
    """
    names = bounded_columns(table, columns)
    unit = table.unit
    floats = {name for name, col in table.columns.items() if col.type == SqlType.FLOAT}
    if unit_is_float:
        floats.add(unit)
    content = [_column(name, "t") for name in names]
    heavy = (
        exp.select(_column(unit)).from_(source.copy())
        .where(exp.Not(this=exp.Is(this=_column(unit), expression=exp.Null())))
        .group_by(_column(unit))
        .having(exp.GT(this=exp.Count(this=exp.Star()),
                       expression=exp.Literal.number(table.max_rows_per_unit)))
        .subquery("heavy")
    )
    on = exp.EQ(this=_column(unit, "t"), expression=_column(unit, "heavy"))
    light = (exp.select(*[c.copy() for c in content]).from_(source.copy().as_("t"))
             .join(heavy.copy(), on=on.copy(), join_type="anti"))
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[_column(unit, "t")],
        order=exp.Order(expressions=[
            exp.Ordered(this=_digest(names, hash_key, floats), nulls_first=True),
            *(exp.Ordered(this=c.copy(), nulls_first=True) for c in content),
        ]),
    )
    ranked = (exp.select(*[c.copy() for c in content], exp.alias_(rank, "dpsql_rank"))
              .from_(source.copy().as_("t")).join(heavy, on=on, join_type="semi"))
    kept = (exp.select(*[_column(name) for name in names]).from_(ranked.subquery("ranked"))
            .where(exp.LTE(this=exp.column("dpsql_rank"),
                           expression=exp.Literal.number(table.max_rows_per_unit))))
    return exp.union(light, kept, distinct=False)


def own_rows(table: TableSpec, source: exp.Expression) -> exp.Select:
    """Every row of `source`, `table`'s policy columns: the copy of a table without a privacy
    unit (each row an individual, so no row is dropped) before its stored clamped values."""
    return exp.select(*(_column(name) for name in bounded_columns(table))).from_(source.copy())


def with_clamps(rows: exp.Expression, table: TableSpec, columns: Collection[str] | None = None,
                cast: Mapping[SqlType, str] | None = None) -> exp.Expression:
    """The bounded copy's rows: `rows` (the kept rows of `table` for queries reading `columns`)
    and, after them, each bounded numeric column's value clamped to its bounds as a query would
    clamp it (engine/stored_clamps.py, docs/theory.md §34). `cast` gives the type each policy
    type is read as when `rows` hold the data's own types (a prepared copy), so the value is
    clamped as queries read it. Which rows are kept does not depend on these columns."""
    stored = clamped_columns(table, copy_scope(table, columns))
    if not stored:
        return rows
    values = [exp.alias_(clamp_of(col, _column(col.name) if cast is None
                                  else exp.cast(_column(col.name), cast[col.type])),
                         companion(col.name), quoted=True) for col in stored]
    kept = exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("kept")))
    return exp.select(exp.Star(), *values).from_(kept, copy=False)


def _digest(names: list[str], hash_key: str, float_columns: Collection[str]) -> exp.Expression:
    """MD5 of the key and each of the columns' `names` canonical text, joined by '|'."""
    parts: list[exp.Expression] = [exp.Literal.string(hash_key)]
    for name in names:
        parts.append(_canonical(_column(name, "t"), name in float_columns))
    text: exp.Expression = parts[0]
    for part in parts[1:]:
        text = exp.DPipe(this=exp.DPipe(this=text, expression=exp.Literal.string("|")),
                         expression=part, safe=True)
    return exp.MD5(this=text)


def _canonical(value: exp.Expression, is_float: bool) -> exp.Expression:
    """'N' for NULL, else 'V' and the value's text (a float as FLOOR(x * 2^20), written as a
    whole number; NaN and values beyond DECIMAL(38) as 'big')."""
    text: exp.Expression = exp.cast(value.copy(), "VARCHAR")
    if is_float:
        scaled = exp.Mul(this=exp.cast(value.copy(), "DOUBLE"), expression=exp.Literal.number(_SCALE))
        small = exp.cast(exp.cast(exp.Floor(this=scaled.copy()), "BIGINT"), "VARCHAR")
        large = exp.func("COALESCE", exp.cast(exp.TryCast(this=scaled.copy(),
                                                          to=exp.DataType.build("DECIMAL(38, 0)")),
                                              "VARCHAR"),
                         exp.Literal.string("big"))
        text = exp.Case(ifs=[exp.If(this=exp.LT(this=exp.Abs(this=scaled),
                                                 expression=exp.Literal.number(_WHOLE)),
                                    true=small)], default=large)
    return exp.Case(
        ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Literal.string("N"))],
        default=exp.DPipe(this=exp.Literal.string("V"), expression=text, safe=True))


def _column(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table, quoted=True)
