"""Daily readings of household meters: the noise per daily count under three ways of accounting.

Run `python examples/meters.py`. Each meter reports a binary `on` every day for DAYS days,
generated from a declared Markov chain (CHAIN below). The script writes examples/out/meters/
readings.duckdb, one policy and one fresh ledger per accounting, and prints the noise scale of
a daily count `SELECT day, COUNT(*) ... WHERE on GROUP BY day` at epsilon = 1 under:

* user-level DP: the meter is the individual (privacy_unit = meter, max_rows_per_unit = DAYS),
  so one meter moves up to DAYS counts;
* the tight map: each (meter, day) record is an individual, dependent over the meter's days
  (k = DAYS, eta = the chain's exact eta, computed by chain_eta);
* the model mode: the same records under the declared chain (docs/theory.md §14), at the
  default cap (at most 10 times the tight map's eps_dp) and at a cap of 1000.

It prints the same for a count over all days (`SELECT COUNT(*) ... WHERE on`), which each
value reads at every day (a whole-series answer, docs/theory.md §20), then answers the daily
count once under the model and prints the first days. The numbers
are computed from the policies only (explain reads no data), so they are the same every run.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import duckdb
import numpy as np
import yaml
from dpsql.calibration import MarkovModel
from dpsql.calibration.model_markov import chain_eta

from dpsql import PrivateDatabase

DAYS = 60
METERS = 300
UP, DOWN = 0.2, 0.7  # P(on tomorrow | off today), P(off tomorrow | on today)
CHAIN = MarkovModel.binary(UP, DOWN)  # starts from its stationary law (7/9, 2/9)
EPSILON = 1.0
QUERY = 'SELECT day, COUNT(*) AS n FROM readings WHERE "on" GROUP BY day ORDER BY day'
SERIES = 'SELECT COUNT(*) AS n FROM readings WHERE "on"'  # over all days: a whole-series answer


def generate(path: Path, meters: int = METERS, seed: int = 11) -> None:
    """Each meter's `on` over DAYS days follows CHAIN; meters are independent."""
    rng = np.random.default_rng(seed)
    state = (rng.random(meters) < CHAIN.initial[1]).astype(int)
    days, meter, on = [], [], []
    for day in range(DAYS):
        days += [day] * meters
        meter += list(range(meters))
        on += state.astype(bool).tolist()
        up = rng.random(meters) < np.where(state == 1, 1 - DOWN, UP)
        state = up.astype(int)
    path.unlink(missing_ok=True)
    with duckdb.connect(str(path)) as conn:
        conn.execute('CREATE TABLE readings AS SELECT unnest($1) AS meter, unnest($2) AS day, '
                     'unnest($3) AS "on"', [meter, days, on])


def columns() -> dict:
    return {"day": {"type": "int", "lower": 0, "upper": DAYS - 1}, "on": {"type": "bool"}}


def user_level_policy() -> dict:
    """The meter is the individual: independent meters, each up to DAYS rows."""
    return {"budget": {"epsilon": 10.0}, "dependence": {"k": 1, "eta": 0.0},
            "tables": {"readings": {"privacy_unit": "meter", "max_rows_per_unit": DAYS,
                                    "columns": columns()}}}


def implied_eta() -> float:
    """The chain's exact eta over DAYS records (rounded up to 4 decimals)."""
    return float(np.ceil(chain_eta(CHAIN, DAYS) * 1e4) / 1e4)


def record_policy(cap: float | None = None) -> dict:
    """Each (meter, day) record an individual; with a cap, the chain declared as a model."""
    dependence: dict = {"k": DAYS, "eta": implied_eta()}
    if cap is not None:
        model = {"kind": "markov", "table": "readings", "column": "on", "time": "day",
                 "initial": list(CHAIN.initial), "transition": [list(r) for r in CHAIN.transition],
                 "cap": cap}
        dependence |= {"mode": "model", "models": [model]}
    return {"budget": {"epsilon": 10.0}, "dependence": dependence,
            "tables": {"readings": {"columns": columns()}}}


ACCOUNTINGS = {
    "user-level DP": user_level_policy(),
    "tight map": record_policy(),
    "model, cap 10": record_policy(10.0),
    "model, cap 1000": record_policy(1000.0),
}


def connect(folder: Path, name: str, policy: dict) -> PrivateDatabase:
    """A database over the readings under `policy`, with its own fresh ledger."""
    stem = name.replace(" ", "_").replace(",", "").replace("-", "_")
    (folder / f"{stem}.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    (folder / f"{stem}.sqlite").unlink(missing_ok=True)
    return PrivateDatabase.connect(folder / "readings.duckdb", folder / f"{stem}.yaml",
                                   folder / f"{stem}.sqlite", create=True)


def scales(folder: Path) -> dict[str, tuple[float, float]]:
    """The noise scales of the daily count and of the count over all days at EPSILON, per
    accounting (explain: no data read)."""
    out = {}
    for name, policy in ACCOUNTINGS.items():
        with connect(folder, name, policy) as db:
            out[name] = tuple(db.explain(query, epsilon=EPSILON).aggregates[0].scale
                              for query in (QUERY, SERIES))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "meters")
    folder = parser.parse_args().out
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    generate(folder / "readings.duckdb")
    print(f"{METERS} meters x {DAYS} days; chain P(1|0) = {UP}, P(0|1) = {DOWN}; "
          f"k = {DAYS}, eta = {implied_eta():.4f}")
    print(f"noise scale of each daily count at epsilon {EPSILON:g}:")
    both = scales(folder)
    for name, (daily, _) in both.items():
        print(f"  {name:<16} {daily:8.2f}")
    print(f"noise scale of the count of readings on over all {DAYS} days at epsilon {EPSILON:g}:")
    for name, (_, series) in both.items():
        print(f"  {name:<16} {series:8.2f}")
    with connect(folder, "model, cap 1000", ACCOUNTINGS["model, cap 1000"]) as db:
        result = db.query(QUERY, epsilon=EPSILON)
    first = ", ".join(f"{int(d)}: {n:.0f}" for d, n in result.df.head(5).itertuples(index=False))
    print(f"daily counts of meters on (model): {first}, ...")
    print(f"via {result.model}; epsilon_dp {result.epsilon_dp:.4g} against the tight map's "
          f"{result.tight_epsilon_dp:.4g}; transcript level {result.level_after:.4g}")


if __name__ == "__main__":
    main()
