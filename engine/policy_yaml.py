"""Read the data owner's policy file (YAML) and validate every field into the typed values of
engine/policy.py, naming the field path of whatever is wrong."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

import yaml

from ..calibration import (
    MAX_K,
    MODE_CHOICES,
    MODEL_BASE,
    MODEL_MODE,
    CalibrationError,
    DependenceModel,
    HouseholdModel,
    MarkovModel,
    applies,
    require_budget,
)
from ..calibration.declared import DEFAULT_CAP, DeclaredModel
from ..calibration.model_gaussian import GaussianHousehold
from .errors import PolicyError
from .policy import (
    COLUMN_TYPES,
    ColumnSpec,
    EtaDeclaration,
    Limits,
    ParentTableSpec,
    Policy,
    PublicTableSpec,
    TableSpec,
    parse_time,
)
from .sql_types import TIME_TYPES, SqlType

MAX_MODEL_SIZE = 64
"""Largest household a household model may give a probability to."""
MIN_MEMORY_MB = 64  # DuckDB cannot run even small queries in less
MAX_TIME_SECONDS = 86_400.0
MAX_QUANTILE_BINS = 4096  # a quantile's histogram releases bins x groups noisy counts
MIN_SQL_CHARS = 100  # shorter limits would refuse ordinary queries
PUBLIC_DATA_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")
"""The files a public table's `data` may name."""


def load_policy(path: str | Path) -> Policy:
    """Read a policy file and validate every field, naming the field path on error."""
    path = Path(path)
    if not path.is_file():
        raise PolicyError(f"policy file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise PolicyError(f"policy file {path} is not UTF-8 text: byte {exc.object[exc.start]:#04x} "
                          f"at offset {exc.start}", offset=exc.start) from None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    return parse_policy(raw, path.resolve().parent)


def _yaml_error(path: Path, exc: yaml.YAMLError) -> PolicyError:
    """Where the YAML is broken (1-based line and column) and what the parser found there."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    what = f"{problem} ({context})" if context else problem
    if mark is None:
        return PolicyError(f"policy file {path} is not valid YAML: {what}")
    line, column = mark.line + 1, mark.column + 1
    return PolicyError(f"policy file {path} is not valid YAML at line {line}, column {column}: {what}",
                       line=line, column=column, problem=what)


def parse_policy(raw: Any, base: Path | None = None) -> Policy:
    """Validate an already-parsed policy mapping."""
    top = _mapping(raw, "policy", required={"budget", "dependence", "tables"})
    budget = _mapping(top["budget"], "budget", required={"epsilon"})
    epsilon = _positive_number(budget["epsilon"], "budget.epsilon")
    try:
        require_budget("budget.epsilon", epsilon)
    except CalibrationError as exc:
        raise PolicyError(str(exc)) from exc
    dep = _mapping(top["dependence"], "dependence", required={"k", "eta"},
                   optional={"mode", "eta_by_columns", "models"})
    k = dep["k"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise PolicyError(f"dependence.k: expected an integer >= 1, got {k!r}")
    if k > MAX_K:
        raise PolicyError(f"dependence.k: expected an integer <= {MAX_K}, got {k}")
    eta = _number(dep["eta"], "dependence.eta")
    if not 0 <= eta <= 1:
        raise PolicyError(f"dependence.eta: expected a number in [0, 1], got {eta!r}")
    mode = dep.get("mode", "auto")
    prefer_model = mode == MODEL_MODE
    if prefer_model:
        if not dep.get("models"):
            raise PolicyError("dependence.mode: 'model' needs at least one entry in "
                              "dependence.models")
        mode = MODEL_BASE
    if mode not in MODE_CHOICES:
        raise PolicyError(f"dependence.mode: expected one of {', '.join(MODE_CHOICES)} or "
                          f"{MODEL_MODE}, got {mode!r}")
    if not applies(mode, DependenceModel(k, eta)):
        valid = [m for m in MODE_CHOICES if applies(m, DependenceModel(k, eta))]
        raise PolicyError(
            f"dependence.mode: {mode!r} contradicts k > 1 and eta > 0 "
            f"(records are dependent); use {', '.join(valid[:-1])} or {valid[-1]}"
        )
    tables_raw = _mapping(top["tables"], "tables")
    if not tables_raw:
        raise PolicyError("tables: expected at least one table")
    tables: dict[str, TableSpec] = {}
    public: dict[str, PublicTableSpec] = {}
    parents: dict[str, dict] = {}
    for name, spec in tables_raw.items():
        if any(str(name).lower() in known for known in (tables, public, parents)):
            raise PolicyError(f"tables.{name}: table listed twice (names are case-insensitive)")
        if isinstance(spec, dict) and spec.get("public", False) is not False:
            public[str(name).lower()] = _public_table(str(name), spec, base)
            continue
        if isinstance(spec, dict) and "parent_of" in spec:
            parents[str(name).lower()] = spec
            continue
        table = _table(str(name), spec)
        tables[table.name] = table
    if not tables:
        raise PolicyError("tables: expected at least one private table (without public: true "
                          "or parent_of)")
    parent_tables = {name: _parent_table(name, spec, tables, public) for name, spec in parents.items()}
    limits = _limits(top["limits"]) if "limits" in top else Limits()
    declarations = _eta_by_columns(dep.get("eta_by_columns", []), float(eta), tables, parent_tables)
    models = _models(dep.get("models", []), tables, k, float(eta), declarations, parent_tables)
    return Policy(budget_epsilon=epsilon, k=k, eta=float(eta), mode=mode, tables=tables,
                  limits=limits, eta_by_columns=declarations, models=models,
                  prefer_model=prefer_model, public_tables=public, parent_tables=parent_tables,
                  schema=_schema(top.get("schema")))


def _schema(raw: Any) -> str | None:
    """The schema name queries may qualify tables with, as other tools name the data (`PUMS`)."""
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip() or not raw.replace("_", "").isalnum():
        raise PolicyError(f"schema: expected a name of letters, digits and _, got {raw!r}")
    if raw.lower() in ("main", "information_schema", "pg_catalog", "temp", "system", "memory"):
        raise PolicyError(f"schema: {raw!r} names a database catalog; choose another name")
    return raw.lower()


def _models(raw: Any, tables: Mapping[str, TableSpec], k: int, eta: float,
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
        kind = _mapping(item, where, required={"kind"}).get("kind")
        if kind == "household":
            spec = _mapping(item, where, required={"kind", "table", "column", "sizes", "marginal",
                                                   "rho"}, optional={"cap"})
        elif kind == "gaussian":
            spec = _mapping(item, where, required={"kind", "table", "column", "max_size", "rho",
                                                   "mean", "sd"}, optional={"cap"})
        elif kind == "markov":
            spec = _mapping(item, where, required={"kind", "table", "column", "time", "initial",
                                                   "transition"}, optional={"cap"})
        else:
            raise PolicyError(f"{where}.kind: expected household, gaussian or markov, got "
                              f"{kind!r}")
        table = _model_table(spec["table"], f"{where}.table", tables, parents)
        column = _model_column(spec["column"], f"{where}.column", table)
        values = column.group_values
        cap = _number(spec.get("cap", DEFAULT_CAP), f"{where}.cap")
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
                initial = _floats(spec["initial"], f"{where}.initial")
                if len(initial) != len(values):
                    raise PolicyError(f"{where}.initial: expected {len(values)} probabilities, "
                                      f"one per value of {column.name} {list(values)}")
                chain = MarkovModel(initial, tuple(_floats(row, f"{where}.transition")
                                                   for row in _list(spec["transition"],
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
    sizes = _mapping(spec["sizes"], f"{where}.sizes")
    if not sizes:
        raise PolicyError(f"{where}.sizes: expected a mapping of household size to probability")
    pmf = [0.0] * MAX_MODEL_SIZE
    for size, p in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_MODEL_SIZE:
            raise PolicyError(f"{where}.sizes: expected sizes from 1 to {MAX_MODEL_SIZE}, "
                              f"got {size!r}")
        pmf[size - 1] = float(_number(p, f"{where}.sizes.{size}"))
    while pmf and pmf[-1] == 0.0:
        pmf.pop()
    low, high = _rho(spec["rho"], f"{where}.rho")
    return HouseholdModel(tuple(pmf), _floats(spec["marginal"], f"{where}.marginal"), low, high)


def _rho(rho: Any, path: str) -> tuple[float, float]:
    """A model's rho: a number or a range [low, high]."""
    low, high = (rho, rho) if not isinstance(rho, list) else (
        tuple(rho) if len(rho) == 2 else (None, None))
    if low is None:
        raise PolicyError(f"{path}: expected a number or a range [low, high], got {rho!r}")
    return float(_number(low, path)), float(_number(high, path))


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
    sd = _positive_number(spec["sd"], f"{where}.sd")
    lower, upper = column.bounds
    return GaussianHousehold(size, low, high, float(_number(spec["mean"], f"{where}.mean")), sd,
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


def _list(value: Any, path: str) -> list:
    if not isinstance(value, list) or not value:
        raise PolicyError(f"{path}: expected a non-empty list, got {value!r}")
    return value


def _floats(value: Any, path: str) -> tuple[float, ...]:
    return tuple(float(_number(v, path)) for v in _list(value, path))


def _eta_by_columns(raw: Any, default: float, tables: Mapping[str, TableSpec],
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
        spec = _mapping(item, where, required={"columns", "eta"}, optional=set())
        names = spec["columns"]
        if not isinstance(names, list) or not names:
            raise PolicyError(f"{where}.columns: expected a non-empty list of column names, "
                              f"got {names!r}")
        columns = frozenset(_qualified(name, f"{where}.columns", {**tables, **parents})
                            for name in names)
        eta = _number(spec["eta"], f"{where}.eta")
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


def _limits(raw: Any) -> Limits:
    fields = {"max_noisy_values", "time_seconds", "memory_mb", "quantile_bins", "max_sql_chars",
              "max_noisy_columns", "plan_seconds"}
    spec = _mapping(raw, "limits", optional=fields)
    default = Limits()
    values = _whole(spec.get("max_noisy_values", default.max_noisy_values),
                    "limits.max_noisy_values", 1)
    memory = _whole(spec.get("memory_mb", default.memory_mb), "limits.memory_mb", MIN_MEMORY_MB)
    seconds = _seconds(spec.get("time_seconds", default.time_seconds), "limits.time_seconds")
    planning = _seconds(spec.get("plan_seconds", default.plan_seconds), "limits.plan_seconds")
    bins = _whole(spec.get("quantile_bins", default.quantile_bins), "limits.quantile_bins", 2)
    if bins > MAX_QUANTILE_BINS:
        raise PolicyError(f"limits.quantile_bins: expected a whole number from 2 to "
                          f"{MAX_QUANTILE_BINS}, got {bins}")
    chars = _whole(spec.get("max_sql_chars", default.max_sql_chars), "limits.max_sql_chars",
                   MIN_SQL_CHARS)
    columns = _whole(spec.get("max_noisy_columns", default.max_noisy_columns),
                     "limits.max_noisy_columns", 1)
    if bins > columns:
        raise PolicyError(f"limits.quantile_bins: {bins} bins are more than limits."
                          f"max_noisy_columns ({columns}), so every quantile would be refused; "
                          f"raise max_noisy_columns to at least {bins} or lower quantile_bins")
    return Limits(max_noisy_values=values, time_seconds=seconds, memory_mb=memory,
                  quantile_bins=bins, max_sql_chars=chars, max_noisy_columns=columns,
                  plan_seconds=planning)


def _seconds(value: Any, path: str) -> float:
    seconds = _number(value, path)
    if not 0.001 <= seconds <= MAX_TIME_SECONDS:
        raise PolicyError(f"{path}: expected a number of seconds from 0.001 to "
                          f"{MAX_TIME_SECONDS:g}, got {seconds!r}")
    return float(seconds)


def _whole(value: Any, path: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise PolicyError(f"{path}: expected an integer >= {least}, got {value!r}")
    return value


def _table(name: str, raw: Any) -> TableSpec:
    path = f"tables.{name}"
    spec = _mapping(raw, path, required={"columns"},
                    optional={"privacy_unit", "max_rows_per_unit", "dependence_group", "public"})
    unit = spec.get("privacy_unit")
    if unit is not None and (not isinstance(unit, str) or not unit.strip()):
        raise PolicyError(f"{path}.privacy_unit: expected a column name, got {unit!r}")
    m = spec.get("max_rows_per_unit", 1)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise PolicyError(f"{path}.max_rows_per_unit: expected an integer >= 1, got {m!r}")
    if unit is None and m != 1:
        raise PolicyError(
            f"{path}.max_rows_per_unit: without a privacy_unit each row is one individual, "
            f"so it must be 1 (got {m})"
        )
    cols_raw = _mapping(spec["columns"], f"{path}.columns")
    if not cols_raw:
        raise PolicyError(f"{path}.columns: expected at least one column")
    columns: dict[str, ColumnSpec] = {}
    for col_name, col_raw in cols_raw.items():
        col = _column(str(col_name), col_raw, f"{path}.columns.{col_name}")
        if col.name in columns:
            raise PolicyError(f"{path}.columns.{col_name}: column listed twice")
        columns[col.name] = col
    unit_name = unit.lower() if unit else None
    if unit_name is not None and unit_name in columns:
        raise PolicyError(
            f"{path}.columns.{unit}: the privacy unit may not be listed as a column "
            "(it is only usable as COUNT(DISTINCT unit))"
        )
    group = _dependence_group(spec.get("dependence_group"), f"{path}.dependence_group")
    return TableSpec(name.lower(), unit_name, m, columns, group)


def _public_table(name: str, raw: dict, base: Path | None) -> PublicTableSpec:
    """`tables.<name>` with `public: true`: its unique `key` column, its columns and, optionally,
    the CSV or Parquet file holding it (`data`, relative to the policy file's folder)."""
    path = f"tables.{name}"
    spec = _mapping(raw, path, required={"public", "key", "columns"}, optional={"data"})
    if spec["public"] is not True:
        raise PolicyError(f"{path}.public: expected true or false, got {spec['public']!r}")
    columns, key = _keyed_columns(spec, path)
    data = spec.get("data")
    if data is not None:
        if not isinstance(data, str) or Path(data).suffix.lower() not in PUBLIC_DATA_SUFFIXES:
            raise PolicyError(f"{path}.data: expected the path of a CSV or Parquet file "
                              f"({', '.join(PUBLIC_DATA_SUFFIXES)}), got {data!r}")
        data = Path(data) if base is None or Path(data).is_absolute() else base / data
    return PublicTableSpec(name.lower(), key, columns, data)


def _keyed_columns(spec: dict, path: str) -> tuple[dict[str, ColumnSpec], str]:
    """A lookup table's `columns` and its `key` (one of them, lower-cased)."""
    cols_raw = _mapping(spec["columns"], f"{path}.columns")
    columns: dict[str, ColumnSpec] = {}
    for col_name, col_raw in cols_raw.items():
        col = _column(str(col_name), col_raw, f"{path}.columns.{col_name}")
        if col.name in columns:
            raise PolicyError(f"{path}.columns.{col_name}: column listed twice")
        columns[col.name] = col
    key = spec["key"]
    if not isinstance(key, str) or key.lower() not in columns:
        raise PolicyError(f"{path}.key: expected one of its columns ({', '.join(sorted(columns))}), "
                          f"got {key!r}")
    return columns, key.lower()


def _parent_table(name: str, raw: dict, tables: Mapping[str, TableSpec],
                  public: Mapping[str, PublicTableSpec]) -> ParentTableSpec:
    """`tables.<name>` with `parent_of: {table: <child>, foreign_key: <column>}`: its `key`, its
    columns and the private table that references it (docs/theory.md §16)."""
    path = f"tables.{name}"
    spec = _mapping(raw, path, required={"parent_of", "key", "columns"}, optional=set())
    ref = _mapping(spec["parent_of"], f"{path}.parent_of", required={"table", "foreign_key"},
                   optional=set())
    child_name = ref["table"]
    child = tables.get(child_name.lower()) if isinstance(child_name, str) else None
    if child is None:
        what = "public" if isinstance(child_name, str) and child_name.lower() in public else "unknown"
        raise PolicyError(f"{path}.parent_of.table: expected a private table of the policy "
                          f"({', '.join(sorted(tables))}), got {what} table {child_name!r}")
    fk = ref["foreign_key"]
    foreign = child.columns.get(fk.lower()) if isinstance(fk, str) else None
    if foreign is None:
        raise PolicyError(f"{path}.parent_of.foreign_key: expected a policy column of "
                          f"{child.name} ({', '.join(sorted(child.columns))}), got {fk!r}")
    columns, key = _keyed_columns(spec, path)
    if columns[key].type != foreign.type:
        raise PolicyError(f"{path}.key: {key} is {columns[key].type} but "
                          f"{child.name}.{foreign.name} is {foreign.type}; a key and its foreign "
                          "key must have one type")
    return ParentTableSpec(name.lower(), key, columns, child.name, foreign.name)


def _dependence_group(raw: Any, path: str) -> str | None:
    """The column whose equal values form a dependence group (e.g. household_id), lower-cased.

    Only `dpsql dependence` reads it, to check k against the data and fit eta; queries never do."""
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise PolicyError(f"{path}: expected a column name (e.g. household_id), got {raw!r}")
    return raw.lower()


def _column(name: str, raw: Any, path: str) -> ColumnSpec:
    spec = _mapping(raw, path, required={"type"}, optional={"lower", "upper", "domain"})
    if spec["type"] not in COLUMN_TYPES:
        raise PolicyError(f"{path}.type: expected one of {', '.join(COLUMN_TYPES)}, "
                          f"got {spec['type']!r}")
    ctype = SqlType(spec["type"])
    lower, upper, domain = spec.get("lower"), spec.get("upper"), spec.get("domain")
    if ctype in (SqlType.STR, SqlType.BOOL) and (lower is not None or upper is not None):
        raise PolicyError(f"{path}: lower/upper bounds are only allowed on int, float, date or "
                          "timestamp columns")
    if ctype not in (SqlType.INT, SqlType.STR) and domain is not None:
        raise PolicyError(f"{path}.domain: a public domain is only allowed on int or str columns")
    if (lower is None) != (upper is None):
        raise PolicyError(f"{path}: give both lower and upper, or neither")
    if ctype in TIME_TYPES:
        return ColumnSpec(name.lower(), ctype, span=None if lower is None else _span(lower, upper, path, ctype))
    if lower is not None:
        lower = _bound(lower, f"{path}.lower", ctype)
        upper = _bound(upper, f"{path}.upper", ctype)
        if lower > upper:
            raise PolicyError(f"{path}: lower ({lower}) is greater than upper ({upper})")
    if domain is not None:
        domain = _domain(domain, f"{path}.domain", ctype)
    return ColumnSpec(name.lower(), ctype, lower, upper, domain)


def _span(lower: Any, upper: Any, path: str, ctype: SqlType) -> tuple[dt.datetime, dt.datetime]:
    first = parse_time(lower, ctype, f"{path}.lower")
    last = parse_time(upper, ctype, f"{path}.upper")
    if first > last:
        raise PolicyError(f"{path}: lower ({lower}) is later than upper ({upper})")
    return first, last


def _bound(value: Any, path: str, ctype: SqlType) -> float:
    number = _number(value, path)
    if ctype == SqlType.INT and number != int(number):
        raise PolicyError(f"{path}: expected an integer bound for an int column, got {value!r}")
    if abs(number) > 1e15:
        raise PolicyError(f"{path}: expected a bound of magnitude at most 1e15, got {value!r}")
    return int(number) if ctype == SqlType.INT else float(number)


def _domain(values: Any, path: str, ctype: SqlType) -> tuple:
    if not isinstance(values, list) or not values:
        raise PolicyError(f"{path}: expected a non-empty list of values")
    want = str if ctype == SqlType.STR else int
    for v in values:
        if isinstance(v, bool) or not isinstance(v, want):
            raise PolicyError(f"{path}: expected {ctype} values, got {v!r}")
    if len(set(values)) != len(values):
        raise PolicyError(f"{path}: values must be distinct")
    if len(values) > 10_000:
        raise PolicyError(f"{path}: at most 10000 values are supported, got {len(values)}")
    return tuple(values)


def _mapping(raw: Any, path: str, required: Set[str] = frozenset(),
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


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(f"{path}: expected a finite number, got {value!r}")
    return value


def _positive_number(value: Any, path: str) -> float:
    number = _number(value, path)
    if number <= 0:
        raise PolicyError(f"{path}: expected a number > 0, got {value!r}")
    return float(number)
