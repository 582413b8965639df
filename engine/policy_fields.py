"""The policy file's field checks: a mapping with its required and allowed keys, a finite or
positive number, a non-empty list; each error names the field path and what is accepted."""

from __future__ import annotations

import math
from collections.abc import Set
from typing import Any

from .errors import PolicyError


def check_mapping(raw: Any, path: str, required: Set[str] = frozenset(),
             optional: Set[str] | None = None) -> dict:
    if not isinstance(raw, dict):
        raise PolicyError(f"{path}: expected a mapping, got {type(raw).__name__}")
    missing = sorted(required - raw.keys())
    if missing:
        raise PolicyError(f"{path}.{missing[0]}: required field is missing")
    if optional is not None:
        unknown = sorted(str(key) for key in raw.keys() - required - optional)
        if unknown:
            allowed = ", ".join(sorted(required | optional))
            raise PolicyError(f"{path}.{unknown[0]}: unknown field (allowed: {allowed})")
    return raw


def finite_number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(f"{path}: expected a finite number, got {value!r}")
    return value


def positive_number(value: Any, path: str) -> float:
    number = finite_number(value, path)
    if number <= 0:
        raise PolicyError(f"{path}: expected a number > 0, got {value!r}")
    return float(number)


def as_list(value: Any, path: str) -> list:
    if not isinstance(value, list) or not value:
        raise PolicyError(f"{path}: expected a non-empty list, got {value!r}")
    return value


def floats(value: Any, path: str) -> tuple[float, ...]:
    return tuple(float(finite_number(v, path)) for v in as_list(value, path))
