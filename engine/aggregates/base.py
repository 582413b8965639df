"""What an aggregate owns, and what it needs from binding: the seam for adding aggregates.

An `Aggregate` is what the analyst writes (COUNT, SUM, AVG, ...): it binds the sqlglot call to
an expression over noisy measurements, and gives an output's interval. A `Measured` aggregate
is also one noisy measurement itself: it says what the exact value is (its SQL), how far one
individual moves it (sensitivity), whether it is an integer (which picks the discrete Laplace
over the Laplace) and what it reads. What an aggregate reads is an `Operand`: a policy column or
a row expression over policy columns, with the bounds interval arithmetic derives for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from sqlglot import exp

from ..policy import ColumnSpec, Ranged, TableSpec
from ..sql_types import SqlType

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Operand(Ranged):
    """The argument of an aggregate: a policy column, or a row expression over policy columns.

    `value` is the hardened expression DuckDB evaluates on each row (engine/sql/harden.py), over
    quoted policy column names; `lower`/`upper` are the public bounds of its value, derived
    from the policy (a column's bounds, or interval arithmetic over an expression), to which
    the value is clamped; `columns` are the policy columns it reads."""

    name: str  # how labels show it: the column's name, or the expression's SQL
    type: SqlType  # int, float, str or bool (booleans are summed as 0/1)
    value: exp.Expression
    columns: tuple[ColumnSpec, ...]
    lower: float | None = None
    upper: float | None = None


class Binder(Protocol):
    """What an aggregate's binding rule may ask of the query being bound."""

    @property
    def table(self) -> TableSpec: ...

    @property
    def quantile_bins(self) -> int:
        """The policy's number of equal bins a quantile's histogram cuts [lower, upper] into."""
        ...

    def measurement(self, kind: Measured, operand: Operand | None) -> exp.Column:
        """The (shared) noisy measurement of `kind` on `operand`, as a column reference."""
        ...

    def operand(self, node: exp.Expr, arg: exp.Expression, numeric: bool) -> Operand:
        """The aggregate argument `arg` of `node`: a column or a row expression, type-checked;
        with `numeric`, a number (a condition counts as 0/1) with bounds derived from the
        policy, refused naming the column whose bound is missing."""
        ...

    def is_unit(self, node: exp.Expression) -> bool:
        """Whether `node` names the table's privacy unit."""
        ...


class Accuracy(Protocol):
    """A measurement's noise, as far as intervals need it."""

    def accuracy(self, alpha: float) -> float: ...

    def sum_accuracy(self, terms: int, alpha: float) -> float:
        """Half-width a with Pr[|sum of `terms` independent draws of the noise| > a] <= alpha."""
        ...


class Aggregate:
    """An aggregate function the analyst may write."""

    name: str  # as the analyst writes it, e.g. "AVG"
    usage: str  # how refusals list it, e.g. "AVG(expr)"
    function: str  # the SQL function, e.g. "COUNT" for COUNT(DISTINCT unit)

    def matches(self, node: exp.AggFunc) -> bool:
        """Whether this aggregate binds `node`."""
        raise NotImplementedError

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        """Check `node` and return its value as an expression over noisy measurements."""
        raise NotImplementedError

    def for_call(self, node: exp.AggFunc) -> Aggregate:
        """The aggregate that gives the interval of this call: itself, unless the interval
        depends on a literal argument of the call (a quantile's q)."""
        return self

    def halfwidths(self, measurements: tuple[str, ...], operand: Operand | None,
                   frame: pd.DataFrame, noise: Mapping[str, Accuracy], alpha: float) -> np.ndarray:
        """Per group, a half-width that covers the exact value with probability >= 1 - alpha."""
        raise NotImplementedError

    def describe(self, operand: Operand) -> str:
        """How answers name a call of it on `operand`, e.g. AVG(income)."""
        return f"{self.name}({operand.name})"

    def possible(self, operand: Operand | None) -> tuple[float, float]:
        """The values the exact statistic can take on any data (a count is >= 0), which shown
        intervals are cut to; unbounded unless the aggregate says more."""
        return -math.inf, math.inf


class Measured(Aggregate):
    """An aggregate that is itself one noisy measurement."""

    reads_unit = False  # whether its SQL reads the privacy unit column
    celled = False  # whether its values are named per cell (`<name>_<i>`), however many cells
    binned = False  # whether its cells are counts of rows per cell index (`bin_sql`)
    bound: frozenset[str]  # the DuckDB aggregate functions its SQL binds to (the gate's allow-list)

    def label(self, operand: Operand | None) -> str:
        """How answers and the ledger name the measurement, e.g. SUM(income)."""
        inner = "*" if operand is None else operand.name
        return f"{self.function}({inner})"

    def integer(self, operand: Operand | None) -> bool:
        """Whether the exact value is an integer (so the discrete Laplace applies)."""
        return True

    def cells(self, operand: Operand | None) -> int:
        """How many noisy values it releases per group (a histogram: one per bin), all under
        one sensitivity and one noise draw."""
        return 1

    def row_value(self, operand: Operand | None) -> exp.Expr | None:
        """A value computed once per bounded row that its cells read (a histogram's clamped
        value), or None."""
        return None

    def cell_sql(self, operand: Operand | None, table: TableSpec,
                 row: exp.Expr) -> tuple[exp.Expr, ...]:
        """The exact value of each cell over the bounded rows (`row`: the `row_value` column)."""
        return (self.sql(operand, table),)

    def guess_sql(self, operand: Operand | None, row: exp.Expr) -> exp.Expr:
        """For a binned measurement, a first guess at a row's cell (over `row`, the `row_value`
        column), computed once per row for `bin_sql`."""
        raise NotImplementedError

    def bin_sql(self, operand: Operand | None, row: exp.Expr, guess: exp.Expr) -> exp.Expr:
        """For a binned measurement, the cell a bounded row counts in (over `row` and `guess`,
        the `guess_sql` column; NULL: none), so one grouped COUNT computes every cell."""
        raise NotImplementedError

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> float | int:
        """How far one individual (at most `rows_per_unit` rows) moves the value, in L1 over all
        groups (docs/theory.md §8)."""
        raise NotImplementedError

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        """The exact value over the bounded rows."""
        raise NotImplementedError

    def columns(self, operand: Operand | None) -> tuple[ColumnSpec, ...]:
        """The policy columns its SQL reads."""
        return () if operand is None else operand.columns

    def halfwidths(self, measurements: tuple[str, ...], operand: Operand | None,
                   frame: pd.DataFrame, noise: Mapping[str, Accuracy], alpha: float) -> np.ndarray:
        """The measurement's own noise bound, the same for every group."""
        return np.full(len(frame), noise[measurements[0]].accuracy(alpha))
