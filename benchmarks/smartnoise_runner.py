"""Run the benchmark queries in SmartNoise SQL; executed by the SmartNoise environment's Python.

Usage: smartnoise_runner.py '{"csv": ..., "templates": {...}, "policies": {...}, ...}' -> JSON
on stdout: per policy and template, the wall times and answers, or the error it raised.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import traceback

import pandas as pd
import snsql
from snsql import Privacy


def metadata(policy: dict) -> dict:
    """SmartNoise metadata for table people under one policy (bounds as dpsql's)."""
    table = {
        "row_privacy": policy["unit"] is None,
        "max_ids": policy["max_ids"],
        "censor_dims": False,
        "person_id": {"type": "int", "private_id": policy["unit"] is not None},
        "region": {"type": "string"},
        "age": {"type": "int", "lower": policy["age"][0], "upper": policy["age"][1]},
        "income": {"type": "float", "lower": policy["income"][0], "upper": policy["income"][1]},
    }
    return {"Bench": {"public": {"people": table}}}


def run_one(reader, sql: str, reps: int) -> dict:
    """Warm up once, then time `reps` executions; answers without the header row."""
    sql = sql.replace("FROM people", "FROM public.people")
    try:
        reader.execute(sql)
        times, answers = [], []
        for _ in range(reps):
            start = time.perf_counter()
            result = reader.execute(sql)
            times.append(time.perf_counter() - start)
            answers.append([list(row) for row in result[1:]])
        return {"median_ms": statistics.median(times) * 1e3, "answers": answers}
    except Exception as exc:  # report whatever SmartNoise refuses, with its own words
        lines = traceback.format_exception_only(type(exc), exc)
        return {"error": " ".join(line.strip() for line in lines)[:400]}


def main() -> None:
    args = json.loads(sys.argv[1])
    start = time.perf_counter()
    df = pd.read_csv(args["csv"])
    out = {"load_s": time.perf_counter() - start, "snsql": snsql.__version__ if hasattr(snsql, "__version__")
           else "unknown", "results": {}}
    for name, policy in args["policies"].items():
        privacy = Privacy(epsilon=args["epsilon"], delta=args["delta"])
        reader = snsql.from_df(df, privacy=privacy, metadata=metadata(policy))
        out["results"][name] = {t: run_one(reader, sql, args["reps"])
                                for t, sql in args["templates"][name].items()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
