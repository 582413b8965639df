"""Every noisy cell's interval as users see it: an AVG's that never collapses to a point, an
expression's over the aggregates it computes from, and each clamped to what the statistic can
be."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from dpsql.engine.aggregates import AVG
from dpsql.engine.aggregates.base import Operand


@dataclass(frozen=True)
class _Noise:
    """A measurement's noise with a fixed 95%-style half-width, whatever alpha."""

    width: float

    def accuracy(self, alpha: float) -> float:
        return self.width

    def sum_accuracy(self, terms: int, alpha: float) -> float:
        return self.width * terms


def test_an_avg_whose_noisy_sum_is_below_every_possible_sum_keeps_its_width():
    """Incomes in [0, 1000], 100 rows counted, a noisy SUM of -5,000 with a SUM interval of
    ±2,000: the mean is clamped to 0, and its interval must still be as wide as the box the SUM
    and COUNT intervals span (about 40), not 0 ± 0."""
    operand = Operand("income", "float", None, (), 0.0, 1000.0)  # type: ignore[arg-type]
    frame = pd.DataFrame({"s": [-5000.0, 5000.0, 1.2e6], "c": [100.0, 100.0, 100.0]})
    noise = {"s": _Noise(2000.0), "c": _Noise(5.0)}
    halfwidths = AVG.halfwidths(("s", "c"), operand, frame, noise, 0.05)
    box = (-5000 + 2000) / 95 - (-5000 - 2000) / 105
    assert halfwidths[0] >= box - 1e-9
    # Above every possible SUM: as wide as the box, up to the whole range [0, 1000].
    assert halfwidths[2] == min((1.2e6 + 2000) / 95 - (1.2e6 - 2000) / 105, 1000.0)
    # A box inside the bounds is unchanged: from the clamped mean to its far corner.
    assert np.isclose(halfwidths[1], max(50 - 3000 / 105, 7000 / 95 - 50))
