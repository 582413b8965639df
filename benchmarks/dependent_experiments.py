"""The Bayesian-DP study's experiments (arXiv 2506.21308) answered through dpsql's engine.

Activity: one person's day of T = 288 five-minute intervals, a binary chain with P(1|0) = 0.2
and P(0|1) = 0.7 from its stationary law, declared as a policy's `markov` model; the answer is
`SELECT COUNT(*) FROM activity WHERE active`, a whole-series count (docs/theory.md §20), under
the default cap (10) and under `cap: 1` (no room from the prior: the larger of the tight map's
eps_dp and the quilt ratio bound's). Gaussian: households of child, father and mother heights
(Galton-like: mean 67 in, sd 3.5 in, rho 0.28, bounds [55, 80] in) and of kid and mother IQ
(mean 100, sd 15, rho 0.45, bounds [40, 160]), each declared as a policy's `gaussian` model;
the answer is `SELECT SUM(value) FROM families` over 300 households (docs/theory.md §21).

The noise scale of every dpsql column is what the engine reports: `explain` (no data read) of
the query at each epsilon under the model, and under `mode="tight"` and `mode="group"`. Each
cell is the 95th percentile of |released - exact| over 1,000 draws of synthetic data from the
same model and of the engine's mechanism at that scale (two-sided geometric for a COUNT,
Laplace for a SUM), drawn with numpy. Check: for every model cell the engine itself answers the
query 50 times on a fresh dataset drawn from the model (its own ledger), each answer's scale
must equal explain's, and the 50 errors (answer - exact) are compared with the 1,000 simulated
ones by a two-sample Kolmogorov-Smirnov test; the script stops if a p-value is below 0.001
(the "KS p" column). The study's columns are its published mechanisms (Laplace): the general
bound (T / epsilon, m span / epsilon), its Markov-chain bound (scale 1 / (epsilon -
4 ln(max P / min P)), offered only above 4 ln 4 = 5.55 here), its Gaussian factor on the span
(`study_factor`) and DP ignoring correlation (1 / epsilon, span / epsilon).

Run: python -m benchmarks.dependent_experiments [--answers 50]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import yaml
from dpsql.calibration import MarkovModel
from dpsql.calibration.model_gaussian import GaussianHousehold, gaussian_eta, study_factor
from dpsql.calibration.model_markov import chain_eta
from scipy.stats import ks_2samp

from dpsql import PrivateDatabase

EPSILONS = (1.0, 2.0, 5.0, 10.0, 20.0)
DRAWS = 1000
ANSWERS = 50
KS_FLOOR = 1e-3
BUDGET = 1e12  # the largest a policy accepts: no check's answers come near it, and the
# engine's search for the largest epsilon left stops at once (twice as fast per answer)
T = 288
UP, DOWN = 0.2, 0.7  # P(1 | 0), P(0 | 1)
CHAIN = MarkovModel.binary(UP, DOWN)  # stationary start (7/9, 2/9)
HOUSEHOLDS = 300
GAUSSIAN = {
    "heights (child, father, mother)": GaussianHousehold(3, 0.28, 0.28, 67.0, 3.5, 55.0, 80.0),
    "IQ (kid, mother)": GaussianHousehold(2, 0.45, 0.45, 100.0, 15.0, 40.0, 160.0),
}
COUNT_SQL = "SELECT COUNT(*) AS n FROM activity WHERE active"
SUM_SQL = "SELECT SUM(value) AS s FROM families"


@dataclass(frozen=True)
class EngineCell:
    """What the engine gave one (model, epsilon): explain's figures and the check's outcome."""

    eps_dp: float
    scale: float
    mechanism: str
    scales: dict[str, float]  # explain's scale under mode "tight" and "group"
    errors: np.ndarray  # the engine's own answers minus the exact values


def round_up(value: float) -> float:
    """A policy's eta: the model's, rounded up to 4 decimals."""
    return math.ceil(value * 1e4) / 1e4


def activity_policy(cap: float) -> dict:
    """One person's day as a `markov` model over the interval column."""
    model = {"kind": "markov", "table": "activity", "column": "active", "time": "interval",
             "initial": list(CHAIN.initial), "transition": [list(r) for r in CHAIN.transition],
             "cap": cap}
    return {"budget": {"epsilon": BUDGET},
            "dependence": {"k": T, "eta": round_up(chain_eta(CHAIN, T)), "mode": "model",
                           "models": [model]},
            "tables": {"activity": {"columns": {
                "interval": {"type": "int", "lower": 0, "upper": T - 1},
                "active": {"type": "bool"}}}}}


def gaussian_policy(model: GaussianHousehold) -> dict:
    """Households as a `gaussian` model of the value column (its bounds are the clamp)."""
    declared = {"kind": "gaussian", "table": "families", "column": "value",
                "max_size": model.max_size, "rho": model.rho_high, "mean": model.mean,
                "sd": model.sd}
    return {"budget": {"epsilon": BUDGET},
            "dependence": {"k": model.max_size, "eta": round_up(gaussian_eta(model)),
                           "mode": "model", "models": [declared]},
            "tables": {"families": {"dependence_group": "family", "columns": {
                "family": {"type": "int"},
                "value": {"type": "float", "lower": model.lower, "upper": model.upper}}}}}


def days(rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` independent days of the chain: a (count, T) boolean array."""
    state = rng.random(count) < CHAIN.initial[1]
    out = np.empty((count, T), dtype=bool)
    for t in range(T):
        out[:, t] = state
        flip = rng.random(count)
        state = np.where(state, flip >= DOWN, flip < UP)
    return out


def households(rng: np.random.Generator, model: GaussianHousehold, count: int) -> np.ndarray:
    """`count` datasets of HOUSEHOLDS full households: (count, HOUSEHOLDS, m) clamped values."""
    m, rho = model.max_size, model.rho_high
    shared = rng.standard_normal((count, HOUSEHOLDS, 1))
    latent = math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal(
        (count, HOUSEHOLDS, m))
    return np.clip(model.mean + model.sd * latent, model.lower, model.upper)


def noise(rng: np.random.Generator, mechanism: str, scale: float, size: int) -> np.ndarray:
    """The engine's mechanism at `scale`: Laplace, or the two-sided geometric law
    P(k) proportional to exp(-|k| / scale) (a difference of two geometric counts)."""
    if mechanism == "laplace":
        return rng.laplace(0.0, scale, size)
    if mechanism != "discrete_laplace":
        raise ValueError(f"unknown mechanism {mechanism!r}")
    p = -math.expm1(-1.0 / scale)
    return (rng.geometric(p, size) - rng.geometric(p, size)).astype(float)


def p95(rng: np.random.Generator, exact: np.ndarray, mechanism: str, scale: float) -> float:
    """95th percentile of |released - exact| over the drawn datasets' exact answers."""
    released = exact + noise(rng, mechanism, scale, exact.size)
    return float(np.quantile(np.abs(released - exact), 0.95))


def engine_cell(folder: Path, policy: dict, sql: str, table: str, frame: dict,
                exact: float, epsilon: float, answers: int) -> EngineCell:
    """Explain `sql` at `epsilon` (model, tight, group) and answer it `answers` times on the
    data `frame` (column -> values) under a fresh ledger."""
    for stale in ("data.duckdb", "ledger.sqlite"):
        (folder / stale).unlink(missing_ok=True)
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    names = list(frame)
    with duckdb.connect(str(folder / "data.duckdb")) as conn:
        select = ", ".join(f"unnest(${i + 1}) AS {name}" for i, name in enumerate(names))
        conn.execute(f"CREATE TABLE {table} AS SELECT {select}", [frame[n] for n in names])
    with PrivateDatabase.connect(folder / "data.duckdb", folder / "policy.yaml",
                                 folder / "ledger.sqlite", create=True,
                                 reuse=False) as db:  # each answer fresh noise
        plan = db.explain(sql, epsilon=epsilon)
        if not plan.model:
            raise RuntimeError(f"{sql!r} at epsilon {epsilon:g} is not priced by the model")
        aggregate = plan.aggregates[0]
        scales = {mode: db.explain(sql, epsilon=epsilon, mode=mode).aggregates[0].scale
                  for mode in ("tight", "group")}
        errors = []
        for _ in range(answers):
            result = db.query(sql, epsilon=epsilon)
            if result.aggregates[0].scale != aggregate.scale:
                raise RuntimeError(f"the engine answered at scale {result.aggregates[0].scale}"
                                   f" where explain said {aggregate.scale}")
            errors.append(float(result.df.iloc[0, 0]) - exact)
    return EngineCell(plan.epsilon_dp, aggregate.scale, aggregate.mechanism, scales,
                      np.array(errors))


def checked(rng: np.random.Generator, cell: EngineCell, exact: np.ndarray) -> tuple[float, float]:
    """The engine column's p95 over the drawn datasets (released minus exact is the mechanism's
    noise), and the KS p-value of the engine's own errors against the simulated ones (stops the
    run below KS_FLOOR)."""
    simulated = noise(rng, cell.mechanism, cell.scale, exact.size)
    p_value = 1.0 if cell.errors.size == 0 else float(ks_2samp(cell.errors, simulated).pvalue)
    if p_value < KS_FLOOR:
        raise RuntimeError(f"the engine's errors do not follow its scale {cell.scale:g}: "
                           f"KS p = {p_value:.2g}")
    return float(np.quantile(np.abs(simulated), 0.95)), p_value


def study_markov_scale(chain: MarkovModel, epsilon: float) -> float | None:
    """The study's Markov-chain bound as its published code applies it: Laplace scale
    1 / (epsilon - 4 ln(max P / min P)) over the transition matrix's entries, None (not
    offered) where epsilon is at most that offset."""
    offset = 4.0 * math.log(chain.matrix.max() / chain.matrix.min())
    return 1.0 / (epsilon - offset) if epsilon > offset else None


def activity(rng: np.random.Generator, folder: Path, answers: int) -> None:
    exact = days(rng, DRAWS).sum(axis=1).astype(float)
    print(f"Activity, T = {T}, P(1|0) = {UP}, P(0|1) = {DOWN}, stationary start; the chain's "
          f"eta {chain_eta(CHAIN, T):.4f}; count sensitivity 1; mean count {exact.mean():.1f}."
          f"\n")
    print("| epsilon | dpsql eps_dp (model, cap 10) | dpsql model p95 | KS p | dpsql eps_dp "
          "(cap 1) | dpsql cap 1 p95 | KS p | dpsql tight map (k = T) p95 | study Markov bound "
          "p95 | study general bound (T / eps) p95 | DP ignoring correlation p95 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for eps in EPSILONS:
        day = days(rng, 1)[0]
        frame = {"interval": list(range(T)), "active": day.tolist()}
        cells = [engine_cell(folder, activity_policy(cap), COUNT_SQL, "activity", frame,
                             float(day.sum()), eps, answers) for cap in (10.0, 1.0)]
        (model, model_p), (one, one_p) = (checked(rng, c, exact) for c in cells)
        tight = p95(rng, exact, cells[0].mechanism, cells[0].scales["tight"])
        markov = study_markov_scale(CHAIN, eps)
        study = "not offered" if markov is None else f"{p95(rng, exact, 'laplace', markov):.2f}"
        print(f"| {eps:g} | {cells[0].eps_dp:.4g} | {model:.2f} | {model_p:.2f} | "
              f"{cells[1].eps_dp:.4g} | {one:.2f} | {one_p:.2f} | {tight:.1f} | {study} | "
              f"{p95(rng, exact, 'laplace', T / eps):.0f} | "
              f"{p95(rng, exact, 'laplace', 1 / eps):.2f} |")


def gaussian(rng: np.random.Generator, folder: Path, name: str, model: GaussianHousehold,
             answers: int) -> None:
    exact = households(rng, model, DRAWS).sum(axis=(1, 2))
    m, s, span = model.max_size, model.sensitivity, model.span
    factor = study_factor(m, model.rho_high)
    print(f"\n{name}: {HOUSEHOLDS} households of {m}, mean {model.mean:g}, sd {model.sd:g}, "
          f"rho {model.rho_high:g}, bounds [{model.lower:g}, {model.upper:g}] (SUM sensitivity "
          f"{s:g}, span {span:g}); policy eta {round_up(gaussian_eta(model)):g}; the study's "
          f"factor {factor:.3f} on the span.\n")
    print("| epsilon | dpsql eps_dp (model) | dpsql model p95 | KS p | dpsql tight map p95 | "
          "dpsql group privacy p95 | study Gaussian bound p95 | study general bound "
          "(m span / eps) p95 | DP ignoring correlation (span / eps) p95 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for eps in EPSILONS:
        values = households(rng, model, 1)[0]
        frame = {"family": np.repeat(np.arange(HOUSEHOLDS), m).tolist(),
                 "value": values.ravel().tolist()}
        cell = engine_cell(folder, gaussian_policy(model), SUM_SQL, "families", frame,
                           float(values.sum()), eps, answers)
        engine, p_value = checked(rng, cell, exact)
        others = [p95(rng, exact, "laplace", cell.scales[mode]) for mode in ("tight", "group")]
        others += [p95(rng, exact, "laplace", scale)
                   for scale in (factor * span / eps, m * span / eps, span / eps)]
        print(f"| {eps:g} | {cell.eps_dp:.4g} | {engine:.1f} | {p_value:.2f} | "
              + " | ".join(f"{c:.0f}" for c in others) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=ANSWERS,
                        help="engine answers per model cell checked against the simulation")
    answers = parser.parse_args(argv).answers
    rng = np.random.default_rng(2506)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        activity(rng, folder, answers)
        for name, model in GAUSSIAN.items():
            gaussian(rng, folder, name, model, answers)
    print(f"\n{DRAWS} draws per cell, {answers} engine answers per model cell; "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
