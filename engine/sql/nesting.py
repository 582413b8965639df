"""Finding a two-level query in the text: a CTE or FROM-subquery grouped by a privacy unit,
which an outer query aggregates (docs/theory.md §29). Read from the text and the policy only."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..policy import Policy

PER_UNIT = "per_unit"  # the name an unnamed FROM-subquery's rows are read by


@dataclass(frozen=True)
class Nested:
    """A query split at its per-unit CTE or FROM-subquery."""

    name: str  # the name the outer query reads the per-unit rows by (lower-cased)
    what: str  # how refusals name the inner query: "CTE per_visitor", "subquery in FROM"
    inner: exp.Select  # the per-unit query, with the CTEs written before it
    outer: exp.Select  # the outer query, reading `name` as a table, with the CTEs after it


def per_unit_source(select: exp.Select, policy: Policy) -> Nested | None:
    """The split of `select` when a CTE, or the subquery in its FROM, groups by a privacy unit
    of the policy (by name, an alias or a position); None otherwise."""
    units = {t.privacy_unit for t in policy.tables.values() if t.privacy_unit is not None}
    with_ = select.args.get("with_")
    ctes = list(with_.expressions) if with_ is not None else []
    for i, cte in enumerate(ctes):
        body = _body(cte.this)
        if body is not None and _groups_by(body, units):
            inner = body.copy()
            if i:
                inner.set("with_", exp.With(expressions=[c.copy() for c in ctes[:i]]))
            outer = select.copy()
            outer.set("with_", exp.With(expressions=[c.copy() for c in ctes[i + 1:]])
                      if ctes[i + 1:] else None)
            name = cte.alias_or_name
            return Nested(name.lower(), f"CTE {name}", inner, outer)
    source = select.args.get("from_")
    subquery = source.this if source is not None and isinstance(source.this, exp.Subquery) else None
    body = _body(subquery) if subquery is not None else None
    if subquery is None or body is None or not _groups_by(body, units):
        return None
    inner = body.copy()
    if with_ is not None:
        inner.set("with_", with_.copy())
    name = (subquery.alias or PER_UNIT).lower()
    outer = select.copy()
    outer.set("with_", None)
    outer.set("from_", exp.From(this=exp.to_table(name)))
    return Nested(name, "subquery in FROM", inner, outer)


def _body(node: exp.Expression) -> exp.Select | None:
    while isinstance(node, exp.Subquery):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _groups_by(body: exp.Select, units: set[str]) -> bool:
    """Whether a GROUP BY item of `body` names one of `units`, directly, through a SELECT
    alias or by its position."""
    group = body.args.get("group")
    if group is None:
        return False
    outputs = body.expressions
    for item in group.expressions:
        target = item
        if isinstance(item, exp.Literal) and not item.is_string and item.this.isdigit() \
                and 1 <= int(item.this) <= len(outputs):
            target = outputs[int(item.this) - 1]
        elif isinstance(item, exp.Column) and not item.table:
            named = [o for o in outputs if isinstance(o, exp.Alias) and o.alias.lower() == item.name.lower()]
            target = named[0] if len(named) == 1 else item
        target = target.this if isinstance(target, exp.Alias) else target
        if isinstance(target, exp.Column) and target.name.lower() in units:
            return True
    return False
