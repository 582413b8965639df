"""Households whose records have several columns: the exact eta_S of any set S of columns read.

A household draws a hidden state H (factor values and each correlated column's shared value)
and then its members' records independently given H. eta_S is the largest total variation,
over a member's two possible FULL records t, t', between the laws of the housemates' records
projected onto S given X_i = t and given X_i = t' (docs/theory.md, "Column-scoped eta").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from itertools import product
from math import comb

import numpy as np

from .errors import CalibrationError
from .household import MAX_COUNT_VECTORS, MAX_PMF_ENTRIES, count_vectors, multinomial_log_pmf
from .model import DependenceModel
from .validation import require_pmf, require_probability

MAX_HIDDEN_STATES = 100_000
"""Largest number of hidden household states (factor values x shared values) enumerated."""


@dataclass(frozen=True)
class Factor:
    """A household-level latent (e.g. an outbreak) with its pmf over values 0, 1, ..."""

    name: str
    pmf: tuple[float, ...]


@dataclass(frozen=True)
class Column:
    """One column of a member's record.

    Without a factor, each member takes the household's shared value Z ~ marginal with
    probability rho, else an independent draw from marginal (rho = 1: shared by all, like a
    state; rho = 0: independent). With a factor, each member's value is drawn independently
    from given[f], the row of the household's factor value f.
    """

    name: str
    values: tuple
    marginal: tuple[float, ...] = ()
    rho: float = 0.0
    factor: str | None = None
    given: tuple[tuple[float, ...], ...] = ()

    @property
    def linked(self) -> bool:
        """True if the column depends on the household's hidden state (so on housemates)."""
        return self.factor is not None or self.rho > 0.0


@dataclass(frozen=True)
class HouseholdColumns:
    """Independent households: size ~ sizes (Pr[1], Pr[2], ...), then records as in Column."""

    sizes: tuple[float, ...]
    columns: tuple[Column, ...]
    factors: tuple[Factor, ...] = ()

    def __post_init__(self) -> None:
        """Check sizes, factors and columns; each error names the field and what is accepted."""
        require_pmf("sizes", self.sizes)
        names = [f.name for f in self.factors]
        if len(set(names)) != len(names):
            raise CalibrationError(f"factors must have distinct names, got {names}")
        for factor in self.factors:
            require_pmf(f"factors.{factor.name}", factor.pmf)
        if not self.columns:
            raise CalibrationError("a household model needs at least one column")
        seen = [c.name for c in self.columns]
        if len(set(seen)) != len(seen):
            raise CalibrationError(f"columns must have distinct names, got {seen}")
        for column in self.columns:
            _check_column(column, {f.name: len(f.pmf) for f in self.factors})

    @property
    def k(self) -> int:
        """The largest household size with positive probability."""
        return int(np.flatnonzero(np.asarray(self.sizes) > 0).max()) + 1

    def column(self, name: str) -> Column:
        """The column called name."""
        for column in self.columns:
            if column.name == name:
                return column
        raise CalibrationError(
            f"unknown column {name!r}; the model has {', '.join(c.name for c in self.columns)}"
        )

    def dependence(self, columns: Iterable[str]) -> DependenceModel:
        """(k, eta_S) for the set S of columns read."""
        return DependenceModel(self.k, column_set_eta(self, columns))


def _check_column(column: Column, factors: dict[str, int]) -> None:
    """One column's law is complete: values, and either marginal (+ rho) or factor + given."""
    where = f"columns.{column.name}"
    if len(column.values) < 1 or len(set(column.values)) != len(column.values):
        raise CalibrationError(f"{where}.values must be a non-empty list of distinct values")
    require_probability(f"{where}.rho", column.rho)
    if column.factor is None:
        if column.given:
            raise CalibrationError(f"{where}.given needs a factor naming the household latent")
        law = require_pmf(f"{where}.marginal", column.marginal)
        if law.shape != (len(column.values),):
            raise CalibrationError(
                f"{where}.marginal must give one probability per value ({len(column.values)}), "
                f"got {len(column.marginal)}"
            )
        return
    if column.factor not in factors:
        raise CalibrationError(
            f"{where}.factor must name a declared factor ({', '.join(factors) or 'none declared'}), "
            f"got {column.factor!r}"
        )
    if column.rho != 0.0 or column.marginal:
        raise CalibrationError(f"{where}: a factor-driven column takes given rows, not marginal/rho")
    if len(column.given) != factors[column.factor]:
        raise CalibrationError(
            f"{where}.given must have one row per value of {column.factor} "
            f"({factors[column.factor]}), got {len(column.given)}"
        )
    for row in column.given:
        law = require_pmf(f"{where}.given", row)
        if law.shape != (len(column.values),):
            raise CalibrationError(
                f"{where}.given rows must give one probability per value ({len(column.values)})"
            )


def hidden_states(model: HouseholdColumns,
                  columns: tuple[Column, ...]) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """Every hidden household state H: its probability, and each given column's member law under H.

    H is the factors' values and, for each correlated column among `columns`, its shared
    value; columns outside `columns` are summed out (their shared values do not matter).
    """
    factor_axes = [range(len(f.pmf)) for f in model.factors]
    shared = [c for c in columns if c.factor is None and c.rho > 0.0]
    axes = factor_axes + [range(len(c.values)) for c in shared]
    count = int(np.prod([len(a) for a in axes])) if axes else 1
    if count > MAX_HIDDEN_STATES:
        raise CalibrationError(
            f"the model has {count} hidden household states; at most {MAX_HIDDEN_STATES} are enumerated"
        )
    weights, laws = [], []
    index = {f.name: n for n, f in enumerate(model.factors)}
    for state in product(*axes):
        levels = state[: len(factor_axes)]
        values = dict(zip((c.name for c in shared), state[len(factor_axes):], strict=True))
        weight = float(np.prod([model.factors[n].pmf[v] for n, v in enumerate(levels)]))
        weight *= float(np.prod([model.column(name).marginal[v] for name, v in values.items()]))
        if weight == 0.0:
            continue
        weights.append(weight)
        laws.append([_member_law(c, levels, index, values) for c in columns])
    return np.array(weights), laws


def _member_law(column: Column, levels: tuple, index: dict[str, int], values: dict[str, int]) -> np.ndarray:
    """Pr[a member's value of column | the hidden state]."""
    if column.factor is not None:
        return np.asarray(column.given[levels[index[column.factor]]], dtype=float)
    marginal = np.asarray(column.marginal, dtype=float)
    if column.rho == 0.0:
        return marginal
    return column.rho * np.eye(len(marginal))[values[column.name]] + (1.0 - column.rho) * marginal


def _record_law(laws: list[np.ndarray]) -> np.ndarray:
    """The flattened product law of a record made of independent columns (1 for no column)."""
    return reduce(np.multiply.outer, laws, np.ones(())).reshape(-1)


def record_shape(model: HouseholdColumns) -> tuple[int, ...]:
    """A member's record as household_joint_pmf flattens it: one axis per column, in order."""
    return tuple(len(c.values) for c in model.columns)


def household_joint_pmf(model: HouseholdColumns, size: int) -> np.ndarray:
    """Exact joint pmf of a household of `size` members, one axis per member over full records."""
    records = int(np.prod(record_shape(model)))
    if records**size > MAX_PMF_ENTRIES:
        raise CalibrationError(
            f"household pmf would have {records}**{size} entries; at most {MAX_PMF_ENTRIES} are built"
        )
    weights, laws = hidden_states(model, model.columns)
    joint = np.zeros((records,) * size)
    for weight, state in zip(weights, laws, strict=True):
        member = _record_law(state)
        joint += weight * reduce(np.multiply.outer, [member] * size, np.ones(()))
    return joint


def _read_columns(model: HouseholdColumns, columns: Iterable[str]) -> tuple[Column, ...]:
    """The model's columns named in `columns` (each must exist), in model order."""
    names = set()
    for name in columns:
        names.add(model.column(name).name)
    return tuple(c for c in model.columns if c.name in names)


def column_set_eta(model: HouseholdColumns, columns: Iterable[str]) -> float:
    """Exact eta_S: the largest over household sizes of the housemates' projected TV.

    Only columns linked to the hidden state matter: an unlinked column of i's record does not
    move the posterior of H, and an unlinked read column of the housemates is an independent
    factor common to both laws, which leaves their TV unchanged. Given H the housemates'
    projected records are i.i.d., so (as in calibration.household.household_eta) the TV of
    their laws equals the TV of the laws of their count vectors, enumerated exactly. Sizes
    are taken as known (the worst case, each size's TV is exact; a mixture over sizes can
    only be closer).
    """
    read = [c for c in _read_columns(model, columns) if c.linked]
    linked = tuple(c for c in model.columns if c.linked)
    if not read:
        return 0.0
    weights, laws = hidden_states(model, linked)
    which = [linked.index(c) for c in read]
    full = np.array([_record_law(state) for state in laws])  # H x (records of linked columns)
    posterior = weights[:, None] * full
    mass = posterior.sum(axis=0)
    posterior = posterior[:, mass > 0] / mass[mass > 0]
    projected = np.array([_record_law([state[j] for j in which]) for state in laws])
    eta = 0.0
    for size in np.flatnonzero(np.asarray(model.sizes) > 0) + 1:
        if size > 1:
            eta = max(eta, _housemates_tv(posterior, projected, int(size) - 1))
    return min(1.0, eta)


def _housemates_tv(posterior: np.ndarray, projected: np.ndarray, mates: int) -> float:
    """max over t, t' of TV between sum_H Pr[H | t] Mult(mates, projected[H]) for t and t'."""
    values = projected.shape[1]
    vectors = comb(mates + values - 1, values - 1)
    if vectors > MAX_COUNT_VECTORS:
        raise CalibrationError(
            f"{mates} housemates over {values} projected records need {vectors} count vectors; "
            f"at most {MAX_COUNT_VECTORS} are enumerated"
        )
    counts = count_vectors(mates, values)
    given = np.array([np.exp(multinomial_log_pmf(counts, law)) for law in projected])
    outcome = posterior.T @ given  # t x count vectors
    return max((0.5 * float(np.abs(outcome[a + 1:] - outcome[a]).sum(axis=1).max())
                for a in range(len(outcome) - 1)), default=0.0)


def eta_of_pmf_projection(pmf: np.ndarray, projection: Iterable[int]) -> float:
    """Brute-force eta of a joint pmf whose axes are individuals' FULL records (a unit's rows,
    say), the others seen only through `projection` (record index -> index of what a query
    reads of it: the unit's rows projected onto the columns read, their number included).
    Condition on one individual's whole record, map every other record through `projection`,
    and take the largest TV over value pairs (docs/theory.md §28)."""
    array = require_pmf("pmf", pmf)
    index = np.asarray(list(projection), dtype=np.int64)
    if index.ndim != 1 or any(len(index) != n for n in array.shape) or (index < 0).any():
        raise CalibrationError(f"projection must map each of the {array.shape[0]} records to an "
                               f"index >= 0, got {len(index)} entries")
    onehot = np.eye(int(index.max()) + 1)[index]  # records x projected values
    eta = 0.0
    for i in range(array.ndim):
        table = np.moveaxis(array, i, 0)
        for axis in range(1, table.ndim):
            table = np.moveaxis(np.tensordot(table, onehot, axes=([axis], [0])), -1, axis)
        rows = table.reshape(len(table), -1)
        rows = rows[rows.sum(axis=1) > 0]
        rows = rows / rows.sum(axis=1, keepdims=True)
        for a in range(len(rows) - 1):
            eta = max(eta, 0.5 * float(np.abs(rows[a + 1:] - rows[a]).sum(axis=1).max()))
    return min(eta, 1.0)
