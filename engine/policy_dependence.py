"""The policy's dependence block beyond (k, eta): eta declared per column set and the declared
models (household, Gaussian household, Markov chain), each checked against what the policy
declares (docs/theory.md §14, §19, §21)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..calibration import (
    CalibrationError,
    HouseholdModel,
    MarkovModel,
)
from ..calibration.declared import DEFAULT_CAP, DeclaredModel
from ..calibration.model_gaussian import GaussianHousehold
from .errors import PolicyError
from .policy import ColumnSpec, EtaDeclaration, ParentTableSpec, TableSpec
from .policy_fields import as_list, check_mapping, finite_number, floats, positive_number
from .sql_types import SqlType

MAX_MODEL_SIZE = 64
"""Largest household a household model may give a probability to."""


def parse_models(raw: Any, tables: Mapping[str, TableSpec], k: int, eta: float,
            declarations: tuple[EtaDeclaration, ...],
            parents: Mapping[str, ParentTableSpec]) -> tuple[DeclaredModel, ...]:
    """Validate `dependence.models`: household models of a two-valued column, Gaussian household
    models of a bounded float column (§21) and Markov chains
    of a column over an int time column, each on a row-level table and each implying a (k, eta)
    the policy declares at least (docs/theory.md §14)."""
    path = "dependence.models"
    if not isinstance(raw, list):
        raise PolicyError(f"{path}: expected a list of models (kind: household or markov), "
                          f"got {type(raw).__name__}")
    models: list[DeclaredModel] = []
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        kind = check_mapping(item, where, required={"kind"}).get("kind")
        if kind == "household":
            spec = check_mapping(item, where, required={"kind", "table", "column", "sizes", "marginal",
                                                   "rho"}, optional={"cap"})
        elif kind == "gaussian":
            spec = check_mapping(item, where, required={"kind", "table", "column", "max_size", "rho",
                                                   "mean", "sd"}, optional={"cap"})
        elif kind == "markov":
            spec = check_mapping(item, where, required={"kind", "table", "column", "time", "initial",
                                                   "transition"}, optional={"cap"})
        else:
            raise PolicyError(f"{where}.kind: expected household, gaussian or markov, got "
                              f"{kind!r}")
        table = _model_table(spec["table"], f"{where}.table", tables, parents)
        column = _model_column(spec["column"], f"{where}.column", table)
        values = column.group_values
        cap = finite_number(spec.get("cap", DEFAULT_CAP), f"{where}.cap")
        if cap < 1:
            raise PolicyError(f"{where}.cap: expected a number >= 1 (1: never less noise than "
                              f"the tight map), got {cap!r}")
        try:
            if kind == "household":
                if values is None or len(values) != 2:
                    raise PolicyError(
                        f"{where}.column: household models need a two-valued column (bool, or a "
                        f"domain of 2 values); {table.name}.{column.name} has "
                        f"{'no public domain' if values is None else f'{len(values)} values'}; "
                        "for more values declare eta_by_columns")
                model = DeclaredModel(kind, table.name, column.name, values, float(cap),
                                      household=_household(spec, where))
            elif kind == "gaussian":
                model = DeclaredModel(kind, table.name, column.name, (), float(cap),
                                      gaussian=_gaussian(spec, where, column))
            else:
                if values is None:
                    raise PolicyError(f"{where}.column: a chain's column needs a public domain "
                                      f"(bool, or an int or str domain)")
                time = _model_column(spec["time"], f"{where}.time", table)
                if time.type != SqlType.INT or not time.bounded or time.name == column.name:
                    raise PolicyError(f"{where}.time: expected another int column with lower "
                                      f"and upper bounds (the time points), got {time.name!r}")
                first, last = time.bounds
                initial = floats(spec["initial"], f"{where}.initial")
                if len(initial) != len(values):
                    raise PolicyError(f"{where}.initial: expected {len(values)} probabilities, "
                                      f"one per value of {column.name} {list(values)}")
                chain = MarkovModel(initial, tuple(floats(row, f"{where}.transition")
                                                   for row in as_list(spec["transition"],
                                                                    f"{where}.transition")))
                model = DeclaredModel(kind, table.name, column.name, values, float(cap),
                                      chain=chain, time=time.name, first=int(first),
                                      last=int(last))
            implied = model.own_eta()
        except CalibrationError as exc:
            raise PolicyError(f"{where}: {exc}") from None
        for columns, declared in _sets_holding(model, eta, declarations):
            if implied.k > k or implied.eta > declared + 1e-12:
                raise PolicyError(
                    f"{where}: the model implies k={implied.k} and eta={implied.eta:.6g} for "
                    f"{columns}, but the policy declares k={k} and eta={declared:g} there; the "
                    "declared (k, eta) must hold whatever the model, so raise them",
                    k=implied.k, eta=implied.eta, declared_k=k, declared_eta=declared)
        if any(other.columns & model.columns for other in models):
            raise PolicyError(f"{where}: {table.name}.{column.name} is already in another model")
        models.append(model)
    return tuple(models)


def _sets_holding(model: DeclaredModel, eta: float, declarations: tuple[EtaDeclaration, ...]
                  ) -> list[tuple[str, float]]:
    """Every declared column set holding the model's column, with its eta: the whole record
    (the default eta) and each eta_by_columns set naming the column. The model implies its eta
    for each of them (docs/theory.md §19): each record's time point is its own, so the others'
    records projected onto any set holding the column carry the whole chain's dependence."""
    column = f"{model.table}.{model.column}"
    return [("every column (dependence.eta)", eta)] + [
        (d.describe(), d.eta) for d in declarations if column in d.columns]


def _household(spec: dict, where: str) -> HouseholdModel:
    """The household part of a model: sizes {size: probability}, marginal and rho."""
    sizes = check_mapping(spec["sizes"], f"{where}.sizes")
    if not sizes:
        raise PolicyError(f"{where}.sizes: expected a mapping of household size to probability")
    pmf = [0.0] * MAX_MODEL_SIZE
    for size, p in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_MODEL_SIZE:
            raise PolicyError(f"{where}.sizes: expected sizes from 1 to {MAX_MODEL_SIZE}, "
                              f"got {size!r}")
        pmf[size - 1] = float(finite_number(p, f"{where}.sizes.{size}"))
    while pmf and pmf[-1] == 0.0:
        pmf.pop()
    low, high = _rho(spec["rho"], f"{where}.rho")
    return HouseholdModel(tuple(pmf), floats(spec["marginal"], f"{where}.marginal"), low, high)


def _rho(rho: Any, path: str) -> tuple[float, float]:
    """A model's rho: a number or a range [low, high]."""
    low, high = (rho, rho) if not isinstance(rho, list) else (
        tuple(rho) if len(rho) == 2 else (None, None))
    if low is None:
        raise PolicyError(f"{path}: expected a number or a range [low, high], got {rho!r}")
    return float(finite_number(low, path)), float(finite_number(high, path))


def _gaussian(spec: dict, where: str, column: ColumnSpec) -> GaussianHousehold:
    """The Gaussian household part of a model (docs/theory.md §21): households of at most
    max_size members, rho, and the latent's mean and sd in the units of a bounded float column
    (whose policy bounds are the model's clamp)."""
    if column.type != SqlType.FLOAT or not column.bounded:
        raise PolicyError(f"{where}.column: a gaussian model needs a float column with lower "
                          f"and upper bounds, got {column.name!r} ({column.type})")
    size = spec["max_size"]
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_MODEL_SIZE:
        raise PolicyError(f"{where}.max_size: expected a whole number from 1 to "
                          f"{MAX_MODEL_SIZE}, got {size!r}")
    low, high = _rho(spec["rho"], f"{where}.rho")
    if not 0.0 <= low <= high < 1.0:
        raise PolicyError(f"{where}.rho: expected a number in [0, 1) or a range [low, high] "
                          f"with 0 <= low <= high < 1, got {spec['rho']!r}")
    sd = positive_number(spec["sd"], f"{where}.sd")
    lower, upper = column.bounds
    return GaussianHousehold(size, low, high, float(finite_number(spec["mean"], f"{where}.mean")), sd,
                             float(lower), float(upper))


def _model_table(name: Any, path: str, tables: Mapping[str, TableSpec],
                 parents: Mapping[str, ParentTableSpec]) -> TableSpec:
    """A policy table whose rows are each one individual (a model describes individuals)."""
    if isinstance(name, str) and name.lower() in parents:
        raise PolicyError(f"{path}: {name.lower()} is a parent table, whose rows are shared by "
                          "several individuals; a model describes a table whose rows are each "
                          "one individual")
    table = tables.get(str(name).lower()) if isinstance(name, str) else None
    if table is None:
        raise PolicyError(f"{path}: unknown table {name!r} (tables: {', '.join(sorted(tables))})")
    if table.privacy_unit is not None:
        raise PolicyError(f"{path}: {table.name} has a privacy_unit; a model describes a table "
                          "whose rows are each one individual")
    return table


def _model_column(name: Any, path: str, table: TableSpec) -> ColumnSpec:
    column = table.columns.get(str(name).lower()) if isinstance(name, str) else None
    if column is None:
        raise PolicyError(f"{path}: unknown column {name!r} of {table.name} (columns: "
                          f"{', '.join(sorted(table.columns))})")
    return column


def parse_eta_by_columns(raw: Any, default: float, tables: Mapping[str, TableSpec],
                    parents: Mapping[str, ParentTableSpec]) -> tuple[EtaDeclaration, ...]:
    """Validate `dependence.eta_by_columns`: a list of {columns: [...], eta: x}, each column a
    policy column (`column`, or `table.column` when several tables have it), each eta in
    [0, dependence.eta] (no column set can depend more than the whole record), or in [0, 1]
    for a set holding a parent table's column (whose eta is otherwise 1)."""
    path = "dependence.eta_by_columns"
    if not isinstance(raw, list):
        raise PolicyError(f"{path}: expected a list of {{columns: [...], eta: ...}} entries, "
                          f"got {type(raw).__name__}")
    declarations: list[EtaDeclaration] = []
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        spec = check_mapping(item, where, required={"columns", "eta"}, optional=set())
        names = spec["columns"]
        if not isinstance(names, list) or not names:
            raise PolicyError(f"{where}.columns: expected a non-empty list of column names, "
                              f"got {names!r}")
        columns = frozenset(_qualified(name, f"{where}.columns", {**tables, **parents})
                            for name in names)
        eta = finite_number(spec["eta"], f"{where}.eta")
        shared = any(c.split(".", 1)[0] in parents for c in columns)
        if shared and not 0 <= eta <= 1:
            raise PolicyError(f"{where}.eta: expected a number in [0, 1], got {eta!r}")
        if not shared and not 0 <= eta <= default:
            raise PolicyError(
                f"{where}.eta: expected a number in [0, {default:g}] (dependence.eta bounds every "
                f"column set: projecting records onto fewer columns cannot raise eta), got {eta!r}")
        if any(d.columns == columns for d in declarations):
            raise PolicyError(f"{where}.columns: the column set {sorted(columns)} is declared twice")
        declarations.append(EtaDeclaration(columns, float(eta)))
    return tuple(declarations)


def _qualified(name: Any, path: str, tables: Mapping[str, TableSpec | ParentTableSpec]) -> str:
    """`table.column` for a column named plainly or qualified; refuses unknown or ambiguous names."""
    if not isinstance(name, str) or not name.strip():
        raise PolicyError(f"{path}: expected column names, got {name!r}")
    text = name.strip().lower()
    known = sorted(f"{t.name}.{c}" for t in tables.values() for c in t.columns)
    if "." in text:
        if text not in known:
            raise PolicyError(f"{path}: unknown column {name!r} (policy columns: {', '.join(known)})")
        return text
    matches = [q for q in known if q.split(".", 1)[1] == text]
    if not matches:
        raise PolicyError(f"{path}: unknown column {name!r} (policy columns: {', '.join(known)})")
    if len(matches) > 1:
        raise PolicyError(f"{path}: column {name!r} is in several tables; write one of "
                          f"{', '.join(matches)}")
    return matches[0]
