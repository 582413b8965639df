"""Read the data owner's policy file (YAML) and validate every field into the typed values of
engine/policy.py, naming the field path of whatever is wrong."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..calibration import (
    MAX_K,
    MODE_CHOICES,
    MODEL_BASE,
    MODEL_MODE,
    CalibrationError,
    DependenceModel,
    applies,
    require_budget,
)
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
    UnitLink,
    parse_time,
)
from .policy_chain import FORM as CHAIN_FORM
from .policy_chain import parse_link
from .policy_chain import resolve as resolve_chains
from .policy_dependence import parse_eta_by_columns, parse_models
from .policy_fields import check_mapping, finite_number, positive_number
from .policy_lists import FORM as LIST_FORM
from .policy_lists import parse_item_list
from .sql_types import TIME_TYPES, SqlType

if TYPE_CHECKING:
    from ..calibration.declared import DeclaredModel

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
        raw = _read_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise PolicyError(f"policy file {path} is not UTF-8 text: byte {exc.object[exc.start]:#04x} "
                          f"at offset {exc.start}", offset=exc.start) from None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    return parse_policy(raw, path.resolve().parent)


def _read_yaml(text: str) -> Any:
    """The document, parsed by libyaml when PyYAML has it (a policy is read by every query
    process, and the pure-Python parser is most of that read); a document libyaml refuses is
    parsed again by PyYAML's own parser, so the error and where it points are the same as
    without libyaml. Both build the values with the same safe constructor."""
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is not None:
        try:
            return yaml.load(text, Loader=loader)
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


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
    top = check_mapping(raw, "policy", required={"budget", "dependence", "tables"})
    budget = check_mapping(top["budget"], "budget", required={"epsilon"})
    epsilon = positive_number(budget["epsilon"], "budget.epsilon")
    try:
        require_budget("budget.epsilon", epsilon)
    except CalibrationError as exc:
        raise PolicyError(str(exc)) from exc
    dep = check_mapping(top["dependence"], "dependence", required={"k", "eta"},
                   optional={"mode", "eta_by_columns", "models"})
    k = dep["k"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise PolicyError(f"dependence.k: expected an integer >= 1, got {k!r}")
    if k > MAX_K:
        raise PolicyError(f"dependence.k: expected an integer <= {MAX_K}, got {k}")
    eta = finite_number(dep["eta"], "dependence.eta")
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
    tables_raw = check_mapping(top["tables"], "tables")
    if not tables_raw:
        raise PolicyError("tables: expected at least one table")
    tables: dict[str, TableSpec] = {}
    public: dict[str, PublicTableSpec] = {}
    parents: dict[str, dict] = {}
    links: dict[str, UnitLink] = {}
    for name, spec in tables_raw.items():
        if any(str(name).lower() in known for known in (tables, public, parents)):
            raise PolicyError(f"tables.{name}: table listed twice (names are case-insensitive)")
        if isinstance(spec, dict) and spec.get("public", False) is not False:
            public[str(name).lower()] = _public_table(str(name), spec, base)
            continue
        if isinstance(spec, dict) and "parent_of" in spec:
            parents[str(name).lower()] = spec
            continue
        table, link = _table(str(name), spec)
        tables[table.name] = table
        if link is not None:
            links[table.name] = link
    if not tables:
        raise PolicyError("tables: expected at least one private table (without public: true "
                          "or parent_of)")
    tables = resolve_chains(tables, links, public, parents)
    parent_tables = {name: _parent_table(name, spec, tables, public) for name, spec in parents.items()}
    limits = _limits(top["limits"]) if "limits" in top else Limits()
    declarations = parse_eta_by_columns(dep.get("eta_by_columns", []), float(eta), tables, parent_tables)
    models = parse_models(dep.get("models", []), tables, k, float(eta), declarations, parent_tables)
    tables = {name: replace(table, scoped=_scoping_calibrates(name, declarations, models))
              for name, table in tables.items()}
    return Policy(budget_epsilon=epsilon, k=k, eta=float(eta), mode=mode, tables=tables,
                  limits=limits, eta_by_columns=declarations, models=models,
                  prefer_model=prefer_model, public_tables=public, parent_tables=parent_tables,
                  schema=_schema(top.get("schema")))


def _scoping_calibrates(table: str, declarations: tuple[EtaDeclaration, ...],
                        models: tuple[DeclaredModel, ...]) -> bool:
    """Whether the eta or model calibrating a query on `table` can depend on which of its
    columns the query reads: an eta_by_columns set or a declared model names one of them."""
    prefix = table + "."
    return (any(column.startswith(prefix) for d in declarations for column in d.columns)
            or any(model.table == table for model in models))


def _schema(raw: Any) -> str | None:
    """The schema name queries may qualify tables with, as other tools name the data (`PUMS`)."""
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip() or not raw.replace("_", "").isalnum():
        raise PolicyError(f"schema: expected a name of letters, digits and _, got {raw!r}")
    if raw.lower() in ("main", "information_schema", "pg_catalog", "temp", "system", "memory"):
        raise PolicyError(f"schema: {raw!r} names a database catalog; choose another name")
    return raw.lower()


def _limits(raw: Any) -> Limits:
    fields = {"max_noisy_values", "time_seconds", "memory_mb", "quantile_bins", "max_sql_chars",
              "max_noisy_columns", "plan_seconds"}
    spec = check_mapping(raw, "limits", optional=fields)
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
    seconds = finite_number(value, path)
    if not 0.001 <= seconds <= MAX_TIME_SECONDS:
        raise PolicyError(f"{path}: expected a number of seconds from 0.001 to "
                          f"{MAX_TIME_SECONDS:g}, got {seconds!r}")
    return float(seconds)


def _whole(value: Any, path: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise PolicyError(f"{path}: expected an integer >= {least}, got {value!r}")
    return value


def _table(name: str, raw: Any) -> tuple[TableSpec, UnitLink | None]:
    """A private table and, when its unit is reached through a foreign key, its own link (the
    table's privacy_unit is then set once the chain is followed, engine/policy_chain.py)."""
    path = f"tables.{name}"
    spec = check_mapping(raw, path, required={"columns"},
                    optional={"privacy_unit", "max_rows_per_unit", "dependence_group", "public"})
    unit = spec.get("privacy_unit")
    link = parse_link(unit, f"{path}.privacy_unit") if isinstance(unit, dict) else None
    if link is not None:
        unit = None
    elif unit is not None and (not isinstance(unit, str) or not unit.strip()):
        raise PolicyError(f"{path}.privacy_unit: expected a column name or {CHAIN_FORM}, "
                          f"got {unit!r}")
    m = spec.get("max_rows_per_unit", 1)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise PolicyError(f"{path}.max_rows_per_unit: expected an integer >= 1, got {m!r}")
    if unit is None and link is None and m != 1:
        raise PolicyError(
            f"{path}.max_rows_per_unit: without a privacy_unit each row is one individual, "
            f"so it must be 1 (got {m})"
        )
    cols_raw = check_mapping(spec["columns"], f"{path}.columns")
    if not cols_raw:
        raise PolicyError(f"{path}.columns: expected at least one column")
    columns = _columns(cols_raw, path)
    unit_name = unit.lower() if unit else None
    if unit_name is not None and unit_name in columns:
        raise PolicyError(
            f"{path}.columns.{unit}: the privacy unit may not be listed as a column "
            "(it is only usable as COUNT(DISTINCT unit))"
        )
    group = _dependence_group(spec.get("dependence_group"), f"{path}.dependence_group")
    return TableSpec(name.lower(), unit_name, m, columns, group), link


def _public_table(name: str, raw: dict, base: Path | None) -> PublicTableSpec:
    """`tables.<name>` with `public: true`: its unique `key` column, its columns and, optionally,
    the CSV or Parquet file holding it (`data`, relative to the policy file's folder)."""
    path = f"tables.{name}"
    spec = check_mapping(raw, path, required={"public", "key", "columns"}, optional={"data"})
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


def _columns(cols_raw: dict, path: str) -> dict[str, ColumnSpec]:
    """A table's `columns`, each validated, by lower-cased name (a name listed twice refused)."""
    columns: dict[str, ColumnSpec] = {}
    for col_name, col_raw in cols_raw.items():
        col = _column(str(col_name), col_raw, f"{path}.columns.{col_name}")
        if col.name in columns:
            raise PolicyError(f"{path}.columns.{col_name}: column listed twice")
        columns[col.name] = col
    return columns


def _keyed_columns(spec: dict, path: str) -> tuple[dict[str, ColumnSpec], str]:
    """A lookup table's `columns` and its `key` (one of them, lower-cased)."""
    cols_raw = check_mapping(spec["columns"], f"{path}.columns")
    columns = _columns(cols_raw, path)
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
    spec = check_mapping(raw, path, required={"parent_of", "key", "columns"}, optional=set())
    ref = check_mapping(spec["parent_of"], f"{path}.parent_of", required={"table", "foreign_key"},
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
    spec = check_mapping(raw, path, required={"type"}, optional={"lower", "upper", "domain", "list"})
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
    if spec.get("list") is not None and ctype != SqlType.STR:
        raise PolicyError(f"{path}.list: only a str column may hold a list ({LIST_FORM})")
    item_list = None if spec.get("list") is None else parse_item_list(spec["list"], f"{path}.list")
    if ctype in TIME_TYPES:
        return ColumnSpec(name.lower(), ctype, span=None if lower is None else _span(lower, upper, path, ctype))
    if lower is not None:
        lower = _bound(lower, f"{path}.lower", ctype)
        upper = _bound(upper, f"{path}.upper", ctype)
        if lower > upper:
            raise PolicyError(f"{path}: lower ({lower}) is greater than upper ({upper})")
    if domain is not None:
        domain = _domain(domain, f"{path}.domain", ctype)
    return ColumnSpec(name.lower(), ctype, lower, upper, domain, item_list=item_list)


def _span(lower: Any, upper: Any, path: str, ctype: SqlType) -> tuple[dt.datetime, dt.datetime]:
    first = parse_time(lower, ctype, f"{path}.lower")
    last = parse_time(upper, ctype, f"{path}.upper")
    if first > last:
        raise PolicyError(f"{path}: lower ({lower}) is later than upper ({upper})")
    return first, last


def _bound(value: Any, path: str, ctype: SqlType) -> float:
    number = finite_number(value, path)
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
