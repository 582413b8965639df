"""Rewrite a QueryPlan into the one query (a sqlglot tree) that computes its exact measurements.

The query reads the rows per-unit bounding keeps (the bounded copy of a table with a privacy
unit for the columns the query reads, made once per column set by the backend, see
engine/backends/bounding.py and docs/theory.md §28), filters, clamps
numeric columns to the policy bounds and joins the public domain so that every group appears,
empty or not. A histogram (MEDIAN, QUANTILE_CONT, MIN, MAX) is counted in a pass of its own:
one COUNT grouped by each row's bin, rather than one aggregate per bin. The SQL is a function
of the query text and the policy only, never of the data.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

from sqlglot import exp

from .aggregates.per_unit import literal
from .plan import GroupKey, JoinTree, Measurement, QueryPlan
from .plan_memo import per_plan
from .policy import Policy, TableSpec
from .sql.join import joined_column
from .stored_clamps import companion_types, reads_stored, stored


def rewrite(plan: QueryPlan) -> exp.Select:
    """Return the query (a sqlglot tree the backend renders) yielding one row per group: group
    keys, then each measurement.

    A table with a privacy unit is always read through its bounded copy (see
    engine/backends/bounding.py), whether or not any unit is over the bound, so that the SQL, and
    everything `explain` shows, cannot tell whether one is. The copy is the one bounded by the
    columns the query reads (`read_columns`), so the answer depends on no other column. An
    aggregate of a bare bounded column reads the copy's stored clamped value (§34)."""
    columns = read_columns(plan)
    plan = stored(plan)
    source = _bounded_rows(plan, columns)
    names = [col.name for col in plan.group_by]
    plain = [m for m in plan.measurements if not m.kind.binned]
    parts: list[tuple[str, exp.Select]] = []
    where: dict[str, str] = {}  # measurement name -> the part computing it
    cells = [(cell, sql) for m in plain
             for cell, sql in zip(m.cells, m.kind.cell_sql(m.operand, plan.table,
                                                          exp.column(m.row, quoted=True)),
                                  strict=True)]
    if not plan.group_by and plain and len(plain) == len(plan.measurements):
        return _one_row(cells, source)
    if plain or len(plain) == len(plan.measurements):
        aggregates = (exp.alias_(sql, cell, quoted=True) for cell, sql in cells)
        parts.append(("agg", _grouped(_over_rows(source, [*_keys(names), *aggregates]), names)))
        where.update((m.name, "agg") for m in plain)
    for m in plan.measurements:
        if m.kind.binned:
            alias = f"bins{len(parts) - (1 if plain else 0)}"
            parts.append((alias, _binned(m, source, names)))
            where[m.name] = alias
    values = [
        exp.alias_(exp.func("COALESCE", exp.column(cell, where[m.name], quoted=True),
                            exp.Literal.number(0)), cell, quoted=True)
        for m in plan.measurements for cell in m.cells
    ]
    if not plan.group_by:
        query = exp.select(*values).from_(parts[0][1].subquery(parts[0][0], copy=False), copy=False)
        for alias, part in parts[1:]:
            query = query.join(part.subquery(alias, copy=False), join_type="cross", copy=False)
        return query
    domain_keys = [exp.column(name, "domain", quoted=True) for name in names]
    query = exp.select(*(exp.alias_(k, k.name, quoted=True) for k in domain_keys), *values) \
        .from_(_domain(plan.group_by, plan.key_rows), copy=False)
    for alias, part in parts:
        on = exp.and_(*(exp.EQ(this=exp.column(name, "domain", quoted=True),
                               expression=exp.column(name, alias, quoted=True)) for name in names))
        query = query.join(part.subquery(alias, copy=False), on=on, join_type="left", copy=False)
    return query.order_by(*domain_keys, copy=False)


def _one_row(cells: list[tuple[str, exp.Expr]], source: exp.Select) -> exp.Select:
    """An ungrouped query of plain aggregates: one SELECT of them over the rows, each that is
    NULL over no rows (all but COUNT) as COALESCE(aggregate, 0), the value the joined form
    gives; one level fewer to plan than that form (a tenth of a millisecond per query)."""
    return _over_rows(source, [exp.alias_(sql if isinstance(sql, exp.Count) else exp.func(
        "COALESCE", sql, exp.Literal.number(0)), cell, quoted=True) for cell, sql in cells])


def _over_rows(source: exp.Select, projections: list[exp.Expr]) -> exp.Select:
    """`projections` over the rows `source` selects: over its FROM and WHERE directly when it
    selects only bare columns (or the literal 1), so they read the very same rows, else over it
    as the subquery `rows`. The choice depends on the plan only; the flat form is one level
    fewer for DuckDB to bind (about 0.08 ms of a warm COUNT(*), benchmarks/RESULTS.md)."""
    if all((isinstance(item, exp.Column) and not item.table) or item == exp.Literal.number(1)
           for item in source.expressions):
        flat = source.copy()  # the binned parts still read `source` as it is
        flat.set("expressions", projections)
        return flat
    return exp.select(*projections).from_(source.subquery("rows", copy=False), copy=False)


def _keys(names: list[str]) -> list[exp.Expr]:
    return [exp.column(name, quoted=True) for name in names]


def _grouped(select: exp.Select, names: list[str], *more: exp.Expr) -> exp.Select:
    """`select` grouped by the group keys `names` (and `more`), if any."""
    keys = [*_keys(names), *more]
    return select.group_by(*keys, copy=False) if keys else select


def _binned(m: Measurement, source: exp.Select, names: list[str]) -> exp.Select:
    """A binned measurement's cells (a histogram's counts) per group in one pass: each bounded
    row's cell index (from a first guess computed once per row), one COUNT grouped by the groups
    and that index, then the (at most groups
    x cells) counts turned into one column per cell (the SUM of the one count of its cell)."""
    index, row = exp.column("__cell", quoted=True), exp.column(m.row, quoted=True)
    guessed = exp.select(*_keys(names), row.copy(), exp.alias_(
        m.kind.guess_sql(m.operand, row), "__guess", quoted=True)).from_(
        source.subquery("rows"), copy=False)
    indexed = exp.select(*_keys(names), exp.alias_(
        m.kind.bin_sql(m.operand, row, exp.column("__guess", quoted=True)), "__cell",
        quoted=True)).from_(guessed.subquery("guessed", copy=False), copy=False)
    counted = _grouped(exp.select(*_keys(names), index.copy(), exp.alias_(
        exp.Count(this=index.copy()), "__count", quoted=True)).from_(
        indexed.subquery("indexed", copy=False), copy=False), names, index.copy())
    cells = [exp.alias_(exp.Sum(this=exp.Case(ifs=[exp.If(
        this=exp.EQ(this=index.copy(), expression=exp.Literal.number(i)),
        true=exp.column("__count", quoted=True))])), cell, quoted=True)
        for i, cell in enumerate(m.cells)]
    return _grouped(exp.select(*_keys(names), *cells).from_(
        counted.subquery("counted", copy=False), copy=False), names)


BOUNDED_CATALOG = "dpsql_bounded"


def bounded_table_path(table: TableSpec, columns: Collection[str] | None = None
                       ) -> tuple[str, str, str]:
    """Where the bounded copy of `table` for a query reading `columns` lives (None: every
    column; on DuckDB a compressed in-memory catalog; other backends map this name to their
    own). The copy of every column is named after the table, any other after the table and
    its sorted columns as JSON, `people["age","sick"]` (`copy_of` reads it back)."""
    scope = copy_scope(table, columns)
    name = table.name if scope is None else table.name + json.dumps(sorted(scope), separators=(",", ":"))
    return (BOUNDED_CATALOG, "main", name)


def copy_scope(table: TableSpec, columns: Collection[str] | None) -> frozenset[str] | None:
    """The column set whose rule bounds a query reading `columns` of `table`: None for every
    column (also when `columns` holds them all, on a table whose calibration no column set
    changes, and on a table without a privacy unit, whose one copy keeps every row), else
    those columns."""
    if columns is None or not table.scoped or table.privacy_unit is None:
        return None
    scope = frozenset(columns)
    unknown = sorted(scope - set(table.columns))
    if unknown:
        raise ValueError(f"{table.name} has no policy column {unknown[0]!r}")
    return None if scope == set(table.columns) else scope


def copy_of(policy: Policy, name: str) -> tuple[TableSpec, frozenset[str] | None] | None:
    """The table and column set (None: every column) of the bounded copy named `name` in
    `BOUNDED_CATALOG`; None for a name that is no copy of a policy table."""
    table = policy.tables.get(name)
    if table is not None:
        return table, None
    head, bracket, _ = name.partition("[")
    table = policy.tables.get(head)
    if not bracket or table is None or table.privacy_unit is None:
        return None
    try:
        columns = json.loads(name[len(head):])
    except ValueError:
        return None
    if not isinstance(columns, list) or not all(isinstance(c, str) and c in table.columns
                                                for c in columns):
        return None
    scope = copy_scope(table, columns)
    return (table, scope) if bounded_table_path(table, scope)[2] == name else None


def bounded_table(table: TableSpec, columns: Collection[str] | None = None) -> exp.Table:
    """The bounded copy of `table` for a query reading `columns` as a table reference."""
    catalog, schema, name = bounded_table_path(table, columns)
    return exp.Table(this=exp.to_identifier(name, quoted=True), db=exp.to_identifier(schema),
                     catalog=exp.to_identifier(catalog))


def copies_read(policy: Policy, query: exp.Expression, types: Mapping[str, Mapping[str, str]]
                ) -> dict[tuple[str, ...], list[tuple[str, str]]]:
    """The bounded copies of column sets that `query` reads, with (column, data type) pairs
    from `types` as `readable_tables` gives them: a backend's gate adds each the first time a
    query names it (there is one per column set, too many to make up front)."""
    out: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for ref in query.find_all(exp.Table):
        found = copy_of(policy, ref.name) if ref.catalog == BOUNDED_CATALOG else None
        if found is not None and found[1] is not None:
            table, scope = found
            out[bounded_table_path(table, scope)] = _copy_columns(table, types[table.name], scope)
    return out


def readable_tables(policy: Policy, types: Mapping[str, Mapping[str, str]]
                    ) -> dict[tuple[str, ...], list[tuple[str, str]]]:
    """Every table a rewritten query may read, with (column, data type) pairs from `types`
    (table -> column -> type): each policy table and, for one with a privacy unit, its bounded
    copy (the unit and the policy's columns), each public table the backend loads and each
    parent table's copy of one row per key. A backend's gate binds queries on them, empty."""
    tables: dict[tuple[str, ...], list[tuple[str, str]]] = {
        (name,): [(col, types[name][col]) for col in sorted(public.columns)]
        for name, public in policy.public_tables.items() if name in types}
    for name, parent in policy.parent_tables.items():
        if name in types:
            table = parent.one_per_key()
            tables[bounded_table_path(table)] = _copy_columns(table, types[name])
    for name, table in policy.tables.items():
        tables[(name,)] = [(col, types[name][col]) for col in bounded_columns(table)]
        tables[bounded_table_path(table)] = _copy_columns(table, types[name])
    return tables


def _copy_columns(table: TableSpec, types: Mapping[str, str],
                  columns: Collection[str] | None = None) -> list[tuple[str, str]]:
    """(column, data type) of the bounded copy for a query reading `columns`: the unit (if the
    table has one) and those policy columns, then the stored clamped values of the bounded
    numeric ones (§34)."""
    scope = copy_scope(table, columns)
    return [(col, types[col]) for col in bounded_columns(table, scope)] + \
        companion_types(table, types, scope)


def bounded_columns(table: TableSpec, columns: Collection[str] | None = None) -> list[str]:
    """The columns of the bounded copy for a query reading `columns` (None: every column): the
    privacy unit (a table whose rows are each an individual has none), then those policy
    columns, sorted."""
    scope = copy_scope(table, columns)
    own = sorted(table.columns if scope is None else scope)
    return own if table.privacy_unit is None else [table.unit] + own


def read_columns(plan: QueryPlan) -> frozenset[str]:
    """The policy columns of `plan.table` (plain names) the exact query reads from its rows:
    the WHERE filter, the group keys, each aggregate's argument and a join's key. Found in the
    row-level query itself (every other part reads only its output), so a new query form
    cannot read a column this misses; a function of the plan, never of the data."""
    rows = _bounded_rows(plan, None) if plan.inner is None else plan.inner.rows(bounded_table(plan.table))
    named = {col.name.lower() for col in rows.find_all(exp.Column) if not col.table.startswith("__other")}
    return frozenset(name for name in plan.table.columns if name in named)


@per_plan
def copies_to_bound(plan: QueryPlan) -> tuple[tuple[TableSpec, frozenset[str] | None], ...]:
    """Each table `plan` reads through a bounded copy (`plan.bounded_tables`) with the column set
    of that copy: the FROM table's `read_columns`, every column (None) of a joined table, whose
    copy the join reads whole (docs/theory.md §28). Remembered per plan: every run of a query
    asks it."""
    return tuple((table, read_columns(plan) if i == 0 else None)
                 for i, table in enumerate(plan.bounded_tables))


def _bounded_rows(plan: QueryPlan, columns: frozenset[str] | None) -> exp.Select:
    """Filtered rows of the bounded copy for the columns read, `columns` (None: of every
    column); a table whose rows are each an individual has one copy, of every row, read when an
    aggregate reads a stored clamped value, the table itself otherwise (§34).

    Rows whose group key is outside the public domain form groups that the domain join
    leaves out; bounding happened before, on the whole table, so they cannot displace
    in-domain rows."""
    table = plan.table
    items: list[exp.Expr] = [
        key.value.copy() if isinstance(key.value, exp.Column) and key.value.name == key.name
        else exp.alias_(key.value.copy(), key.name, quoted=True) for key in plan.group_by]
    needed = {key.name for key in plan.group_by}
    for m in plan.measurements:
        for column in m.kind.columns(m.operand):
            if column.name not in needed:
                needed.add(column.name)
                items.append(exp.column(column.name, quoted=True))
    for m in plan.measurements:
        value = m.kind.row_value(m.operand)
        if value is not None:
            items.append(exp.alias_(value, m.row, quoted=True))
    if any(m.kind.reads_unit for m in plan.measurements):
        items.append(exp.column(table.unit, quoted=True))
    if not items:
        items.append(exp.Literal.number(1))
    source_table: exp.Expression = bounded_table(table, columns) \
        if table.privacy_unit is not None or reads_stored(plan) else exp.to_table(table.name, quoted=True)
    if plan.inner is not None:  # a two-level query reads its per-unit rows (docs/theory.md §29)
        source_table = plan.inner.rows(source_table)
    if plan.unnest is not None:  # one row per item of the bounded rows' list (docs/theory.md §31)
        source_table = plan.unnest.rows(source_table)
    if plan.join is not None:
        return exp.select(*items).from_(_joined(source_table, plan.join, plan.where), copy=False)
    rows = exp.select(*items).from_(source_table, copy=False)
    if plan.where is not None:
        rows = rows.where(_scannable(_conjuncts(plan.where)), copy=False)
    return rows


def _joined(private: exp.Expression, tree: JoinTree, where: exp.Expression | None) -> exp.Expression:
    """The FROM table's rows joined to every joined table in the order written, each other
    table's columns renamed "<table>.<column>", each ON and the WHERE filtering them. A public
    table is read as it is (its key unique), a parent table through its copy of one row per
    key, a private table through its bounded copy: the join tree bounds a unit's rows (§25)."""
    private = private.copy()
    private.set("alias", exp.TableAlias(this=exp.to_identifier("__private", quoted=True)))
    aliases = {t.shown: "__other" if i == 0 else f"__other{i + 1}"
               for i, t in enumerate(tree.tables)}
    columns = [exp.alias_(exp.column(name, aliases[t.shown], quoted=True),
                          joined_column(t.table, name, t.label).name, quoted=True)
               for t in tree.tables for name in sorted(t.table.columns)]
    rows = exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier("__private", quoted=True)),
                      *columns).from_(private, copy=False)
    filters = [] if where is None else _conjuncts(_qualified(where, aliases))
    for joined in tree.tables:
        other = joined.table
        if joined.private is not None:
            source = bounded_table(joined.private)
        elif joined.parent is not None:
            source = bounded_table(joined.parent.one_per_key())
        else:
            source = exp.to_table(other.name, quoted=True)
        source.set("alias", exp.TableAlias(this=exp.to_identifier(aliases[joined.shown], quoted=True)))
        terms = [] if joined.on is None else _conjuncts(_qualified(joined.on, aliases))
        if not joined.left:  # an inner join's condition filters as well after it as in its ON
            filters += [t for t in terms if not _keyed(t)]
            terms = [t for t in terms if _keyed(t)]
        on = exp.and_(*terms, copy=False) if terms else exp.true()
        rows = rows.join(source, on=on, join_type="left" if joined.left else "inner", copy=False)
    if filters:
        rows = rows.where(_scannable(filters), copy=False)
    return rows.subquery("__joined", copy=False)


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    """The top-level AND terms of a condition (parentheses around them dropped)."""
    node = condition.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _keyed(term: exp.Expr) -> bool:
    """An equality of two columns: the join's key, which stays in its ON."""
    return isinstance(term, exp.EQ) and isinstance(term.this, exp.Column) \
        and isinstance(term.expression, exp.Column)


_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _scannable(terms: list[exp.Expr]) -> exp.Expr:
    """The AND of a WHERE's terms, each comparison of a guarded date or timestamp column
    (`CASE WHEN guard THEN column END < value`, engine/sql/scope.py) written as `guard AND
    column < value`: both are TRUE for exactly the same rows (the CASE is NULL where the guard
    is not TRUE, and a NULL comparison keeps no row), and the second is a filter the database
    applies while it scans (zone maps, no CASE per row). Other terms are kept as they are."""
    out: list[exp.Expr] = []
    for term in terms:
        if isinstance(term, _COMPARISONS):
            term = term.copy()
            for side in ("this", "expression"):
                value = term.args[side]
                ifs = value.args.get("ifs") if isinstance(value, exp.Case) else None
                if ifs and len(ifs) == 1 and value.args.get("default") is None \
                        and isinstance(ifs[0].args["true"], exp.Column):
                    guard = ifs[0].this.unnest()
                    out += [t for t in _conjuncts(guard) if t not in out]
                    term.set(side, ifs[0].args["true"].copy())
        out.append(term)
    if len(out) == 1:
        return out[0]
    return exp.and_(*(exp.paren(t, copy=False) if isinstance(t, exp.Connector) else t for t in out),
                    copy=False)


def _qualified(condition: exp.Expression, aliases: Mapping[str, str]) -> exp.Expression:
    """A condition over the rows' names ("<table>.<column>" for a joined table's) as one over
    the joined tables' own columns, each qualified by its table's alias."""
    condition = condition.copy()
    for column in list(condition.find_all(exp.Column)):
        table, _, name = column.name.partition(".")
        if name and table in aliases:
            column.replace(exp.column(name, aliases[table], quoted=True))
        elif not column.table:
            column.replace(exp.column(column.name, "__private", quoted=True))
    return condition


def _domain(group_by: tuple[GroupKey, ...], rows: tuple[tuple, ...] | None) -> exp.Expression:
    """The public group keys as a VALUES table: the cross product of every key's domain, or
    the plan's key rows when it lists them (a public table's rows, §32)."""
    if rows is not None:
        names = [col.name for col in group_by]
        listed = exp.values([tuple(literal(v) for v in row) for row in rows], alias="d", columns=names)
        return exp.select(*(exp.alias_(exp.column(name, "d", quoted=True), name, quoted=True)
                            for name in names)).from_(listed, copy=False).subquery("domain", copy=False)
    tables = [
        exp.values([(literal(v),) for v in col.keys], alias=f"d{i}", columns=[col.name])
        for i, col in enumerate(group_by)
    ]
    keys = [exp.alias_(exp.column(col.name, f"d{i}", quoted=True), col.name, quoted=True)
            for i, col in enumerate(group_by)]
    query = exp.select(*keys).from_(tables[0], copy=False)
    for table in tables[1:]:
        query = query.join(table, join_type="cross", copy=False)
    return query.subquery("domain", copy=False)
