"""The policy's units reached through foreign keys: reading `privacy_unit: {through: <column>,
references: <table>.<column>}` and following each chain up to the table that holds the unit,
refusing unknown tables, cycles, references to a non-key column and chains that reach no unit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .errors import PolicyError
from .policy import ColumnSpec, TableSpec, UnitLink
from .policy_fields import check_mapping
from .sql_types import SqlType

FORM = "{through: <column>, references: <table>.<column>}"
"""The chained form of `privacy_unit`, as errors name it."""


def unit_record(table: TableSpec) -> str | None:
    """How the ledger's binding records a table's privacy unit: the unit column, and for a
    chained table the links its rows reach it through, so that a changed chain is a changed
    unit (engine/accounting/ledger_binding.py)."""
    if not table.chain:
        return table.privacy_unit
    return f"{table.privacy_unit} through " + ", ".join(link.describe() for link in table.chain)


def parse_link(raw: Any, path: str) -> UnitLink:
    """`privacy_unit: {through: o_custkey, references: customer.c_custkey}` as a link (names
    lower-cased); the referenced table is checked once every table is read (`resolve`)."""
    spec = check_mapping(raw, path, required={"through", "references"}, optional=set())
    column = spec["through"]
    if not isinstance(column, str) or not column.strip():
        raise PolicyError(f"{path}.through: expected the name of this table's column holding the "
                          f"reference, got {column!r}")
    target = spec["references"]
    parts = target.split(".") if isinstance(target, str) else []
    if len(parts) != 2 or not all(part.strip() for part in parts):
        raise PolicyError(f"{path}.references: expected <table>.<column> (a private table's "
                          f"privacy unit or a chained table's unique key), got {target!r}")
    return UnitLink(column.strip().lower(), parts[0].strip().lower(), parts[1].strip().lower())


def resolve(tables: Mapping[str, TableSpec], links: Mapping[str, UnitLink],
            public: Mapping[str, Any], parents: Mapping[str, Any]) -> dict[str, TableSpec]:
    """Every private table, a chained one (`links`: table -> its own link) given the whole chain
    up to the table holding its unit and, as `privacy_unit`, that table's unit column."""
    resolved = dict(tables)
    for name, link in links.items():
        chain = _follow(name, link, tables, links, public, parents)
        root = tables[chain[-1].table]
        unit = root.unit
        table = tables[name]
        if table.dependence_group is not None:
            raise PolicyError(f"tables.{name}.dependence_group: {name} reaches its privacy unit "
                              f"through {link.describe()}, so its units' groups are those of "
                              f"{root.name}; declare dependence_group on {root.name}, the table "
                              "holding the unit")
        if unit in table.columns:
            raise PolicyError(f"tables.{name}.columns.{unit}: the rows of {name} carry the privacy unit "
                              f"{root.name}.{unit} through {link.describe()}, so {unit} names "
                              "the unit there; drop the column from the policy")
        resolved[name] = replace(table, privacy_unit=unit, chain=chain)
    return {name: _with_link_columns(table, tables, links) for name, table in resolved.items()}


def _with_link_columns(table: TableSpec, tables: Mapping[str, TableSpec],
                       links: Mapping[str, UnitLink]) -> TableSpec:
    """`table` with the keys its chain joins on that `columns` does not list (its own foreign
    key, a key another chained table references) added as link-only columns, typed as the
    other end when the owner lists it there, else int (checked when the data is opened)."""
    ends: dict[str, tuple[str, str]] = {}  # this table's key -> the other end (table, column)
    own = links.get(table.name)
    if own is not None:
        ends[own.column] = (own.table, own.key)
    if own is not None:  # a table holding its unit is referenced by its unit, no column
        for other, link in links.items():
            if link.table == table.name:
                ends.setdefault(link.key, (other, link.column))
    added = {}
    for column, (other, key) in ends.items():
        if column in table.columns or column == table.privacy_unit:
            continue
        listed = tables[other].columns.get(key) if other in tables else None
        added[column] = ColumnSpec(column, listed.type if listed is not None else SqlType.INT,
                                   link_only=True)
    return replace(table, columns={**table.columns, **added}) if added else table


def _follow(name: str, link: UnitLink, tables: Mapping[str, TableSpec],
            links: Mapping[str, UnitLink], public: Mapping[str, Any],
            parents: Mapping[str, Any]) -> tuple[UnitLink, ...]:
    """The links from table `name` to the table holding the unit, each checked."""
    chain: list[UnitLink] = []
    seen = [name]
    current = name
    while True:
        path = f"tables.{current}.privacy_unit.references"
        target = tables.get(link.table)
        if target is None:
            kind = "public" if link.table in public else "parent" if link.table in parents \
                else "unknown"
            raise PolicyError(f"{path}: expected a private table of the policy "
                              f"({', '.join(sorted(tables))}), got {kind} table {link.table!r}")
        chain.append(link)
        if link.table in seen:
            cycle = " -> ".join([*seen[seen.index(link.table):], link.table])
            raise PolicyError(f"{path}: the chain {cycle} is a cycle and never reaches a table "
                              f"that holds its privacy unit; end it at a table with "
                              "privacy_unit: <column>")
        seen.append(link.table)
        if link.table in links:
            current, link = link.table, links[link.table]
            continue
        if target.privacy_unit is None:
            raise PolicyError(f"{path}: {target.name} has no privacy unit (each row is one "
                              "individual), so the chain reaches no unit; reference a table with "
                              "privacy_unit: <column> or a chained table")
        if link.key != target.privacy_unit:
            raise PolicyError(f"{path}: {target.name}.{link.key} is not a key: a table that "
                              f"holds its unit is referenced by its privacy unit "
                              f"({target.name}.{target.privacy_unit})")
        return tuple(chain)
