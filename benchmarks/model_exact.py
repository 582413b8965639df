"""Model-exact calibration against group privacy and the tight map, with time per calibration.

    python -m benchmarks.model_exact [--epsilon 1.0]

Prints markdown tables (docs/theory.md, "Model-exact calibration"): households of 10, 20 and
50 with a rare predicate (marginal [0.95, 0.05], rho = 0.3, and the range [0.2, 0.4]); the
binary Markov chain P(1 | 0) = 0.2, P(1 | 1) = 0.3 with one COUNT per time point, T = 100
and 1000, under the default cap of 10 and uncapped (cap 1e4); the level a household answer
really has when the true rho differs from the declared one; then the time of a grouped
COUNT calibration by household size and number of groups. Each time is one calibration's
wall clock (bisection and re-audit included), measured once.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from dpsql.calibration.model_exact import ModelCalibration, calibrate_chain, calibrate_household
from dpsql.calibration.model_household import HouseholdModel, household_level
from dpsql.calibration.model_markov import MarkovModel

RARE = (0.95, 0.05)
CHAIN = MarkovModel.binary(0.2, 0.7)  # P(1 | 0) = 0.2, P(1 | 1) = 0.3


def timed(run: Callable[[], ModelCalibration]) -> tuple[ModelCalibration, float]:
    """One calibration and its wall-clock seconds."""
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def households(epsilon: float) -> list[str]:
    """Rows: households of 10, 20, 50, rho a point and a range."""
    rows = ["| model | group eps_dp | tight eps_dp | model-exact eps_dp | noise vs tight | "
            "worst rho | capped | seconds |", "|---|---|---|---|---|---|---|---|"]
    for size in (10, 20, 50):
        for low, high in ((0.3, 0.3), (0.2, 0.4)):
            model = HouseholdModel.fixed(size, RARE, low, high)
            result, seconds = timed(lambda m=model: calibrate_household(m, epsilon, (0, 1)))
            rho = f"{low:g}" if low == high else f"[{low:g}, {high:g}]"
            rows.append(
                f"| households of {size}, rho {rho} | {epsilon / size:.4g} | "
                f"{result.tight_eps_dp:.4g} | {result.eps_dp:.4g} | "
                f"{result.eps_dp / result.tight_eps_dp:.2f}x less | {result.worst_rho:g} | "
                f"{result.capped} | {seconds:.3f} |")
    return rows


def chains(epsilon: float) -> list[str]:
    """Rows: the chain at T = 100 and 1000, default cap and uncapped; noise scale 1 / eps_dp."""
    rows = ["| model | group scale | tight scale | model-exact scale | cap | capped | level | "
            "seconds |", "|---|---|---|---|---|---|---|---|"]
    for times in (100, 1000):
        for cap in (10.0, 1e4):
            result, seconds = timed(lambda t=times, c=cap: calibrate_chain(CHAIN, epsilon, t, c))
            rows.append(
                f"| chain P(1\\|0)=0.2, P(1\\|1)=0.3, T = {times} | {times / epsilon:.4g} | "
                f"{1 / result.tight_eps_dp:.4g} | {1 / result.eps_dp:.4g} | {cap:g} | "
                f"{result.capped} | {result.level:.4f} | {seconds:.3f} |")
    return rows


def grouped(epsilon: float) -> list[str]:
    """Rows: grouped COUNT by a column of G values (sensitivity 2), by household size."""
    rows = ["| household size | groups G | tight eps_dp | model-exact eps_dp | seconds |",
            "|---|---|---|---|---|"]
    marginals = {2: (0.9, 0.1), 3: (0.85, 0.1, 0.05), 4: (0.7, 0.15, 0.1, 0.05)}
    for size, count in ((10, 2), (20, 2), (50, 2), (10, 3), (20, 3), (50, 3), (10, 4), (20, 4)):
        model = HouseholdModel.fixed(size, marginals[count], 0.3)
        result, seconds = timed(lambda m=model, g=count: calibrate_household(
            m, epsilon, None, sensitivity=2.0, groups=tuple(range(g))))
        rows.append(f"| {size} | {count} | {result.tight_eps_dp:.4g} | {result.eps_dp:.4g} | "
                    f"{seconds:.2f} |")
    return rows


def misdeclared(epsilon: float) -> list[str]:
    """Rows: the level an answer calibrated for rho = 0.3 (or [0.2, 0.4]) really has at other rho."""
    truths = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
    rows = ["| households of 10, calibrated for | " + " | ".join(f"true rho {r:g}" for r in truths)
            + " |", "|---" * (len(truths) + 1) + "|"]
    for low, high in ((0.3, 0.3), (0.2, 0.4)):
        model = HouseholdModel.fixed(10, RARE, low, high)
        eps_dp = calibrate_household(model, epsilon, (0, 1)).eps_dp
        levels = [household_level(model, rho, (0, 1), eps_dp) for rho in truths]
        rho = f"{low:g}" if low == high else f"[{low:g}, {high:g}]"
        rows.append(f"| rho {rho} (eps_dp {eps_dp:.4g}) | "
                    + " | ".join(f"{level:.3f}" for level in levels) + " |")
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args(argv)
    for table in (households(args.epsilon), misdeclared(args.epsilon), chains(args.epsilon),
                  grouped(args.epsilon)):
        print("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
