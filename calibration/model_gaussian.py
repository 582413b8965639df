"""A continuous household model: a bounded numeric column whose values are a clamped Gaussian.

Each household of at most `max_size` members draws equicorrelated standard normal latents
Z (correlation rho between any two members) and each member's value is
X_j = clamp(mean + sd * Z_j, lower, upper): a Gaussian inside the column's bounds, with atoms
at the bounds. `gaussian_level` is a proven upper bound on the information-privacy level of a
Laplace SUM of the column (docs/theory.md §21); `numerical_level` computes the level itself on a
grid, the numerical check of that bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import CalibrationError


@dataclass(frozen=True)
class GaussianHousehold:
    """Households of 1..max_size members whose column values are clamp(mean + sd Z_j) with
    Corr(Z_j, Z_l) = rho for j != l, rho anywhere in [rho_low, rho_high]."""

    max_size: int
    rho_low: float
    rho_high: float
    mean: float
    sd: float
    lower: float
    upper: float

    def __post_init__(self) -> None:
        """Each error names the field and what is accepted."""
        if not isinstance(self.max_size, int) or isinstance(self.max_size, bool) or self.max_size < 1:
            raise CalibrationError(f"max_size must be a whole number >= 1, got {self.max_size!r}")
        for name in ("rho_low", "rho_high", "mean", "sd", "lower", "upper"):
            if not math.isfinite(getattr(self, name)):
                raise CalibrationError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        if not 0.0 <= self.rho_low <= self.rho_high < 1.0:
            raise CalibrationError(f"rho must satisfy 0 <= rho_low <= rho_high < 1, got "
                                   f"[{self.rho_low:g}, {self.rho_high:g}]")
        if self.sd <= 0.0:
            raise CalibrationError(f"sd must be > 0, got {self.sd:g}")
        if not self.lower < self.upper:
            raise CalibrationError(f"lower must be below upper, got [{self.lower:g}, {self.upper:g}]")

    @property
    def sensitivity(self) -> float:
        """How far one member moves a SUM of the column (§8): max(upper, 0) - min(lower, 0)."""
        return max(self.upper, 0.0) - min(self.lower, 0.0)

    @property
    def span(self) -> float:
        """upper - lower: the most one member's value, or its clamped shift, can move."""
        return self.upper - self.lower


def gaussian_level(model: GaussianHousehold, eps_dp: float) -> float:
    """Proven upper bound on the IP level of SUM(column) + Laplace(sensitivity / eps_dp) under
    the model (docs/theory.md §21): the largest household and rho_high are the worst case.

    With kappa = eps_dp (m - 1) sd rho / s and the interior term eps_dp span (1 + (m - 1) rho) / s,
    the level is the interior term plus the largest log(U(t) / L(t')) over the atoms, where U
    and L are the tail moments of the latent beyond a bound (`_tail_factors`, which gives
    log U and -log L)."""
    if not eps_dp > 0.0 or not math.isfinite(eps_dp):
        raise CalibrationError(f"eps_dp must be a positive number, got {eps_dp!r}")
    m, rho, s = model.max_size, model.rho_high, model.sensitivity
    kappa = eps_dp * (m - 1) * model.sd * rho / s
    full = eps_dp * model.span * (1.0 + (m - 1) * rho) / s
    low_edge = (model.lower - model.mean) / model.sd
    high_edge = (model.upper - model.mean) / model.sd
    up_hi, down_hi = _tail_factors(high_edge, kappa)
    up_lo, down_lo = _tail_factors(-low_edge, kappa)
    # (t, t') by kind: lower atom, interior, upper atom; the exponent is 0 only for an atom
    # against itself, else at most `full` (the representatives lie in [low_edge, high_edge]).
    up = {"lo": up_lo, "in": 0.0, "hi": up_hi}
    down = {"lo": down_lo, "in": 0.0, "hi": down_hi}
    return max(up[t] + down[u] + (0.0 if t == u != "in" else full) for t in up for u in down)


def gaussian_eta(model: GaussianHousehold) -> float:
    """An upper bound on the model's eta (docs/theory.md §21): the TV between the housemates'
    laws given the two atoms, each a mixture over its latent tail, bounded by the unclamped
    Gaussians' TV 2 Phi(c rho |w - w'| / 2) - 1 at the tails' mean distance (concave in it)."""
    from scipy.special import ndtr  # SciPy loads where a Gaussian model is used, not with every query

    n = model.max_size - 1
    if n == 0 or model.rho_high == 0.0:
        return 0.0
    rho = model.rho_high
    c = math.sqrt(n / ((1.0 - rho) * (1.0 + n * rho)))
    high_edge = (model.upper - model.mean) / model.sd
    low_edge = (model.mean - model.lower) / model.sd
    distance = _mills(high_edge) + _mills(low_edge)
    return float(min(1.0, 2.0 * ndtr(c * rho * distance / 2.0) - 1.0))


def _mills(edge: float) -> float:
    """E[W | W >= edge] for W standard normal: phi(edge) / Phi(-edge), in logs."""
    from scipy.special import log_ndtr

    return float(math.exp(-edge * edge / 2.0 - 0.5 * math.log(2.0 * math.pi) - log_ndtr(-edge)))


def group_level(model: GaussianHousehold, eps_dp: float) -> float:
    """Group privacy's level for the same answer: every member may move it, max_size eps_dp."""
    return model.max_size * eps_dp


def study_factor(size: int, rho: float) -> float:
    """The Bayesian-DP study's Gaussian factor m^2 / (4 (1/rho - m + 2)) + 1 (arXiv 2506.21308),
    for comparison only (infinite where 1/rho <= m - 2)."""
    if rho == 0.0:
        return 1.0
    gap = 1.0 / rho - size + 2.0
    return math.inf if gap <= 0.0 else size * size / (4.0 * gap) + 1.0


def _tail_factors(edge: float, kappa: float) -> tuple[float, float]:
    """log E[e^{kappa (W - edge)} | W >= edge] and -log E[e^{-kappa (W - edge)} | W >= edge]
    for W standard normal (closed forms of the truncated normal's moment generating function)."""
    from scipy.special import log_ndtr

    tail = log_ndtr(-edge)
    up = kappa * kappa / 2.0 - kappa * edge + log_ndtr(-(edge - kappa)) - tail
    down = -(kappa * kappa / 2.0 + kappa * edge + log_ndtr(-(edge + kappa)) - tail)
    return float(up), float(down)


def numerical_level(model: GaussianHousehold, eps_dp: float, size: int | None = None,
                    rho: float | None = None, cells: int = 240, nodes: int = 64,
                    points: int = 41) -> float:
    """The IP level of the same answer computed on a grid (a numerical check, not a proof).

    Given its own latent w, a member's housemates share H ~ N(sqrt(rho) w, 1 - rho) and are
    independent given H, each N(sqrt(rho) H, 1 - rho) before clamping; their values are put on
    `cells` equal cells of [lower, upper] (atoms exact), summed by convolution, mixed over H by
    Gauss-Hermite quadrature (`nodes`) and convolved with the Laplace density on the same grid.
    Hypotheses t: `points` interior values and the two atoms (each a mixture over its tail).
    The level is the largest log ratio over hypotheses and outputs (outputs beyond the grid have
    the ratio of its ends, where the Laplace kernel is a common exponential)."""
    from scipy.special import ndtr, ndtri

    m = model.max_size if size is None else size
    r = model.rho_high if rho is None else rho
    step = model.span / cells
    scale = model.sensitivity / eps_dp
    grid = np.arange(cells + 1)  # value lower + k step, k = 0..cells
    edges = model.lower + (grid[:-1] + 0.5) * step  # cell boundaries between grid points
    low_edge = (model.lower - model.mean) / model.sd
    high_edge = (model.upper - model.mean) / model.sd
    herm, weights = np.polynomial.hermite_e.hermegauss(nodes)
    weights = weights / weights.sum()

    def member_law(centre: float) -> np.ndarray:
        """One housemate's value law on the grid given its latent mean `centre` (sd sqrt(1-rho))."""
        spread = math.sqrt(1.0 - r)
        cdf = ndtr(((edges - model.mean) / model.sd - centre) / spread)
        law = np.diff(np.concatenate(([0.0], cdf, [1.0])))
        return np.clip(law, 0.0, None)

    def output_law(w: float) -> np.ndarray:
        """The law of the household's sum on the grid (index: sum of cell numbers) given w."""
        own = np.zeros(cells + 1)
        own[int(round((min(max(model.mean + model.sd * w, model.lower), model.upper)
                       - model.lower) / step))] = 1.0
        total = np.zeros(m * cells + 1)
        for h, weight in zip(math.sqrt(r) * w + math.sqrt(1.0 - r) * herm, weights, strict=True):
            law = own
            member = member_law(math.sqrt(r) * h)
            for _ in range(m - 1):
                law = np.convolve(law, member)
            total += weight * law
        return total

    hypotheses = [[output_law(w)] for w in np.linspace(low_edge, high_edge, points)[1:-1]]
    quantiles = (np.arange(points) + 0.5) / points
    for edge, sign in ((high_edge, 1.0), (-low_edge, -1.0)):
        # an atom: a mixture over the latent's tail beyond the bound, at equal-mass quantiles
        latents = -ndtri(ndtr(-edge) * (1.0 - quantiles))
        hypotheses.append([output_law(sign * w) for w in latents])
    sums = np.arange(m * cells + 1) * step
    outputs = np.arange(-1, m * cells + 2) * step  # beyond the sums' range the ratio is constant
    kernel = np.exp(-np.abs(outputs[:, None] - sums[None, :]) / scale)
    densities = np.array([np.mean([kernel @ law for law in laws], axis=0) for laws in hypotheses])
    logs = np.log(densities)
    return float(np.max(logs.max(axis=0) - logs.min(axis=0)))
