"""How wide a MEDIAN's reported 95% interval is, and how far the median really is, by rows.

    python -m benchmarks.quantile_width [--runs 200]

Uniform values on the policy's [0, 1000], 64 bins, m = 2 rows per unit and epsilon_dp = 1
(discrete Laplace of scale 4 on every bin, OpenDP's own sampler): the median over the runs of
the reported half-width (docs/theory.md §15) and of |released median - exact median|.
"""

from __future__ import annotations

import argparse

import numpy as np
from dpsql.engine.aggregates import Operand
from dpsql.engine.aggregates.quantile import THRESHOLD_ALPHA, Grid, envelope, estimate, histogram
from dpsql.engine.noise import build_mechanism
from dpsql.engine.plan import Measurement
from sqlglot import exp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    rng = np.random.default_rng(1)
    cut, alpha = Grid(0.0, 1000 / 64, 64), 0.05
    operand = Operand("income", "float", exp.column("income"), (), 0.0, 1000.0)
    mechanism = build_mechanism(Measurement(histogram(64), operand, "__m0"), 4, 1.0)
    noise = mechanism.opendp_measurement
    threshold = mechanism.accuracy(THRESHOLD_ALPHA / cut.bins)
    share = alpha / (2 * cut.bins - 1)
    print("| rows | median half-width | median error |\n|---|---|---|")
    for rows in (1_000, 10_000, 100_000):
        values = rng.uniform(0, 1000, rows)
        counts = np.histogram(values, bins=cut.edges)[0].tolist()
        widths, errors = [], []
        for _ in range(runs):
            noisy = np.array(noise(counts), dtype=float)[None, :]
            released = estimate(noisy, cut, 0.5, threshold)[0]
            low, high = envelope(noisy, cut, 0.5, lambda terms: mechanism.sum_accuracy(terms, share))
            widths.append(max(released - low[0], high[0] - released))
            errors.append(abs(released - np.median(values)))
        print(f"| {rows:,} | {np.median(widths):.1f} | {np.median(errors):.2f} |")


if __name__ == "__main__":
    main()
