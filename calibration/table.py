"""Markdown table of eps_dp per mode for a few (k, eta) and epsilon: python -m calibration.table."""

from __future__ import annotations

from .inversion import compare_modes
from .model import DependenceModel

MODELS = ((2, 0.1), (4, 0.05), (5, 0.01), (10, 0.5), (10, 1e-3), (10, 1e-6), (50, 0.01))
EPSILONS = (0.5, 1.0, 2.0)
COLUMNS = ("group", "theorem2", "tight")


def cell(epsilon: float, model: DependenceModel) -> str:
    """'group / theorem2 / tight' eps_dp for one target, n/a where a mode cannot certify it."""
    options = {option.mode: option for option in compare_modes(epsilon, model)}
    return " / ".join(
        f"{options[mode].epsilon_dp:.4g}" if options[mode].applies else "n/a" for mode in COLUMNS
    )


def markdown_table(
    models: tuple[tuple[int, float], ...] = MODELS, epsilons: tuple[float, ...] = EPSILONS
) -> str:
    """The table as Markdown: one row per (k, eta), one column per epsilon."""
    header = "| k | eta | " + " | ".join(f"eps = {e:g}" for e in epsilons) + " |"
    rule = "|---|---|" + "---|" * len(epsilons)
    rows = [
        f"| {k} | {eta:g} | "
        + " | ".join(cell(e, DependenceModel(k, eta)) for e in epsilons)
        + " |"
        for k, eta in models
    ]
    return "\n".join([header, rule, *rows])


if __name__ == "__main__":
    print(markdown_table())
