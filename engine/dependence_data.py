"""Owner-side reads of the data for `dpsql dependence`: group sizes against k, and a fit of the
household model with an upper confidence bound on each column set's within-group correlation.

Everything here depends on the private data and is printed to the data owner only; the
analyst sees none of it, but the eta the owner then declares becomes public through the
noise scales (docs/theory.md, "Fitting eta from the data").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from ..calibration import CalibrationError
from ..calibration.household import household_eta
from .backends.duckdb_execute import open_data
from .backends.duckdb_schema import duckdb_identifier
from .errors import InputError
from .policy import Policy, TableSpec


@dataclass(frozen=True)
class GroupCheck:
    """How a table's dependence groups compare with the policy's k (computed from the data)."""

    table: str
    group_column: str
    k: int
    groups: int
    largest: int
    over_k: int

    @property
    def valid(self) -> bool:
        """True when no group has more than k units."""
        return self.over_k == 0


@dataclass(frozen=True)
class SetFit:
    """The fitted within-group correlation of one column set and the eta it gives."""

    columns: tuple[str, ...]
    values: int
    agreement: float  # mean share of agreeing pairs within a group (groups of 2 or more)
    rho: float  # point estimate of the within-group correlation
    rho_upper: float  # its upper confidence bound
    shared: bool  # every group of 2 or more agrees on the whole set
    eta_upper: float  # exact eta of the model at rho_upper


@dataclass(frozen=True)
class DataFit:
    """Group sizes and the fitted column sets of one table, at one confidence level."""

    check: GroupCheck
    sizes: tuple[float, ...]
    confidence: float
    sets: tuple[SetFit, ...]


def open_owner_data(db: str | Path, policy: Policy, table: TableSpec) -> duckdb.DuckDBPyConnection:
    """Open the data as the engine does (read-only, locked down) and find the group column."""
    if table.chain:
        holder = table.chain[-1].table
        raise InputError(f"table {table.name} reaches its privacy unit through foreign keys "
                         f"({table.chain[0].describe()}): its dependence groups are those of "
                         f"{holder}; check and fit them on {holder}, the table holding the unit")
    if table.dependence_group is None:
        raise InputError(f"tables.{table.name}.dependence_group is not set: name the column that "
                         "identifies dependence groups (e.g. household_id) in the policy")
    conn = open_data(db, policy)
    found = {name for (name,) in conn.execute(
        "SELECT lower(column_name) FROM information_schema.columns WHERE table_schema = 'main' "
        "AND lower(table_name) = ?", [table.name]).fetchall()}
    if table.dependence_group not in found:
        conn.close()
        raise InputError(f"tables.{table.name}.dependence_group: no column "
                         f"{table.dependence_group!r} in the data")
    return conn


def _members(table: TableSpec) -> str:
    """SQL counting a group's members: its distinct units, or its rows when each row is one."""
    if table.privacy_unit is None:
        return "COUNT(*)"
    return f"COUNT(DISTINCT {duckdb_identifier(table.privacy_unit)})"


def check_groups(conn: duckdb.DuckDBPyConnection, table: TableSpec, k: int) -> GroupCheck:
    """The number of groups, the largest group and how many groups have more than k units."""
    group = duckdb_identifier(table.dependence_group or "")
    row = conn.execute(
        f"SELECT COUNT(*), COALESCE(MAX(n), 0), COUNT(*) FILTER (WHERE n > ?) FROM "
        f"(SELECT {_members(table)} AS n FROM {duckdb_identifier(table.name)} GROUP BY {group})",
        [k]).fetchone()
    assert row is not None  # an aggregate without GROUP BY returns one row
    groups, largest, over = row
    return GroupCheck(table.name, table.dependence_group or "", k, int(groups), int(largest), int(over))


def fit_sets(conn: duckdb.DuckDBPyConnection, table: TableSpec, k: int,
             sets: Sequence[tuple[str, ...]], confidence: float) -> DataFit:
    """Fit each column set's values as one categorical column of the household model.

    The model: each member takes the group's shared value with probability rho, else an
    independent draw from the marginal p. Two members of a group then agree with probability
    s = rho^2 + (1 - rho^2) q, q = sum_v p_v^2, whatever the group's size. Groups are
    independent, so Hoeffding's inequality bounds s above and each p_v below from per-group
    averages in [0, 1]; a union bound splits 1 - confidence between them. Then
    rho^2 <= (s_upper - q_lower) / (1 - q_lower), and eta (increasing in rho) is computed
    exactly at rho_upper and the estimated marginal, over the observed group sizes.
    """
    if table.max_rows_per_unit != 1:
        raise InputError(f"tables.{table.name}: the fit needs one record per unit, but "
                         f"max_rows_per_unit is {table.max_rows_per_unit}")
    check = check_groups(conn, table, k)
    sizes = _size_pmf(conn, table)
    fits = tuple(_fit_set(conn, table, columns, sizes, confidence) for columns in sets)
    return DataFit(check, sizes, confidence, fits)


def _size_pmf(conn: duckdb.DuckDBPyConnection, table: TableSpec) -> tuple[float, ...]:
    """The observed distribution of group sizes, (Pr[1], Pr[2], ...)."""
    rows = conn.execute(
        f"SELECT n, COUNT(*) FROM (SELECT {_members(table)} AS n FROM "
        f"{duckdb_identifier(table.name)} GROUP BY {duckdb_identifier(table.dependence_group or '')}) "
        "GROUP BY n").fetchall()
    if not rows:
        raise InputError(f"table {table.name} has no rows: nothing to fit")
    counts = np.zeros(max(n for n, _ in rows))
    for n, count in rows:
        counts[n - 1] = count
    return tuple(float(c) for c in counts / counts.sum())


def _fit_set(conn: duckdb.DuckDBPyConnection, table: TableSpec, columns: tuple[str, ...],
             sizes: tuple[float, ...], confidence: float) -> SetFit:
    """One column set's agreement, correlation bound and eta (see fit_sets)."""
    value = " || '\x1f' || ".join(f"COALESCE(CAST({duckdb_identifier(c)} AS VARCHAR), '\x1e')"
                                  for c in columns)
    group = duckdb_identifier(table.dependence_group or "")
    rows = np.array(conn.execute(
        f"SELECT dense_rank() OVER (ORDER BY g), dense_rank() OVER (ORDER BY v) - 1, n FROM "
        f"(SELECT {group} AS g, {value} AS v, COUNT(*) AS n FROM {duckdb_identifier(table.name)} "
        "GROUP BY g, v)").fetchall(), dtype=np.int64).reshape(-1, 3)
    groups, values = int(rows[:, 0].max()), int(rows[:, 1].max()) + 1
    counts = np.zeros((groups, values))
    counts[rows[:, 0] - 1, rows[:, 1]] = rows[:, 2]
    size = counts.sum(axis=1)
    pairs = size >= 2
    marginal = (counts / size[:, None]).mean(axis=0)
    if not pairs.any() or values == 1:
        return SetFit(columns, values, 1.0, 0.0, 0.0, False, 0.0)
    mates = counts[pairs]
    agree = ((mates * (mates - 1)).sum(axis=1) / (size[pairs] * (size[pairs] - 1)))
    alpha = 1.0 - confidence
    s_upper = agree.mean() + math.sqrt(math.log(2.0 / alpha) / (2 * len(agree)))
    margin = math.sqrt(math.log(2.0 * values / alpha) / (2 * groups))
    q_lower = float((np.clip(marginal - margin, 0.0, None) ** 2).sum())
    q = float((marginal ** 2).sum())
    rho = math.sqrt(min(1.0, max(0.0, (agree.mean() - q) / (1.0 - q))))
    rho_upper = math.sqrt(min(1.0, max(0.0, (s_upper - q_lower) / (1.0 - q_lower))))
    shared = bool(agree.min() == 1.0)
    if shared:
        rho_upper = 1.0
    try:
        eta = max((household_eta(n, rho_upper, marginal)
                   for n, share in enumerate(sizes, start=1) if share > 0 and n > 1), default=0.0)
    except CalibrationError as exc:
        raise InputError(f"cannot compute eta for columns {', '.join(columns)}: {exc}") from None
    return SetFit(columns, values, float(agree.mean()), rho, rho_upper, shared, eta)
