"""Run the benchmarks and write their results (parts: speed, smartnoise, accuracy, report, all)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from benchmarks import speed
from benchmarks.generate import dataset
from benchmarks.workload import MAX_ROWS_PER_UNIT, POLICIES

OUT = Path(__file__).resolve().parent / "out"
FULL_SIZES = (1_000_000, 10_000_000, 50_000_000)
QUICK_SIZE = 200_000


def _write(out: Path, name: str, payload) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(payload, indent=1))


def run_speed(out: Path, sizes: list[int], reps: int) -> None:
    """One JSON file per size, written as soon as that size is done."""
    for rows in sizes:
        data = dataset(rows)
        rows_json = speed.run(data, reps)
        _write(out, f"speed_{rows}.json", {
            "rows": rows, "units": data.units, "heavy_units": data.heavy_units[MAX_ROWS_PER_UNIT],
            "results": rows_json, "breakdown": speed.breakdown(data),
            "first_query_ms": {policy: speed.first_query_ms(data, policy) for policy in POLICIES},
        })
        print(f"speed {rows}: done", flush=True)
    plan = speed.bounding_plan(dataset(max(sizes)))
    _write(out, "plan.json", {"rows": max(sizes), **asdict(plan)})


def run_smartnoise(out: Path, sizes: list[int], reps: int) -> None:
    """SmartNoise SQL in its own environment, and dpsql on the same data for the errors."""
    from benchmarks import smartnoise  # only this part needs the separate environment

    for rows in sizes:
        _write(out, f"smartnoise_{rows}.json", smartnoise.compare(dataset(rows), reps))
        print(f"smartnoise {rows}: done", flush=True)


def run_accuracy(out: Path, draws: int) -> None:
    """Empirical and analytic RMSE per mode over the (epsilon, k, eta) grid."""
    from benchmarks import accuracy

    _write(out, "accuracy.json", {"draws": draws, "rows": accuracy.run(draws)})
    print("accuracy: done", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("part", choices=("speed", "smartnoise", "accuracy", "report", "all"))
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_SIZE} rows, 5 repetitions, 200 draws, no SmartNoise; "
                             "writes benchmarks/out/quick/ (RESULTS-quick.md)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(FULL_SIZES))
    parser.add_argument("--smartnoise-sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args(argv)
    out = OUT / "quick" if args.quick else OUT
    sizes = [QUICK_SIZE] if args.quick else args.sizes
    draws = 200 if args.quick else args.draws
    if args.part in ("speed", "all"):
        run_speed(out, sizes, args.reps)
    if args.part in ("smartnoise", "all") and not args.quick:
        run_smartnoise(out, args.smartnoise_sizes, args.reps)
    if args.part in ("accuracy", "all"):
        run_accuracy(out, draws)
    if args.part in ("report", "all"):
        from benchmarks import report  # matplotlib is only needed here

        target = out / "RESULTS-quick.md" if args.quick else Path(__file__).resolve().parent / "RESULTS.md"
        report.write(out, target, quick=args.quick, argv=sys.argv[1:] if argv is None else argv)
        print(f"wrote {target}", flush=True)


if __name__ == "__main__":
    main()
