"""The dependence model (k, eta) that a data owner declares, with exact constructors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dependence import eta_of_pmf, k_of_pmf
from .household import household_eta
from .validation import MAX_K, require_int, require_pmf, require_probability


@dataclass(frozen=True)
class DependenceModel:
    """Each record depends on at most k - 1 others (joint reading, docs/theory.md §3), with TV bound eta.

    k: for every individual i there is a set D_i of at most k - 1 others such that all the
    remaining individuals, taken together, are independent of (X_i, X_D_i).
    eta: for every i and values t, t' of X_i, the total-variation distance between the
    others' distribution given X_i = t and given X_i = t' is at most eta.
    """

    k: int
    eta: float

    def __post_init__(self) -> None:
        """Validate and normalise k (integer in [1, MAX_K]) and eta (finite, in [0, 1])."""
        object.__setattr__(self, "k", require_int("k", self.k, 1, MAX_K))
        object.__setattr__(self, "eta", require_probability("eta", self.eta))

    @property
    def is_independent(self) -> bool:
        """True when records are independent (k = 1 or eta = 0), so plain DP is IP."""
        return self.k == 1 or self.eta == 0.0

    @classmethod
    def independent(cls) -> DependenceModel:
        """Independent records: k = 1, eta = 0."""
        return cls(k=1, eta=0.0)

    @classmethod
    def from_joint_pmf(cls, pmf: np.ndarray) -> DependenceModel:
        """Exact (k, eta) of a joint pmf with one axis per individual (brute force, small n).

        When every individual is independent of the others (k = 1) eta is exactly 0; the
        computed TV is then float rounding and is reported as 0.
        """
        array = require_pmf("pmf", pmf)
        k = k_of_pmf(array)
        return cls(k=k, eta=0.0 if k == 1 else eta_of_pmf(array))

    @classmethod
    def household(cls, k: int, rho: float, marginal: np.ndarray) -> DependenceModel:
        """Independent households of k members sharing a latent Z ~ marginal.

        Each member equals Z with probability rho, else an independent draw from marginal;
        eta is computed exactly (see calibration.household.household_eta).
        """
        return cls(k=k, eta=household_eta(k, rho, marginal))

