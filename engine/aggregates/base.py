"""What an aggregate owns, and what it needs from binding: the seam for adding aggregates.

An `Aggregate` is what the analyst writes (COUNT, SUM, AVG, ...): it binds the sqlglot call to
an expression over noisy measurements, and gives an output's interval. A `Measured` aggregate
is also one noisy measurement itself: it says what the exact value is (its SQL), how far one
individual moves it (sensitivity), whether it is an integer (which picks the discrete Laplace
over the Laplace) and what it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np
import pandas as pd
from sqlglot import exp

from ..policy import ColumnSpec, TableSpec


class Binder(Protocol):
    """What an aggregate's binding rule may ask of the query being bound."""

    @property
    def table(self) -> TableSpec: ...

    def measurement(self, kind: Measured, column: ColumnSpec | None) -> exp.Column:
        """The (shared) noisy measurement of `kind` on `column`, as a column reference."""
        ...

    def bare_column(self, node: exp.Expr, arg: exp.Expression) -> ColumnSpec:
        """The policy column `arg` names, refusing anything but a bare column."""
        ...

    def is_unit(self, node: exp.Expression) -> bool:
        """Whether `node` names the table's privacy unit."""
        ...


class Accuracy(Protocol):
    """A measurement's noise, as far as intervals need it."""

    def accuracy(self, alpha: float) -> float: ...


class Aggregate:
    """An aggregate function the analyst may write."""

    name: str  # as the analyst writes it, e.g. "AVG"
    usage: str  # how refusals list it, e.g. "AVG(col)"
    function: str  # the SQL function, e.g. "COUNT" for COUNT(DISTINCT unit)

    def matches(self, node: exp.AggFunc) -> bool:
        """Whether this aggregate binds `node`."""
        raise NotImplementedError

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        """Check `node` and return its value as an expression over noisy measurements."""
        raise NotImplementedError

    def halfwidths(self, measurements: tuple[str, ...], column: ColumnSpec | None,
                   frame: pd.DataFrame, noise: Mapping[str, Accuracy], alpha: float) -> np.ndarray:
        """Per group, a half-width that covers the exact value with probability >= 1 - alpha."""
        raise NotImplementedError


class Measured(Aggregate):
    """An aggregate that is itself one noisy measurement."""

    reads_unit = False  # whether its SQL reads the privacy unit column
    bound: frozenset[str]  # the DuckDB aggregate functions its SQL binds to (the gate's allow-list)

    def label(self, column: ColumnSpec | None) -> str:
        """How answers and the ledger name the measurement, e.g. SUM(income)."""
        inner = "*" if column is None else column.name
        return f"{self.function}({inner})"

    def integer(self, column: ColumnSpec | None) -> bool:
        """Whether the exact value is an integer (so the discrete Laplace applies)."""
        return True

    def sensitivity(self, column: ColumnSpec | None, rows_per_unit: int, grouped: bool) -> float | int:
        """How far one individual (at most `rows_per_unit` rows) moves the value, in L1 over all
        groups (docs/theory.md §8)."""
        raise NotImplementedError

    def sql(self, column: ColumnSpec | None, table: TableSpec) -> exp.Expr:
        """The exact value over the bounded rows."""
        raise NotImplementedError

    def columns(self, column: ColumnSpec | None) -> tuple[ColumnSpec, ...]:
        """The policy columns its SQL reads."""
        return () if column is None else (column,)

    def halfwidths(self, measurements: tuple[str, ...], column: ColumnSpec | None,
                   frame: pd.DataFrame, noise: Mapping[str, Accuracy], alpha: float) -> np.ndarray:
        """The measurement's own noise bound, the same for every group."""
        return np.full(len(frame), noise[measurements[0]].accuracy(alpha))
