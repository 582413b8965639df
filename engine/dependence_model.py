"""Read the data owner's generative household model (YAML) into a calibration HouseholdColumns.

The file's form (README, "Choosing k and η"):

    sizes: {1: 0.25, 2: 0.25, 3: 0.25, 4: 0.25}   # Pr[a group has this many members]
    factors:                                       # optional household latents
      outbreak: [0.8, 0.2]                         # its pmf over values 0, 1, ...
    columns:
      state: {values: [CA, NY], marginal: [0.5, 0.5], rho: 1}     # shared by the household
      sick: {values: [false, true], factor: outbreak, given: [[0.95, 0.05], [0.3, 0.7]]}
      adult: {values: [false, true], marginal: [0.2, 0.8]}        # rho 0: independent
      income: {per_person: true}    # drawn per person, whatever its values, apart from the household

`per_person: true` says the column (with the other such columns and the member's own
independent columns) is drawn per person independently of the household's hidden state and of
the member's other columns; its values then do not matter to eta.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..calibration import CalibrationError, Column, Factor, HouseholdColumns
from .errors import InputError

MAX_SIZE = 64
"""Largest group size a model file may give a probability to."""


def load_model(path: str | Path) -> HouseholdColumns:
    """Read and validate a model file; every error is one line naming the field."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"model file not found: {path} (expected a YAML household model)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"model file {path} is not valid YAML text: {type(exc).__name__}") from None
    return parse_model(raw, str(path))


def parse_model(raw: Any, where: str = "model") -> HouseholdColumns:
    """Validate an already-parsed model mapping."""
    top = _mapping(raw, where, {"sizes", "columns"}, {"factors"})
    try:
        return HouseholdColumns(
            sizes=_sizes(top["sizes"], f"{where}: sizes"),
            columns=tuple(_column(str(name), spec, f"{where}: columns.{name}")
                          for name, spec in _mapping(top["columns"], f"{where}: columns").items()),
            factors=tuple(Factor(str(name), _probabilities(pmf, f"{where}: factors.{name}"))
                          for name, pmf in _mapping(top.get("factors", {}), f"{where}: factors").items()),
        )
    except CalibrationError as exc:
        raise InputError(f"{where}: {exc}") from None


def _sizes(raw: Any, path: str) -> tuple[float, ...]:
    """{size: probability} as the tuple (Pr[1], Pr[2], ...)."""
    spec = _mapping(raw, path)
    for size in spec:
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
            raise InputError(f"{path}: expected sizes that are integers from 1 to {MAX_SIZE}, "
                             f"got {size!r}")
    if not spec:
        raise InputError(f"{path}: expected at least one size")
    return tuple(_probability(spec.get(size, 0.0), f"{path}.{size}") for size in range(1, max(spec) + 1))


def _column(name: str, raw: Any, path: str) -> Column:
    """One column: values, and either marginal (+ rho) or factor + given; or per_person: true."""
    if isinstance(raw, dict) and "per_person" in raw:
        _mapping(raw, path, {"per_person"}, set())
        if raw["per_person"] is not True:
            raise InputError(f"{path}.per_person: expected true (or leave the field out), "
                             f"got {raw['per_person']!r}")
        return Column(name=name.lower(), values=("any",), marginal=(1.0,))
    spec = _mapping(raw, path, {"values"}, {"marginal", "rho", "factor", "given"})
    values = spec["values"]
    if not isinstance(values, list) or not values:
        raise InputError(f"{path}.values: expected a non-empty list of the column's values")
    factor = spec.get("factor")
    if factor is not None and not isinstance(factor, str):
        raise InputError(f"{path}.factor: expected the name of a declared factor, got {factor!r}")
    given = spec.get("given", [])
    if not isinstance(given, list):
        raise InputError(f"{path}.given: expected a list of rows, one per value of the factor")
    return Column(
        name=name.lower(),
        values=tuple(values),
        marginal=_probabilities(spec["marginal"], f"{path}.marginal") if "marginal" in spec else (),
        rho=_probability(spec.get("rho", 0.0), f"{path}.rho"),
        factor=factor,
        given=tuple(_probabilities(row, f"{path}.given") for row in given),
    )


def _probabilities(raw: Any, path: str) -> tuple[float, ...]:
    """A list of probabilities (its sum is checked by the calibration model)."""
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{path}: expected a non-empty list of probabilities")
    return tuple(_probability(value, path) for value in raw)


def _probability(raw: Any, path: str) -> float:
    """A number in [0, 1]."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0.0 <= raw <= 1.0:
        raise InputError(f"{path}: expected a probability in [0, 1], got {raw!r}")
    return float(raw)


def _mapping(raw: Any, path: str, required: set[str] | None = None,
             optional: set[str] | None = None) -> dict:
    """raw if it is a mapping with the required keys and no others than required | optional."""
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping, got {type(raw).__name__}")
    for key in sorted(required or ()):
        if key not in raw:
            raise InputError(f"{path}.{key}: required field is missing")
    if optional is not None:
        allowed = (required or set()) | optional
        unknown = sorted(str(key) for key in raw if key not in allowed)
        if unknown:
            raise InputError(f"{path}.{unknown[0]}: unknown field (allowed: {', '.join(sorted(allowed))})")
    return raw
