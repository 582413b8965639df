"""Flatten CTEs and FROM-subqueries into the one-table SELECT the binder validates.

A CTE or a subquery in FROM that keeps one row per row of its source (filters, projections,
renames, computed columns) is merged into the query that reads it with sqlglot's optimizer
(`qualify` against the policy's schema, then `merge_subqueries` and `eliminate_ctes`). The
result is an ordinary SELECT on one table, bound and checked exactly as if the analyst had
written it (docs/theory.md §16): flattening adds no trust, and it reads only the query text and
the policy. Anything that does not flatten (an aggregate, DISTINCT, LIMIT, ORDER BY or a set
operation inside, a self-reference) is refused, naming the construct.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.schema import MappingSchema

from ..errors import QueryRefused
from ..policy import LookupTable, Policy
from ..sql_types import SqlType
from .join import ACCEPTED as JOIN_ACCEPTED
from .nesting import per_unit_source
from .parse import check_depth
from .released import merge_released, over_released

_SQL_TYPES: dict[SqlType, str] = {SqlType.INT: "BIGINT", SqlType.FLOAT: "DOUBLE", SqlType.BOOL: "BOOLEAN",
                                  SqlType.STR: "VARCHAR"}
_ONE_ROW_PER_ROW = ("a CTE or subquery may only filter, rename and compute columns of one table "
                    "(one row per row); write the aggregate in the outer SELECT")
# Clauses of a CTE or FROM-subquery body that change which rows it yields, and what to do instead.
_BODY_CLAUSES = {
    "group": "GROUP BY",
    "having": "HAVING",
    "distinct": "DISTINCT",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "order": "ORDER BY",
}


def needs_flattening(select: exp.Select) -> bool:
    """Whether the query has a WITH clause or a subquery in FROM."""
    source = select.args.get("from_")
    return select.args.get("with_") is not None or (
        source is not None and isinstance(source.this, exp.Subquery))


def flatten(select: exp.Select, policy: Policy) -> exp.Select:
    """The one-table SELECT equivalent to `select`, or `select` itself when it has no CTE and
    no FROM-subquery, is a two-level query (engine/sql/two_level.py binds it), unnests a
    list column (engine/sql/unnest.py reads it as a column, then flattens it) or aggregates
    released rows (engine/sql/over_released.py binds it); raise
    QueryRefused naming a construct that does not flatten."""
    _unwrap_tables(select)
    merged = merge_released(select, policy)
    if merged is not None:
        return flatten(merged, policy)
    if not needs_flattening(select) or per_unit_source(select, policy) is not None \
            or select.find(exp.Unnest, exp.Explode) is not None \
            or over_released(select, policy):  # unnest.py and over_released.py bind them
        return select
    _check_bodies(select, policy)
    if any(isinstance(item, exp.Star) or (isinstance(item, exp.Column) and item.is_star)
           for item in select.expressions):
        raise QueryRefused("SELECT * refused: name the aggregates to release")
    named = select.copy()
    for item in named.expressions:
        # Outputs keep the names the analyst's text gives them (qualify would lower-case them),
        # and unnamed items are named by their text, not by the flattened SQL.
        if isinstance(item, exp.Alias):
            item.args["alias"].meta["case_sensitive"] = True
        elif not isinstance(item, exp.Column):
            name = exp.to_identifier(item.sql(dialect="duckdb"), quoted=True)
            name.meta["case_sensitive"] = True
            item.replace(exp.alias_(item.copy(), name))
    # sqlglot's optimizer is loaded by the queries that have a CTE or subquery to merge, not
    # by every query process (issue 26: start-up is most of a one-shot query's cost).
    from sqlglot.optimizer.eliminate_ctes import eliminate_ctes
    from sqlglot.optimizer.merge_subqueries import merge_subqueries
    from sqlglot.optimizer.qualify import qualify

    try:
        qualified = qualify(named, dialect="duckdb", schema=_schema(policy),
                            quote_identifiers=False, identify=False)
        merged = eliminate_ctes(merge_subqueries(qualified))
    except SqlglotError as exc:
        raise QueryRefused(f"could not resolve the CTE or subquery: {_first_line(exc)}") from None
    except RecursionError:
        raise QueryRefused("query is nested too deeply to flatten") from None
    check_depth(merged, " once its CTEs and subqueries are merged")
    if not isinstance(merged, exp.Select) or merged.args.get("with_") is not None \
            or any(node is not merged for node in merged.find_all(exp.Select)):
        raise QueryRefused(f"CTE or subquery refused: it does not flatten into one SELECT on the "
                           f"table ({_ONE_ROW_PER_ROW})")
    if not merged.args.get("joins"):
        _unqualify(merged)
    return merged


def _unqualify(select: exp.Select) -> None:
    """Drop the table qualifiers `qualify` added: the flattened query reads one table, and its
    labels then read as the analyst would write them (FLOOR(age / 10), not FLOOR(people.age / 10))."""
    for column in select.find_all(exp.Column):
        column.set("table", None)
    source = select.args["from_"].this
    if source.alias.lower() == source.name.lower():
        source.set("alias", None)


def _unwrap_tables(select: exp.Select) -> None:
    """`FROM (t) AS c` (a parenthesized table, as SmartNoise's tests write it) is `FROM t AS c`:
    rewritten in place, in FROM and in each JOIN (docs/theory.md §26)."""
    for node in [select.args.get("from_"), *(select.args.get("joins") or [])]:
        inner = node.this if node is not None else None
        if isinstance(inner, exp.Subquery) and isinstance(inner.this, exp.Table) \
                and {k for k, v in inner.args.items() if v} <= {"this", "alias"} \
                and not inner.this.args.get("alias"):
            table = inner.this.copy()
            if inner.args.get("alias") is not None:
                table.set("alias", inner.args["alias"].copy())
            inner.replace(table)


def _check_bodies(select: exp.Select, policy: Policy) -> None:
    """Refuse, with the construct's name, each CTE or FROM-subquery that would not keep one row
    per row of one table, and each name that is neither an earlier CTE nor a policy table."""
    with_ = select.args.get("with_")
    visible: set[str] = set()
    if with_ is not None:
        for cte in with_.expressions:
            name = cte.alias_or_name.lower()
            if name in visible:
                raise QueryRefused(f"CTE {cte.alias_or_name} is defined twice: give each CTE its own name")
            if name in policy.tables or name in policy.public_tables or name in policy.parent_tables:
                raise QueryRefused(f"CTE {cte.alias_or_name} has the name of a table: rename the CTE")
            if cte.args.get("materialized") is not None:
                raise QueryRefused(f"MATERIALIZED on CTE {cte.alias_or_name} refused: write "
                                   "WITH name AS (SELECT ...)")
            _check_body(cte.this, f"CTE {cte.alias_or_name}", visible | {name}, name, policy)
            visible.add(name)
    source = select.args["from_"].this
    if isinstance(source, exp.Subquery):
        _check_body(source, "subquery in FROM", visible, None, policy)
    else:
        _check_source(source, "the query", visible, None, policy)
    for join in select.args.get("joins") or []:
        joined = join.this.name.lower() if isinstance(join.this, exp.Table) else None
        if joined not in policy.public_tables and joined not in policy.parent_tables \
                and joined not in policy.tables:
            raise QueryRefused(f"JOIN refused: {join.this.sql(dialect='duckdb')} is not a public "
                               f"table, a parent table or a private table of the policy "
                               f"({JOIN_ACCEPTED})")


def _check_body(body: exp.Expression, what: str, visible: set[str], own: str | None,
                policy: Policy) -> None:
    """One CTE or FROM-subquery body: a plain SELECT over one table, CTE or FROM-subquery."""
    while isinstance(body, exp.Subquery):
        body = body.this
    if not isinstance(body, exp.Select):
        raise QueryRefused(f"{type(body).__name__.upper()} in {what} refused: {_ONE_ROW_PER_ROW}")
    for key, clause in _BODY_CLAUSES.items():
        if body.args.get(key):
            raise QueryRefused(f"{clause} in {what} refused: {_ONE_ROW_PER_ROW}")
    aggregate = next((node for node in body.find_all(exp.AggFunc)), None)
    if aggregate is not None:
        raise QueryRefused(f"aggregate {aggregate.sql(dialect='duckdb')} in {what} refused: an "
                           "answer aggregates once, with noise; write the aggregate in the outer "
                           "SELECT and filter or compute columns in the CTE")
    if body.args.get("from_") is None:
        raise QueryRefused(f"{what} without FROM refused: {_ONE_ROW_PER_ROW}")
    source = body.args["from_"].this
    if isinstance(source, exp.Subquery):
        _check_body(source, f"subquery in {what}", visible, own, policy)
    else:
        _check_source(source, what, visible, own, policy)


def _check_source(source: exp.Expression, what: str, visible: set[str], own: str | None,
                  policy: Policy) -> None:
    """A FROM source inside a flattened query: a policy table or an earlier CTE, by name."""
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        raise QueryRefused(f"FROM in {what} must name a table or an earlier CTE")
    if source.args.get("catalog") or source.args.get("db"):
        raise QueryRefused(f"qualified table name {source.sql()} refused: name the table alone")
    name = source.name.lower()
    if name in policy.public_tables or name in policy.parent_tables:
        kind = "public" if name in policy.public_tables else "parent"
        raise QueryRefused(f"{kind} table {source.name} refused in {what}: join it in the outer "
                           f"query ({JOIN_ACCEPTED})")
    if own is not None and name == own:
        raise QueryRefused(f"{what} reads itself: a CTE may only read a table or an earlier CTE")
    if name not in visible and name not in policy.tables:
        tables = ", ".join(sorted(policy.tables))
        raise QueryRefused(f"unknown table {source.name!r} in {what} (tables: {tables})")


def _schema(policy: Policy) -> MappingSchema:
    """The policy's tables as sqlglot knows them: the privacy unit and the policy columns, and
    each public or parent table's columns."""
    lookups: dict[str, LookupTable] = {**policy.public_tables, **policy.parent_tables}
    tables: dict[str, object] = {
        name: {col: _SQL_TYPES.get(spec.type, "UNKNOWN") for col, spec in lookup.columns.items()}
        for name, lookup in lookups.items()}
    for name, table in policy.tables.items():
        columns = {col: _SQL_TYPES.get(spec.type, "UNKNOWN") for col, spec in table.columns.items()}
        if table.privacy_unit is not None and not table.chain:  # a chained unit is derived
            columns[table.unit] = "UNKNOWN"
        tables[name] = columns
    return MappingSchema(tables, dialect="duckdb")


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
