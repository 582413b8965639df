"""Noise through OpenDP: discrete Laplace for integer measurements, Laplace for float ones."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

# OpenDP's modules by name rather than `opendp.prelude`, which also imports its sklearn, numpy
# and polars extras (a tenth of a second on every command line start) that dpsql never uses.
from opendp.accuracy import discrete_laplacian_scale_to_accuracy, laplacian_scale_to_accuracy
from opendp.domains import atom_domain, vector_domain
from opendp.measurements import make_laplace
from opendp.metrics import l1_distance
from opendp.mod import Measurement as OpenDPMeasurement
from opendp.mod import enable_features

from .errors import DpsqlError
from .plan import Measurement

enable_features("contrib")

INT_LIMIT = 2**62  # exact integers are saturated here (a 1-Lipschitz map) before i64 noise


@dataclass(frozen=True)
class Mechanism:
    """The noise for one measurement: its OpenDP measurement and what it costs and promises."""

    measurement: Measurement
    mechanism: str  # "discrete_laplace" | "laplace"
    sensitivity: float | int
    epsilon: float  # the share of the query's epsilon_dp this measurement spends
    scale: float
    opendp_measurement: OpenDPMeasurement

    def accuracy(self, alpha: float) -> float:
        """Half-width a with Pr[|noise| > a] = alpha, from OpenDP's accuracy helpers."""
        return _accuracy(self.mechanism, self.scale, alpha)

    @property
    def ci95(self) -> float:
        return self.accuracy(0.05)


@functools.lru_cache(maxsize=1024)
def _accuracy(mechanism: str, scale: float, alpha: float) -> float:
    """OpenDP's accuracy of a mechanism at a scale (remembered: every answer asks it again)."""
    if scale == 0:
        return 0.0
    if mechanism == "discrete_laplace":
        return discrete_laplacian_scale_to_accuracy(scale, alpha)
    return laplacian_scale_to_accuracy(scale, alpha)


def build_mechanism(measurement: Measurement, sensitivity: float | int,
                    epsilon: float) -> Mechanism:
    """Make the OpenDP measurement for a vector of group values with this L1 sensitivity, and
    check OpenDP's own privacy map: it must not exceed the epsilon we mean to spend."""
    integer = measurement.integer
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
            name = "discrete_laplace" if integer else "laplace"
            return Mechanism(measurement, name, sensitivity, epsilon, scale, meas)
        scale = math.nextafter(scale, math.inf)
    raise DpsqlError(
        f"internal check failed: OpenDP's privacy map for {measurement.label} stays above "
        f"epsilon {epsilon}; nothing was charged"
    )


def release(mechanism: Mechanism, exact: list) -> list:
    """Add noise to one measurement's exact values (one per group)."""
    values: list[int] | list[float]
    if mechanism.mechanism == "discrete_laplace":
        values = [max(-INT_LIMIT, min(INT_LIMIT, int(v))) for v in exact]
    else:
        values = [float(v) for v in exact]
    return list(mechanism.opendp_measurement(values))
