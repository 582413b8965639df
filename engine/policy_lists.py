"""The policy's `list:` field of a text column: the separator its items are split at, the most
items of a row a query reads and the items' public values (docs/theory.md §31)."""

from __future__ import annotations

from typing import Any

from .errors import PolicyError
from .policy import ItemList
from .policy_fields import check_mapping

MAX_ITEMS = 1_000  # a sensitivity grows with max_items: a larger bound would drown every answer
MAX_SEPARATOR = 16
MAX_VALUES = 10_000
FORM = "{separator: ';', max_items: 5, domain: [a, b, ...]}"


def parse_item_list(raw: Any, path: str) -> ItemList:
    """`columns.<name>.list`, validated, each error naming the field path and what is accepted."""
    spec = check_mapping(raw, path, required={"separator", "max_items"}, optional={"domain"})
    separator = spec["separator"]
    if not isinstance(separator, str) or not separator or len(separator) > MAX_SEPARATOR:
        raise PolicyError(f"{path}.separator: expected text of 1 to {MAX_SEPARATOR} characters "
                          f"(e.g. ';'), got {separator!r}")
    most = spec["max_items"]
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= MAX_ITEMS:
        raise PolicyError(f"{path}.max_items: expected a whole number from 1 to {MAX_ITEMS}, "
                          f"got {most!r}")
    domain = spec.get("domain")
    if domain is None:
        return ItemList(separator, most)
    if not isinstance(domain, list) or not domain:
        raise PolicyError(f"{path}.domain: expected a non-empty list of the items' values, "
                          f"got {domain!r}")
    if len(domain) > MAX_VALUES:
        raise PolicyError(f"{path}.domain: at most {MAX_VALUES} values are supported, "
                          f"got {len(domain)}")
    for value in domain:
        if not isinstance(value, str):
            raise PolicyError(f"{path}.domain: expected text values, got {value!r}")
        if separator in value:
            raise PolicyError(f"{path}.domain: {value!r} holds the separator {separator!r}, so "
                              "no item split at it can be that value")
    if len(set(domain)) != len(domain):
        raise PolicyError(f"{path}.domain: values must be distinct")
    return ItemList(separator, most, tuple(domain))
