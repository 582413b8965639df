"""Dependence models the data owner declares for one column: values, maps and their JSON form.

A declared model is one more guarantee map for the transcripts it covers (docs/theory.md §14):
a transcript whose answers read only the model's columns is min(L_tight, L_model)-private.
A household model covers a binary column of a row-level table; a Gaussian household model
covers plain SUMs of a bounded float column (§21, chosen by `engine/prepare.py`, which charges
them with no time point so the books know every answer reading the column was one); a chain
covers a column and a time column, for answers each of whose released values depends on one time point (§14) or
reads several time points together (a `SeriesPoints`, §20). Mode model (`maps.MODEL_MODE`)
calibrates a query by the model covering it (`model_calibration`); a query no model covers
uses the base map (`maps.MODEL_BASE`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from .composition import within_budget
from .errors import CalibrationError
from .household import household_eta
from .inversion import Calibration, invert
from .maps import MODEL_MODE, guarantee
from .model import DependenceModel

# typing is not imported at run time (type checkers read the name TYPE_CHECKING as true).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from .model_gaussian import GaussianHousehold
    from .model_household import HouseholdModel
    from .model_markov import MarkovModel

# The models' maps and exact bounds (model_exact, model_maps, model_series, ...) are imported by
# the methods that use them: only a policy that declares a model needs them, and a query process
# under any other policy does not load them (issue 26: start-up is most of a query's cost).

DEFAULT_CAP = 10.0
"""An answer's model eps_dp is at most this many times the tight map's (the owner may lower it)."""

RHO_STEP = (0.05, 0.1)
"""How far above rho_high explain shows a household answer's level (a model that is off)."""

MAX_GAUSSIAN_RHO = 0.99
"""The largest rho explain moves a Gaussian household model to (the model needs rho < 1)."""

TRANSITION_STEP = 0.05
"""How far explain moves each transition probability of a chain (a model that is off)."""

CALIBRATION_CACHE_SIZE = 256


class SeriesPoints(tuple[int, ...]):
    """The time points an answer reads when its released values read several of them together
    (a count over all days, over a window, grouped by another key): charged to every one."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeriesPoints) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(("series", tuple(self)))


class SeriesSpend(dict[int, float]):
    """eps_dp per time point of a transcript holding at least one `SeriesPoints` answer."""


@dataclass(frozen=True)
class DeclaredModel:
    """One declared model: its kind, table, column (with its public values in order), its cap
    and its calibration model; a chain also has its time column and the time points lo..hi."""

    kind: str  # "household", "gaussian" or "markov"
    table: str
    column: str
    values: tuple  # the column's public values, in the order of the model's laws
    cap: float
    household: HouseholdModel | None = None
    chain: MarkovModel | None = None
    time: str | None = None
    first: int = 0  # the first time point (chains)
    last: int = 0  # the last time point (chains)
    gaussian: GaussianHousehold | None = None

    @property
    def columns(self) -> frozenset[str]:
        """The qualified columns an answer may read and stay covered by the model."""
        names = {self.column} | ({self.time} if self.time else set())
        return frozenset(f"{self.table}.{name}" for name in names)

    @property
    def times(self) -> int:
        """The number of time points T of a chain (1 for a household model)."""
        return self.last - self.first + 1

    def describe(self) -> str:
        """The model in a few words, as explain and refusals name it."""
        if self.household is not None:
            rho = (f"{self.household.rho_low:g}" if self.household.rho_low == self.household.rho_high
                   else f"[{self.household.rho_low:g}, {self.household.rho_high:g}]")
            return (f"household model of {self.table}.{self.column} (households of up to "
                    f"{self.household.max_size}, rho {rho})")
        if self.gaussian is not None:
            g = self.gaussian
            rho = f"{g.rho_low:g}" if g.rho_low == g.rho_high else f"[{g.rho_low:g}, {g.rho_high:g}]"
            return (f"Gaussian household model of {self.table}.{self.column} (households of up "
                    f"to {g.max_size}, rho {rho}, mean {g.mean:g}, sd {g.sd:g})")
        return (f"Markov chain of {self.table}.{self.column} over {self.table}.{self.time} "
                f"{self.first}..{self.last}")

    def covers(self, columns: frozenset[str] | None) -> bool:
        """Whether a transcript reading `columns` (None: every column) stays in the model."""
        return columns is not None and columns <= self.columns

    def level(self, total_dp: float, spend: tuple[float, ...] | None = None,
              series: bool = False) -> float:
        """L_model: a household's at the transcript's total; a chain's at its per-time spend
        (the quilt bound of §20 once an answer read several time points together)."""
        from .model_maps import chain_level, gaussian_column_level, household_column_level, series_level

        if self.household is not None:
            return household_column_level(self.household, total_dp)
        if self.gaussian is not None:
            return gaussian_column_level(self.gaussian, total_dp)
        assert self.chain is not None
        spent = spend if spend is not None else (0.0,) * self.times
        return (series_level if series else chain_level)(self.chain, spent)

    def capped(self, total_dp: float, query: DependenceModel,
               spend: tuple[float, ...] | None = None, series: bool = False) -> float:
        """The model's map counted only up to the cap: never below the prior-robust maps at
        1/cap of the spending (the tight map's, and for a series transcript the quilt ratio
        bound's), and for a series transcript never above that ratio bound itself (§20)."""
        from .model_maps import series_ratio_level

        floor = tight_level(total_dp / self.cap, query)
        if not series or self.chain is None or spend is None:
            return max(self.level(total_dp, spend, series), floor)
        ratio = series_ratio_level(self.chain, spend)
        lowered = series_ratio_level(self.chain, tuple(e / self.cap for e in spend))
        return min(ratio, max(self.level(total_dp, spend, True), min(floor, lowered)))

    def spend_of(self, eps_dp: float, times: tuple[int, ...]) -> tuple[float, ...]:
        """A chain's per-time spending of one answer of eps_dp reading `times`."""
        read = set(times)
        return tuple(eps_dp if t in read else 0.0 for t in range(self.first, self.last + 1))

    def own_level(self, eps_dp: float, times: tuple[int, ...] = ()) -> float:
        """The model's level of ONE answer of eps_dp (for a chain, reading the time points
        `times`: each released value one of them, or several together for `SeriesPoints`),
        a fresh transcript."""
        if self.chain is None:
            return self.level(eps_dp)
        return self.level(eps_dp, self.spend_of(eps_dp, times), isinstance(times, SeriesPoints))

    def answer_level(self, eps_dp: float, query: DependenceModel,
                     times: tuple[int, ...] = ()) -> float:
        """One answer's level: the tight map's under `query`, or the model's if smaller, the
        model's counted only up to the cap (never below the tight map's at eps_dp / cap)."""
        tight = tight_level(eps_dp, query)
        if self.chain is None:
            return min(tight, max(self.own_level(eps_dp, times),
                                  tight_level(eps_dp / self.cap, query)))
        series = isinstance(times, SeriesPoints)
        return min(tight, self.capped(eps_dp, query, self.spend_of(eps_dp, times), series))

    def calibrate(self, epsilon: float, query: DependenceModel,
                  times: tuple[int, ...] = ()) -> tuple[float, float]:
        """(eps_dp, tight eps_dp): the largest eps_dp whose answer_level meets epsilon, by
        bisection on the model's level (non-decreasing in eps_dp, §14), then verified. A
        series answer's level is at least eps_dp / cap (its own record's share), so its
        eps_dp is at most cap * epsilon."""
        from .model_exact import largest_within
        from .model_maps import capped_inverse

        tight = invert("tight", epsilon, query)
        if isinstance(times, SeriesPoints):
            eps_dp = max(tight, largest_within(lambda e: self.answer_level(e, query, times),
                                               epsilon, tight, self.cap * epsilon))
        else:
            eps_dp = capped_inverse(lambda e: self.own_level(e, times), epsilon, tight, self.cap)
        audited = self.answer_level(eps_dp, query, times)
        if not within_budget(audited, epsilon):
            raise CalibrationError(f"the {self.describe()} re-audits eps_dp={eps_dp:g} at level "
                                   f"{audited:.6g} > epsilon={epsilon:g}; use tight")
        return eps_dp, tight

    def checks(self, eps_dp: float, times: tuple[int, ...] = ()) -> tuple[tuple[str, float], ...]:
        """How the model's level of one answer of eps_dp moves if the model is off: for
        households at rho_high + 0.05 and + 0.1 (clipped to 1), for chains with each transition
        probability P(v | u), v != u, moved by -0.05 and +0.05 (P(u | u) takes the difference;
        moves leaving [0, 1] are skipped)."""
        from .model_markov import MarkovModel

        out: list[tuple[str, float]] = []
        if self.household is not None:
            for step in RHO_STEP:
                rho = min(1.0, self.household.rho_high + step)
                moved = replace(self, household=replace(self.household, rho_low=rho, rho_high=rho))
                out.append((f"rho {rho:g}", moved.own_level(eps_dp, times)))
            return tuple(out)
        if self.gaussian is not None:
            for step in RHO_STEP:
                rho = min(MAX_GAUSSIAN_RHO, self.gaussian.rho_high + step)
                moved = replace(self, gaussian=replace(self.gaussian, rho_low=rho, rho_high=rho))
                out.append((f"rho {rho:g}", moved.own_level(eps_dp, times)))
            return tuple(out)
        assert self.chain is not None
        matrix = [list(row) for row in self.chain.transition]
        for u, row in enumerate(matrix):
            for v in range(len(row)):
                for step in (-TRANSITION_STEP, TRANSITION_STEP):
                    if v == u or not (0.0 <= row[v] + step <= 1.0 and 0.0 <= row[u] - step <= 1.0):
                        continue
                    moved_rows = [list(r) for r in matrix]
                    moved_rows[u][v] += step
                    moved_rows[u][u] -= step
                    chain = MarkovModel(self.chain.initial, tuple(tuple(r) for r in moved_rows))
                    out.append((f"P({self.values[v]} | {self.values[u]}) {row[v] + step:.4g}",
                                replace(self, chain=chain).own_level(eps_dp, times)))
        return tuple(out)

    def own_eta(self) -> DependenceModel:
        """The (k, eta) the model implies for its columns: the policy must declare at least it."""
        from .model_exact import rho_grid
        from .model_gaussian import gaussian_eta
        from .model_markov import chain_eta

        if self.household is not None:
            marginal = np.array(self.household.marginal)
            eta = max(household_eta(size, rho, marginal) for rho in rho_grid(self.household)
                      for size in self.household.support_sizes)
            return DependenceModel(self.household.max_size, eta)
        if self.gaussian is not None:
            return DependenceModel(self.gaussian.max_size, gaussian_eta(self.gaussian))
        assert self.chain is not None
        return DependenceModel(self.times, chain_eta(self.chain, self.times))

    def record(self) -> dict:
        """The canonical JSON form the ledger's binding keeps (any change is refused)."""
        out: dict = {"kind": self.kind, "table": self.table, "column": self.column,
                     "values": list(self.values), "cap": self.cap}
        if self.household is not None:
            out |= {"sizes": list(self.household.sizes), "marginal": list(self.household.marginal),
                    "rho": [self.household.rho_low, self.household.rho_high]}
        if self.gaussian is not None:
            g = self.gaussian
            out |= {"max_size": g.max_size, "rho": [g.rho_low, g.rho_high], "mean": g.mean,
                    "sd": g.sd, "lower": g.lower, "upper": g.upper}
        if self.chain is not None:
            out |= {"time": self.time, "first": self.first, "last": self.last,
                    "initial": list(self.chain.initial),
                    "transition": [list(row) for row in self.chain.transition]}
        return out


def models_json(models: tuple[DeclaredModel, ...]) -> str:
    """The binding's text of the declared models ("" when there are none)."""
    return json.dumps([m.record() for m in models], sort_keys=True) if models else ""


def models_from_json(text: str) -> tuple[DeclaredModel, ...]:
    """Read `models_json` back (KeyError, TypeError or ValueError if it is not one)."""
    if not text:
        return ()
    from .model_gaussian import GaussianHousehold
    from .model_household import HouseholdModel
    from .model_markov import MarkovModel

    models = []
    for item in json.loads(text):
        household = chain = gaussian = None
        if item["kind"] == "household":
            low, high = item["rho"]
            household = HouseholdModel(tuple(item["sizes"]), tuple(item["marginal"]), low, high)
        elif item["kind"] == "gaussian":
            low, high = item["rho"]
            gaussian = GaussianHousehold(int(item["max_size"]), float(low), float(high),
                                         float(item["mean"]), float(item["sd"]),
                                         float(item["lower"]), float(item["upper"]))
        else:
            chain = MarkovModel(tuple(item["initial"]),
                                tuple(tuple(row) for row in item["transition"]))
        models.append(DeclaredModel(str(item["kind"]), str(item["table"]), str(item["column"]),
                                    tuple(item["values"]), float(item["cap"]), household, chain,
                                    item.get("time"), int(item.get("first", 0)),
                                    int(item.get("last", 0)), gaussian))
    return tuple(models)


def tight_level(eps_dp: float, model: DependenceModel) -> float:
    """The tight map at eps_dp (0 for nothing spent)."""
    return 0.0 if eps_dp == 0.0 else guarantee("tight", eps_dp, model)


@lru_cache(maxsize=CALIBRATION_CACHE_SIZE)
def model_calibration(declared: DeclaredModel, epsilon: float, model: DependenceModel,
                      times: tuple[int, ...]) -> tuple[Calibration, float]:
    """A declared model's calibration of one answer and the tight map's eps_dp (cached: a
    repeated query does not pay the bisection twice); CalibrationError if it cannot."""
    eps_dp, tight = declared.calibrate(epsilon, model, times)
    level = declared.answer_level(eps_dp, model, times)
    capped = eps_dp >= tight * declared.cap * (1 - 1e-9)
    note = f"capped at {declared.cap:g} x the tight map's" if capped else "the model's level"
    return Calibration(
        epsilon=epsilon, epsilon_dp=eps_dp, mode=MODEL_MODE, requested_mode=MODEL_MODE,
        level=level, model=model, options=(),
        justification=(f"{declared.describe()}: epsilon_dp {eps_dp:.4g} against the tight "
                       f"map's {tight:.4g} ({note})")), tight
