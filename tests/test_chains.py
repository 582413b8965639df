"""A privacy unit reached through foreign keys (customer <- orders <- lineitem): the policy's
chained form and its errors, the derived unit of every row (NULL and dangling references each a
unit of their own), the per-table bound held against a hostile unit, the duplicated key refused
when the data is opened, and answers whose intervals cover the exact SQL answer
(docs/theory.md §25)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from dpsql.engine.errors import PolicyError
from dpsql.engine.policy import UnitLink
from dpsql.engine.policy_yaml import parse_policy

CHAIN: dict[str, Any] = {
    "budget": {"epsilon": 1000.0},
    "dependence": {"k": 1, "eta": 0.0},
    "tables": {
        "customer": {"privacy_unit": "c_custkey", "max_rows_per_unit": 1,
                     "columns": {"c_acctbal": {"type": "float", "lower": -1000, "upper": 10000}}},
        "orders": {"privacy_unit": {"through": "o_custkey", "references": "customer.c_custkey"},
                   "max_rows_per_unit": 3,
                   "columns": {"o_totalprice": {"type": "float", "lower": 0, "upper": 1000}}},
        "lineitem": {"privacy_unit": {"through": "l_orderkey", "references": "orders.o_orderkey"},
                     "max_rows_per_unit": 5,
                     "columns": {"l_quantity": {"type": "float", "lower": 0, "upper": 50},
                                 "l_partkey": {"type": "int", "lower": 1, "upper": 10}}},
        "part": {"public": True, "key": "p_partkey",
                 "columns": {"p_partkey": {"type": "int"}, "p_type": {"type": "str"}}},
    },
}


def chain_policy(**changes: Any) -> dict[str, Any]:
    """CHAIN with tables replaced (a table set to None is removed)."""
    policy = copy.deepcopy(CHAIN)
    for name, spec in changes.items():
        if spec is None:
            del policy["tables"][name]
        else:
            policy["tables"][name] = spec
    return policy


def test_the_issue_form_is_read_as_a_chain_to_the_customer() -> None:
    policy = parse_policy(CHAIN)
    orders, lineitem = policy.tables["orders"], policy.tables["lineitem"]
    assert orders.through == UnitLink("o_custkey", "customer", "c_custkey")
    assert lineitem.chain == (UnitLink("l_orderkey", "orders", "o_orderkey"),
                              UnitLink("o_custkey", "customer", "c_custkey"))
    # Every table of the chain has the customer's key as its unit; the links are not columns.
    assert {t.unit for t in policy.tables.values()} == {"c_custkey"}
    assert "l_orderkey" not in lineitem.columns and lineitem.max_rows_per_unit == 5
    assert policy.tables["customer"].through is None
    assert policy.referenced_keys("orders") == {"o_orderkey"}
    assert policy.referenced_keys("customer") == frozenset()


def test_names_are_case_insensitive_and_a_link_may_be_a_policy_column() -> None:
    lineitem = copy.deepcopy(CHAIN["tables"]["lineitem"])
    lineitem["privacy_unit"] = {"through": "L_OrderKey", "references": "Orders.O_ORDERKEY"}
    lineitem["columns"]["l_orderkey"] = {"type": "int"}
    spec = parse_policy(chain_policy(lineitem=lineitem)).tables["lineitem"]
    assert spec.through == UnitLink("l_orderkey", "orders", "o_orderkey")
    assert "l_orderkey" in spec.columns


def _chained(through: str, references: Any, **more: Any) -> dict[str, Any]:
    return {"privacy_unit": {"through": through, "references": references},
            "columns": {"x": {"type": "int", "lower": 0, "upper": 1}}, **more}


@pytest.mark.parametrize(("changes", "message"), [
    ({"orders": _chained("o_custkey", "shopper.c_custkey")},
     "tables.orders.privacy_unit.references: expected a private table of the policy "
     "(customer, lineitem, orders), got unknown table 'shopper'"),
    ({"orders": _chained("o_custkey", "part.p_partkey")},
     "got public table 'part'"),
    ({"orders": _chained("o_custkey", "customer.c_acctbal")},
     "tables.orders.privacy_unit.references: customer.c_acctbal is not a key: a table that holds "
     "its unit is referenced by its privacy unit (customer.c_custkey)"),
    ({"orders": _chained("o_custkey", "lineitem.l_orderkey")},
     "the chain orders -> lineitem -> orders is a cycle and never reaches a table that holds its "
     "privacy unit"),
    ({"lineitem": _chained("l_orderkey", "lineitem.l_orderkey")},
     "the chain lineitem -> lineitem is a cycle"),
    ({"customer": {"columns": {"c_acctbal": {"type": "float"}}}},
     "tables.orders.privacy_unit.references: customer has no privacy unit (each row is one "
     "individual), so the chain reaches no unit"),
    ({"orders": _chained("o_custkey", "customer")},
     "tables.orders.privacy_unit.references: expected <table>.<column>"),
    ({"orders": _chained("o_custkey", "customer.c_custkey.x")},
     "expected <table>.<column>"),
    ({"orders": _chained("", "customer.c_custkey")},
     "tables.orders.privacy_unit.through: expected the name of this table's column"),
    ({"orders": {"privacy_unit": {"through": "o_custkey"}, "columns": {"x": {"type": "int"}}}},
     "tables.orders.privacy_unit.references: required field is missing"),
    ({"orders": {"privacy_unit": {"through": "o_custkey", "references": "customer.c_custkey",
                                  "via": 1}, "columns": {"x": {"type": "int"}}}},
     "tables.orders.privacy_unit.via: unknown field (allowed: references, through)"),
    ({"orders": {"privacy_unit": ["o_custkey"], "columns": {"x": {"type": "int"}}}},
     "tables.orders.privacy_unit: expected a column name or {through: <column>, references: "
     "<table>.<column>}"),
    ({"orders": _chained("o_custkey", "customer.c_custkey",
                         columns={"c_custkey": {"type": "int"}})},
     "tables.orders.columns.c_custkey: the rows of orders carry the privacy unit customer.c_custkey "
     "through o_custkey -> customer.c_custkey"),
])
def test_a_bad_chain_is_refused_in_one_line_naming_what_is_accepted(changes: dict, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(chain_policy(**changes))
    text = str(info.value)
    assert message in text and "\n" not in text
