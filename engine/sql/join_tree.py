"""Bind a query's joins into a JoinTree: the tree of equi-joins that bounds a unit's rows.

Every equality of two columns of two tables, in an ON or (for inner joins) in WHERE, is a
candidate edge when `join.fanout` accepts it in one direction: a public table's key, a parent
table's key from its child, two private tables' common privacy unit. The tree is the spanning
arborescence of candidate edges, rooted at a private table, with the smallest bound on a unit's
joined rows (m_root times the product of the edges' fanouts, docs/theory.md §25); every other
condition is a filter, which only removes rows. A LEFT JOIN's table hangs below a table before
it, by an edge of its own ON. When no tree exists the first table it cannot reach is refused,
naming why. Everything here reads the query text and the policy only, never the data.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import QueryRefused
from ..plan import EdgeKind, JoinEdge, JoinedTable, JoinTree
from ..policy import TableSpec
from ..sql_types import SqlType
from .join import ACCEPTED, Source, Table, fanout, join_columns, refusal
from .scope import Scope

MAX_STEPS = 100_000  # partial trees the search may visit before the query is refused


@dataclass(frozen=True)
class _Ref:
    """A column of one of the query's tables: 0 is the FROM table, k the k-th joined one."""

    index: int
    name: str


@dataclass(frozen=True)
class _Edge:
    parent: int
    child: int
    kind: EdgeKind
    fanout: int
    origin: int  # the table whose ON holds the equality, or -1 for WHERE


def bind_joins(select: exp.Select, table: TableSpec, aliases: set[str], sources: list[Source],
               scope: Scope) -> tuple[JoinTree | None, exp.Expression | None]:
    """The join tree of the query (None without joins) and its bound WHERE."""
    raw_where = select.args["where"].this if select.args.get("where") is not None else None
    if not sources:
        return None, None if raw_where is None else _filter(raw_where, scope, "WHERE")
    tables: list[Table] = [table, *(s.table for s in sources)]
    names = [frozenset(aliases), *(s.names for s in sources)]
    inner = not any(s.left for s in sources)
    terms: list[tuple[exp.Expression, int]] = [
        (term, k) for k, source in enumerate(sources, 1) for term in _conjuncts(source.on)]
    terms += [(term, -1) for term in _conjuncts(raw_where)]
    for k, source in enumerate(sources, 1):
        if source.left:
            _check_left_on(k, source, tables, names)
    edges = [edge for term, origin in terms for edge in _edges(term, origin, tables, names)]
    allowed = [e for e in edges if _fits(e, sources)]
    found = _best_tree(tables, sources, allowed)
    if found is None:
        raise QueryRefused(_why_not(tables, names, sources, terms, allowed, inner))
    root, chosen = found
    bound = [(_bind_term(term, tables, names, scope), _place(term, origin, tables, names, scope, inner))
             for term, origin in terms]
    ons = [_and([b for b, place in bound if place == k]) for k in range(1, len(tables))]
    joined = tuple(JoinedTable(s.table, s.left, on, s.label) for s, on in zip(sources, ons, strict=True))
    shown = [table.name, *(s.shown for s in sources)]
    tree_edges = tuple(JoinEdge(shown[e.parent], shown[e.child], e.kind, e.fanout) for e in chosen)
    root_table = tables[root]
    assert isinstance(root_table, TableSpec)
    return JoinTree(joined, root_table, tree_edges), _and([b for b, place in bound if place == 0])


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND terms of a condition."""
    while isinstance(node, exp.Paren):
        node = node.this
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _and(terms: list[exp.Expression]) -> exp.Expression | None:
    """The terms joined by AND, each OR term parenthesised so that it stays one term."""
    if not terms:
        return None
    wrapped = [exp.Paren(this=term) if isinstance(term, exp.Connector) else term for term in terms]
    joined = wrapped[0]
    for term in wrapped[1:]:
        joined = exp.And(this=joined, expression=term)
    return joined


def _ref(node: exp.Expression, tables: list[Table], names: list[frozenset[str]]) -> _Ref | None:
    """The table and join column a column reference names, or None (not one of one table)."""
    if not isinstance(node, exp.Column) or node.args.get("db") or node.args.get("catalog") \
            or node.is_star:
        return None
    name, qualifier = node.name.lower(), node.table.lower()
    if qualifier:
        owner = next((i for i, n in enumerate(names) if qualifier in n), None)
        return _Ref(owner, name) if owner is not None and name in join_columns(tables[owner]) else None
    owners = [i for i, t in enumerate(tables) if name in join_columns(t)]
    return _Ref(owners[0], name) if len(owners) == 1 else None


def _sides(term: exp.Expression, tables: list[Table],
           names: list[frozenset[str]]) -> tuple[_Ref, _Ref] | None:
    """The two columns an equality of columns of two different tables compares."""
    if not isinstance(term, exp.EQ):
        return None
    a, b = _ref(term.this, tables, names), _ref(term.expression, tables, names)
    if a is None or b is None or a.index == b.index:
        return None
    return a, b


def _edges(term: exp.Expression, origin: int, tables: list[Table],
           names: list[frozenset[str]]) -> list[_Edge]:
    """The candidate edges an equality gives, one per direction `fanout` accepts."""
    sides = _sides(term, tables, names)
    if sides is None:
        return []
    found = []
    for p, c in (sides, sides[::-1]):
        edge = fanout(tables[p.index], p.name, tables[c.index], c.name)
        if edge is not None:
            found.append(_Edge(p.index, c.index, edge[0], edge[1], origin))
    return found


def _fits(edge: _Edge, sources: list[Source]) -> bool:
    """A LEFT JOIN's table is a child only by an edge of its own ON from a table before it,
    and a parent only of tables joined after it (§25: its subtree is what it pads)."""
    child_left = edge.child > 0 and sources[edge.child - 1].left
    parent_left = edge.parent > 0 and sources[edge.parent - 1].left
    if child_left and (edge.origin != edge.child or edge.parent > edge.child):
        return False
    return not (parent_left and edge.child < edge.parent)


def _check_left_on(k: int, source: Source, tables: list[Table], names: list[frozenset[str]]) -> None:
    """A LEFT JOIN's ON compares its table with one table before it, and no other."""
    if source.on is None:
        return
    named = {ref.index for column in source.on.find_all(exp.Column)
             if (ref := _ref(column, tables, names)) is not None} - {k}
    if any(i > k for i in named):
        later = tables[max(named)].name
        raise QueryRefused(f"JOIN refused: the ON of LEFT JOIN {tables[k].name} names {later}, "
                           "joined after it; an ON may name only the tables before it")
    if len(named) > 1:
        shown = " and ".join(sorted(tables[i].name for i in named))
        raise QueryRefused(f"JOIN refused: the ON of LEFT JOIN {tables[k].name} names {shown}; a "
                           "LEFT JOIN's ON may compare its table with one table before it")


def _best_tree(tables: list[Table], sources: list[Source],
               edges: list[_Edge]) -> tuple[int, list[_Edge]] | None:
    """The root and edges of the tree with the smallest bound m_root · Π fanout, or None."""
    incoming: dict[int, list[_Edge]] = {i: [] for i in range(len(tables))}
    for edge in sorted(edges, key=lambda e: e.fanout):
        if not any(e.parent == edge.parent for e in incoming[edge.child]):
            incoming[edge.child].append(edge)
    best: tuple[int, int, list[_Edge]] | None = None
    steps = 0
    for root, spec in enumerate(tables):
        if not isinstance(spec, TableSpec) or (root > 0 and sources[root - 1].left) \
                or not _reaches_all(root, incoming, len(tables)):
            continue
        order = [i for i in range(len(tables)) if i != root]
        chosen: dict[int, _Edge] = {}

        def search(i: int, product: int, root: int = root, order: list[int] = order,
                   chosen: dict[int, _Edge] = chosen) -> None:
            nonlocal best, steps
            steps += 1
            if steps > MAX_STEPS:
                raise QueryRefused(f"JOIN refused: too many join conditions to find the tree of "
                                   f"joins in {MAX_STEPS} steps; join fewer tables")
            if best is not None and product >= best[0]:
                return
            if i == len(order):
                if _is_tree(root, chosen):
                    best = (product, root, [chosen[c] for c in order])
                return
            for edge in incoming[order[i]]:
                chosen[order[i]] = edge
                search(i + 1, product * edge.fanout)
            chosen.pop(order[i], None)

        search(0, spec.max_rows_per_unit)
    return None if best is None else (best[1], best[2])


def _reaches_all(root: int, incoming: dict[int, list[_Edge]], n: int) -> bool:
    reached, frontier = {root}, [root]
    while frontier:
        node = frontier.pop()
        for child, edges in incoming.items():
            if child not in reached and any(e.parent == node for e in edges):
                reached.add(child)
                frontier.append(child)
    return len(reached) == n


def _is_tree(root: int, chosen: dict[int, _Edge]) -> bool:
    """Whether following each table's chosen parent leads every table to the root."""
    for start in chosen:
        node, seen = start, 0
        while node != root:
            node = chosen[node].parent
            seen += 1
            if seen > len(chosen):
                return False
    return True


def _why_not(tables: list[Table], names: list[frozenset[str]], sources: list[Source],
             terms: list[tuple[exp.Expression, int]], edges: list[_Edge], inner: bool) -> str:
    """The one-line refusal naming the first table (in the order written) no tree reaches."""
    incoming: dict[int, list[_Edge]] = {i: [e for e in edges if e.child == i] for i in range(len(tables))}
    reached, frontier = {0}, [0]
    while frontier:
        node = frontier.pop()
        for child, found in incoming.items():
            if child not in reached and any(e.parent == node for e in found):
                reached.add(child)
                frontier.append(child)
    k = next((i for i in range(1, len(tables)) if i not in reached), None)
    if k is None:
        return ("JOIN refused: no tree of the joins bounds a unit's rows: a LEFT JOIN's table "
                f"joins, by its own ON, one table before it ({ACCEPTED})")
    table, main = tables[k], tables[0]
    assert isinstance(main, TableSpec)
    mine = [term for term, origin in terms if origin == k or (inner and origin != k
            and any(_ref(c, tables, names) == _Ref(k, c.name.lower()) for c in term.find_all(exp.Column)))]
    for term in mine:
        if not isinstance(term, exp.EQ) or not isinstance(term.this, exp.Column) \
                or not isinstance(term.expression, exp.Column):
            continue
        for column in (term.this, term.expression):
            owner = next((i for i, n in enumerate(names) if column.table.lower() in n), None)
            if column.table and owner is not None and column.name.lower() not in join_columns(tables[owner]):
                known = ", ".join(sorted(tables[owner].columns))
                return (f"JOIN refused: unknown column {column.name!r} in table {tables[owner].name} "
                        f"(columns: {known})")
        a, b = _ref(term.this, tables, names), _ref(term.expression, tables, names)
        if isinstance(table, TableSpec) and (a is None or b is None):
            return refusal(table, main, table.unit, main.unit, main)
        if a is not None and b is not None and a.index == b.index:
            return f"JOIN refused: ON must compare {_what(main, table)}"
        if a is None or b is None or k not in (a.index, b.index):
            continue
        mine_side, other = (a, b) if a.index == k else (b, a)
        return refusal(table, tables[other.index], mine_side.name, other.name, main)
    on = sources[k - 1].on
    if on is not None:
        return (f"JOIN refused: ON {on.sql(dialect='duckdb')} is not one equality of two columns "
                f"joining {table.name} to the tables before it ({ACCEPTED})")
    return (f"JOIN refused: a join without ON (or a WHERE equality joining {table.name} on a key) "
            f"pairs every row with every row ({ACCEPTED})")


def _what(main: TableSpec, table: Table) -> str:
    if isinstance(table, TableSpec):
        return f"the unit of {main.name} with that of {table.name}"
    return f"a column of {main.name} with {table.name}.{table.key}"


def _internal(ref: _Ref, names: list[frozenset[str]], tables: list[Table]) -> str:
    """A join column's name in the rows the rewritten query reads (engine/rewrite.py): a
    table joined more than once is named by its one alias."""
    if ref.index == 0:
        return ref.name
    table = tables[ref.index]
    label = table.name if table.name in names[ref.index] else next(iter(names[ref.index]))
    return f"{label}.{ref.name}"


def _bind_term(term: exp.Expression, tables: list[Table], names: list[frozenset[str]],
               scope: Scope) -> exp.Expression:
    """An equality of join columns as an equality of the rows' names; any other term type
    checked and bound as a filter."""
    sides = _sides(term, tables, names)
    edges = _edges(term, 0, tables, names)
    if sides is None or not edges:
        return _filter(term, scope, "WHERE" if term.find_ancestor(exp.Join) is None else "ON")
    equal = exp.EQ(this=exp.column(_internal(sides[0], names, tables), quoted=True),
                   expression=exp.column(_internal(sides[1], names, tables), quoted=True))
    edge = edges[0]
    referenced = edge.child if edge.kind == EdgeKind.CHAIN else edge.parent
    held = tables[referenced]
    if edge.kind in (EdgeKind.CHAIN, EdgeKind.CHILD) and isinstance(held, TableSpec) and held.chain:
        # A referenced row whose own unit is NULL is a unit of its own, and so is each row
        # referencing it: they must not meet, or one such unit would meet unboundedly many.
        unit = exp.column(_internal(_Ref(referenced, held.unit), names, tables), quoted=True)
        return exp.And(this=equal, expression=exp.Not(this=exp.Is(this=unit, expression=exp.Null())))
    return equal



def _filter(term: exp.Expression, scope: Scope, where: str) -> exp.Expression:
    if scope.scalar_type(term, where) not in (SqlType.BOOL, SqlType.NULL):
        raise QueryRefused(f"{where} must be a condition (true/false), not a value")
    return scope.rewrite_scalar(term)


def _place(term: exp.Expression, origin: int, tables: list[Table], names: list[frozenset[str]],
           scope: Scope, inner: bool) -> int:
    """Where a term is evaluated (0: WHERE): with inner joins only, the ON of the last table
    it names, the same rows; with a LEFT JOIN in the query, where it is written."""
    last = 0
    for column in term.find_all(exp.Column):
        ref = _ref(column, tables, names)
        if ref is not None:
            last = max(last, ref.index)
            continue
        spec = scope.spec_of(column)
        owner = spec.name.split(".", 1)[0] if spec is not None and "." in spec.name else None
        last = max(last, next((i for i, n in enumerate(names) if i and owner in n), 0))
    if inner:
        return last
    if origin > 0 and last > origin:
        raise QueryRefused(f"JOIN refused: the ON of {tables[origin].name} names {tables[last].name}, "
                           "joined after it; an ON may name only its table and the tables before it")
    return max(origin, 0)
