"""`dpsql dependence eta`: eta per column set from a declared model and/or a fit to the data,
what each gives as eps_dp, and a ready policy `dependence:` block (owner-side)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import yaml
from rich.console import Console
from rich.table import Table

from ..calibration import (
    CalibrationError,
    DependenceModel,
    HouseholdColumns,
    applies,
    calibrate,
    column_set_eta,
)
from .chain_check import ChainCheck
from .dependence_data import DataFit, GroupCheck
from .errors import InputError
from .policy import Policy, TableSpec


@dataclass(frozen=True)
class SetReport:
    """One column set: its eta from each source, the eta to declare and the eps_dp it gives."""

    columns: tuple[str, ...]
    eta_model: float | None
    eta_fit: float | None
    rho_upper: float | None
    shared: bool
    eta: float | None  # the larger of the sources, rounded up; None when no source covers it
    epsilon_dp: float | None
    noise_vs_record: float | None  # this set's noise scale / the record-level one (< 1: less noise)
    why_missing: str


@dataclass(frozen=True)
class DependenceReport:
    """Everything `dpsql dependence eta` prints, for one table at one epsilon."""

    table: str
    epsilon: float
    k: int
    eta_record: float
    epsilon_dp_record: float
    epsilon_dp_shared: float  # eps_dp of a set with eta = 1 (a shared column)
    epsilon_dp_unshared: float  # eps_dp of a set with eta = 0
    sets: tuple[SetReport, ...]
    check: GroupCheck | None
    confidence: float | None
    reads_all_columns: bool  # a table with a privacy unit: its records are units, not the model's rows
    block: dict


def declared(eta: float) -> float:
    """eta rounded UP to 4 decimals (so the rounding never under-states it), at most 1."""
    return min(1.0, math.ceil(eta * 1e4 - 1e-9) / 1e4)


def column_sets(table: TableSpec, asked: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Every policy column alone, then each `--columns a,b` set asked (in policy order, no
    repeats), smaller sets first."""
    order = list(table.columns)
    sets: list[tuple[str, ...]] = [(name,) for name in order]
    for text in asked:
        names = [part.strip().lower() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in table.columns]
        if not names or unknown:
            raise InputError(f"--columns {text!r}: expected comma-separated columns of table "
                             f"{table.name} ({', '.join(order)})")
        chosen = tuple(sorted(set(names), key=order.index))
        if chosen not in sets:
            sets.append(chosen)
    return tuple(sorted(sets, key=len))  # subsets first: a set's eta is raised to theirs


def fittable(table: TableSpec, columns: tuple[str, ...]) -> str:
    """Why a set cannot be fitted from the data ('' when it can): every column needs public values."""
    for name in columns:
        if table.columns[name].group_values is None:
            return f"{name}: no public values to fit"
    return ""


def eta_report(policy: Policy, table: TableSpec, sets: tuple[tuple[str, ...], ...],
                 epsilon: float, model: HouseholdColumns | None, fit: DataFit | None) -> DependenceReport:
    """Combine the model's exact etas and the fit's upper bounds into one report."""
    if model is not None:
        _check_values(table, model)
    k = max([policy.k] + ([model.k] if model else []) + ([fit.check.largest] if fit else []))
    eta_record = policy.eta
    if model is not None and all(name in _names(model) for name in table.columns):
        eta_record = max(eta_record, declared(_model_eta(model, tuple(table.columns))))
    record_dp = _eps_dp(epsilon, k, eta_record)
    fits = {f.columns: f for f in fit.sets} if fit else {}
    rows: list[SetReport] = []
    for columns in sets:
        eta_model = (_model_eta(model, columns)
                     if model is not None and set(columns) <= _names(model) else None)
        found = fits.get(columns)
        # eta grows with the column set, so a set's bound is at least each of its columns' bounds.
        eta_fit = (max([found.eta_upper] + [fits[(c,)].eta_upper for c in columns if (c,) in fits])
                   if found else None)
        # A set's eta is at least that of every reported subset (eta grows with the set, and a
        # query uses the smallest declaration among the sets containing what it reads).
        known = [e for e in (eta_model, eta_fit) if e is not None]
        known += [row.eta for row in rows if known and row.eta is not None and set(row.columns) < set(columns)]
        eta = declared(max(known)) if known else None
        eps_dp = None if eta is None else _eps_dp(epsilon, k, eta)
        shared = any(fits[(c,)].shared for c in columns if (c,) in fits) or (model is not None and any(
            c.name in columns and c.factor is None and c.rho == 1.0 and len(c.values) > 1
            for c in model.columns))
        missing = "" if known else _missing(table, columns, model, fit)
        rows.append(SetReport(columns, eta_model, eta_fit, found.rho_upper if found else None, shared,
                              eta, eps_dp, None if eps_dp is None else record_dp / eps_dp, missing))
    mode = policy.mode if applies(policy.mode, DependenceModel(k, eta_record)) else "auto"
    # On a table with a privacy unit a set's eta must cover each unit's rows projected onto it
    # and their number (docs/theory.md §28); the model describes one row per member, so no
    # column set is suggested there.
    reads_all = table.privacy_unit is not None
    block = {"k": k, "eta": eta_record, "mode": mode, "eta_by_columns": [] if reads_all else [
        {"columns": [_qualified(policy, table, c) for c in row.columns], "eta": row.eta}
        for row in rows if row.eta is not None and row.eta < eta_record]}
    return DependenceReport(table.name, epsilon, k, eta_record, record_dp,
                            _eps_dp(epsilon, k, 1.0), _eps_dp(epsilon, k, 0.0),
                            tuple(rows), fit.check if fit else None,
                            fit.confidence if fit else None, reads_all, {"dependence": block})


def _qualified(policy: Policy, table: TableSpec, column: str) -> str:
    """A column as eta_by_columns names it: plainly when no other table has a column so named."""
    others = [t for t in policy.tables.values() if t.name != table.name and column in t.columns]
    return f"{table.name}.{column}" if others else column


def _check_values(table: TableSpec, model: HouseholdColumns) -> None:
    """A model column that the policy gives public values must list exactly those values: a
    model missing a value the data can hold would understate eta."""
    for column in model.columns:
        spec = table.columns.get(column.name)
        if spec is None or spec.group_values is None or column.values == ("any",):
            continue
        if set(column.values) != set(spec.group_values):
            raise InputError(f"model column {column.name}: its values {list(column.values)} must be "
                             f"the policy's {list(spec.group_values)}")


def _model_eta(model: HouseholdColumns, columns: tuple[str, ...]) -> float:
    """The model's exact eta_S, with its size limits reported as bad input."""
    try:
        return column_set_eta(model, columns)
    except CalibrationError as exc:
        raise InputError(f"model: {exc}") from None


def _names(model: HouseholdColumns) -> set[str]:
    """The model's column names."""
    return {c.name for c in model.columns}


def _missing(table: TableSpec, columns: tuple[str, ...], model: HouseholdColumns | None,
             fit: DataFit | None) -> str:
    """Why no source gives this set an eta."""
    reasons = []
    if model is not None:
        absent = [name for name in columns if name not in _names(model)]
        reasons.append(f"{absent[0]} not in model")
    if fit is not None:
        reasons.append(fittable(table, columns))
    return "; ".join(reasons) or "no model and no data given"


def _eps_dp(epsilon: float, k: int, eta: float) -> float:
    """The eps_dp that auto (the applicable mode allowing the most) gives for epsilon and (k, eta)."""
    try:
        return calibrate(epsilon, DependenceModel(k, eta)).epsilon_dp
    except CalibrationError as exc:
        raise InputError(str(exc)) from None


def _eta(value: float | None) -> str:
    """An eta cell."""
    return "-" if value is None else f"{value:.4f}"


def print_report(console: Console, report: DependenceReport) -> None:
    """The report as rich tables, the shared-column costs and the ready policy block."""
    table = Table(title=f"eta per column set of table {report.table} (k = {report.k}); eps_dp at "
                        f"epsilon = {report.epsilon:g}, mode auto")
    for name in ("columns", "eta model", "eta fit (upper)", "declare", "eps_dp",
                 "noise vs record", "note"):
        table.add_column(name)
    for row in report.sets:
        note = "shared within groups" if row.shared else row.why_missing
        table.add_row(", ".join(row.columns), _eta(row.eta_model), _eta(row.eta_fit), _eta(row.eta),
                      "-" if row.epsilon_dp is None else f"{row.epsilon_dp:.4f}",
                      "-" if row.noise_vs_record is None else f"{row.noise_vs_record:.2f}",
                      note)
    console.print(table)
    console.print(f"record-level eta {report.eta_record:g}: eps_dp {report.epsilon_dp_record:.4f} for "
                  "every query (no column scoping)")
    if any(row.shared for row in report.sets):
        console.print(f"a set with a shared column has eta = 1: eps_dp {report.epsilon_dp_shared:.4f} "
                      f"(group privacy), {report.epsilon_dp_unshared / report.epsilon_dp_shared:.2f}x the "
                      f"noise of an unshared, independent column (eps_dp {report.epsilon_dp_unshared:.4f})")
    if any(row.eta is None for row in report.sets):
        console.print("a set without an eta keeps the policy's eta; a column without public values "
                      "gets one only from a model file that lists all its values")
    if report.check is not None:
        print_checks(console, (report.check,))
        console.print(f"fit: upper confidence bound on each set's within-group correlation at "
                      f"{report.confidence:g} (Hoeffding, docs/theory.md §13). OWNER-SIDE: computed from "
                      "the private data; the eta you declare becomes public through the noise scales.")
    if report.reads_all_columns:
        console.print(f"table {report.table} has a privacy unit: a column set's eta there must "
                      "cover each unit's rows projected onto the set and their number "
                      "(docs/theory.md §28), which a model of one row per member does not give, "
                      "so the block lists no column set; declare one you can justify")
    console.print("Ready policy block:")
    console.print(yaml.safe_dump(report.block, sort_keys=False, default_flow_style=None), end="",
                  markup=False)


def print_chain_checks(console: Console, checks: Sequence[ChainCheck]) -> None:
    """Rows breaking each declared chain's assumptions (owner-side: from the data)."""
    table = Table(title="declared Markov chains against the data (owner-side)")
    for name in ("table", "column", "time", "time NULL or outside", "value NULL or outside",
                 "repeated (person, time)", "valid"):
        table.add_column(name)
    for c in checks:
        table.add_row(c.table, c.column, c.time, str(c.outside_times), str(c.outside_values),
                      "-" if c.repeated is None else str(c.repeated), "yes" if c.valid else "NO")
    console.print(table)


def print_checks(console: Console, checks: Sequence[GroupCheck]) -> None:
    """Group sizes against k, one row per table (owner-side: from the data)."""
    table = Table(title="dependence groups in the data (owner-side)")
    for name in ("table", "group column", "groups", "largest", "k", "groups over k", "valid"):
        table.add_column(name)
    for c in checks:
        table.add_row(c.table, c.group_column, str(c.groups), str(c.largest), str(c.k), str(c.over_k),
                      "yes" if c.valid else "NO")
    console.print(table)
