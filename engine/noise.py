"""Noise through OpenDP: discrete Laplace for integer measurements, Laplace for float ones."""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

# OpenDP's modules by name rather than `opendp.prelude`, which also imports its sklearn, numpy
# and polars extras (a tenth of a second on every command line start) that dpsql never uses.
from opendp.accuracy import discrete_laplacian_scale_to_accuracy, laplacian_scale_to_accuracy
from opendp.domains import atom_domain, vector_domain
from opendp.measurements import make_laplace
from opendp.metrics import absolute_distance, l1_distance
from opendp.mod import Measurement as OpenDPMeasurement
from opendp.mod import enable_features

from .errors import DpsqlError
from .plan import Measurement

INT_LIMIT = 2**62  # exact integers are saturated here (a 1-Lipschitz map) before i64 noise


class NoiseKind(enum.StrEnum):
    """The noise a measurement gets, by the name answers and the ledger show: OpenDP's Laplace
    on integers (discrete, when the aggregate is an integer) or on real values."""

    DISCRETE_LAPLACE = "discrete_laplace"
    LAPLACE = "laplace"


@dataclass(frozen=True)
class Mechanism:
    """The noise for one measurement: its OpenDP measurement and what it costs and promises."""

    measurement: Measurement
    mechanism: NoiseKind
    sensitivity: float | int
    epsilon: float  # the share of the query's epsilon_dp this measurement spends
    scale: float
    opendp_measurement: OpenDPMeasurement

    def accuracy(self, alpha: float) -> float:
        """Half-width a with Pr[|noise| > a] = alpha, from OpenDP's accuracy helpers."""
        return _accuracy(self.mechanism, self.scale, alpha)

    def sum_accuracy(self, terms: int, alpha: float) -> float:
        """Half-width a with Pr[|sum of `terms` independent draws of this noise| > a] <= alpha:
        Chernoff's bound on the sum's moment generating function (docs/theory.md §15)."""
        return _sum_accuracy(self.mechanism, self.scale, terms, alpha)

    @property
    def ci95(self) -> float:
        return self.accuracy(0.05)

    @functools.cached_property
    def opendp_scalar(self) -> OpenDPMeasurement | None:
        """The same noise as an OpenDP measurement of one value (an atom domain under the
        absolute distance, its privacy map checked as the vector's is), which releases a single
        cell with less Python around OpenDP's sampler; made on the first single value and
        kept with the mechanism. None if its map would exceed the epsilon (the vector is used)."""
        integer = self.mechanism == NoiseKind.DISCRETE_LAPLACE
        domain = atom_domain(T="i64") if integer else atom_domain(T=float, nan=False)
        meas = make_laplace(domain, absolute_distance(T="i64" if integer else float),
                            scale=self.scale)
        d_in = int(self.sensitivity) if integer else float(self.sensitivity)
        return meas if meas.map(d_in) <= self.epsilon else None


@functools.lru_cache(maxsize=1024)
def _accuracy(mechanism: NoiseKind, scale: float, alpha: float) -> float:
    """OpenDP's accuracy of a mechanism at a scale (remembered: every answer asks it again)."""
    if scale == 0:
        return 0.0
    if mechanism == NoiseKind.DISCRETE_LAPLACE:
        return discrete_laplacian_scale_to_accuracy(scale, alpha)
    return laplacian_scale_to_accuracy(scale, alpha)


@functools.lru_cache(maxsize=65536)
def _sum_accuracy(mechanism: NoiseKind, scale: float, terms: int, alpha: float) -> float:
    """min over t in (0, 1/scale) of (terms·ln M(t) + ln(2/alpha)) / t, M the moment generating
    function of one draw: for each such t, Pr[S >= a] <= e^(-ta) M(t)^terms (Markov's inequality
    on e^(tS)), and the same for -S, so every t on the grid gives a valid half-width."""
    if scale == 0:
        return 0.0
    r = math.exp(-1.0 / scale)
    best = math.inf
    for i in range(1, 513):
        t = i / (513 * scale)
        if mechanism == NoiseKind.DISCRETE_LAPLACE:  # P(k) ∝ r^|k|, r = e^(-1/scale)
            log_m = 2 * math.log1p(-r) - math.log1p(-r * math.exp(t)) - math.log1p(-r * math.exp(-t))
        else:  # Laplace: M(t) = 1 / (1 - scale² t²)
            log_m = -math.log1p(-((scale * t) ** 2))
        best = min(best, (terms * log_m + math.log(2.0 / alpha)) / t)
    return best


def build_mechanism(measurement: Measurement, sensitivity: float | int,
                    epsilon: float, integer: bool | None = None) -> Mechanism:
    """Make the OpenDP measurement for a vector of group values with this L1 sensitivity, and
    check OpenDP's own privacy map: it must not exceed the epsilon we mean to spend. `integer`
    False asks Laplace noise on real values (a workload's weighted strategy answers)."""
    enable_features("contrib")  # OpenDP's Laplace on these domains is a contrib measurement
    integer = measurement.integer if integer is None else integer
    scale = sensitivity / epsilon
    d_in: int | float
    if integer:
        space = vector_domain(atom_domain(T="i64")), l1_distance(T="i64")
        d_in = int(sensitivity)
    else:
        space = vector_domain(atom_domain(T=float, nan=False)), l1_distance(T=float)
        d_in = float(sensitivity)
    for _ in range(64):
        meas = make_laplace(*space, scale=scale)
        spent = meas.map(d_in)
        if spent <= epsilon:
            name = NoiseKind.DISCRETE_LAPLACE if integer else NoiseKind.LAPLACE
            return Mechanism(measurement, name, sensitivity, epsilon, scale, meas)
        scale = math.nextafter(scale, math.inf)
    raise DpsqlError(
        f"internal check failed: OpenDP's privacy map for {measurement.label} stays above "
        f"epsilon {epsilon}; nothing was charged"
    )


def release_cells(mechanism: Mechanism, exact: Mapping[str, list]) -> dict[str, list]:
    """Add noise to one measurement's cells (`exact`: cell column -> one value per group), all
    drawn as one vector, the one its sensitivity is stated for."""
    cells = mechanism.measurement.cells
    groups = len(exact[cells[0]])
    noisy = release(mechanism, [value for cell in cells for value in exact[cell]])
    return {cell: noisy[i * groups:(i + 1) * groups] for i, cell in enumerate(cells)}


def release(mechanism: Mechanism, exact: list) -> list:
    """Add noise to one measurement's exact values (one per group): one value by the scalar
    measurement, several as one vector, the one its sensitivity is stated for."""
    values: list[int] | list[float]
    if mechanism.mechanism == NoiseKind.DISCRETE_LAPLACE:
        values = [max(-INT_LIMIT, min(INT_LIMIT, int(v))) for v in exact]
    else:
        values = [float(v) for v in exact]
    if len(values) == 1 and (scalar := mechanism.opendp_scalar) is not None:
        return [scalar(values[0])]
    return list(mechanism.opendp_measurement(values))
