"""What clamping every value costs DuckDB: SUM over a DOUBLE and an INTEGER column plainly and
through each way of writing the clamp that keeps NULL as NULL, sends NaN and +inf to the upper
bound and -inf to the lower one (so the clamped sum stays finite, as the sensitivity needs).

The last form is what dpsql runs on a bounded copy (docs/theory.md §34): the clamped value stored
once in the copy, summed as a bare column. It is timed on an in-memory copy of the table holding
the stored values beside the columns (as a bounded copy is held), against the plain SUM on that copy.

Run: `python -m benchmarks.clamp_cost --rows 10000000 [--repeats 15]`. Prints a Markdown
section for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import duckdb

from benchmarks.generate import dataset

FORMS = {
    "plain SUM (no clamp)": "SUM({c})",
    "CASE WHEN < lo .. WHEN > hi .. ELSE (what dpsql runs per row)":
        "SUM(CASE WHEN {c} < {lo} THEN {lo} WHEN {c} > {hi} THEN {hi} ELSE {c} END)",
    "CASE, upper bound tested first":
        "SUM(CASE WHEN {c} > {hi} THEN {hi} WHEN {c} < {lo} THEN {lo} ELSE {c} END)",
    "nested IF": "SUM(IF({c} < {lo}, {lo}, IF({c} > {hi}, {hi}, {c})))",
    "LEAST(GREATEST(..)) under a NULL guard":
        "SUM(CASE WHEN {c} IS NOT NULL THEN LEAST(GREATEST({c}, {lo}), {hi}) END)",
    "in-range SUM + bounds times out-of-range COUNTs (FILTER)":
        "SUM({c}) FILTER (WHERE {c} >= {lo} AND {c} <= {hi}) "
        "+ {lo} * COUNT({c}) FILTER (WHERE {c} < {lo}) + {hi} * COUNT({c}) FILTER (WHERE {c} > {hi})",
    "one multiplication (NOT a clamp: the cheapest expression per row)":
        "SUM({c} * ({c} <= {hi})::INTEGER)",
}
COLUMNS = {"income": ("0.0", "200000.0"), "age": ("0", "100")}
STORED = "SUM of the clamped value stored in the copy (what dpsql runs on a bounded copy)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    conn = duckdb.connect()
    conn.execute("ATTACH ? AS data (READ_ONLY)", [str(dataset(args.rows).path)])
    conn.execute("USE data")
    queries = {(column, form): f"SELECT {sql.format(c=column, lo=lo, hi=hi)} FROM people"
               for column, (lo, hi) in COLUMNS.items() for form, sql in FORMS.items()}
    clamps = ", ".join(f"CASE WHEN {c} < {lo} THEN {lo} WHEN {c} > {hi} THEN {hi} ELSE {c} END "
                       f"AS stored_{c}" for c, (lo, hi) in COLUMNS.items())
    conn.execute("ATTACH ':memory:' AS copy (COMPRESS)")
    conn.execute(f"CREATE TABLE copy.people AS SELECT *, {clamps} FROM people")
    conn.execute("CHECKPOINT copy")
    for column in COLUMNS:
        queries[(column, "plain SUM on the copy")] = f"SELECT SUM({column}) FROM copy.people"
        queries[(column, STORED)] = f"SELECT SUM(stored_{column}) FROM copy.people"
    times: dict[tuple[str, str], list[float]] = {key: [] for key in queries}
    for sql in queries.values():
        conn.execute(sql).fetchall()
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeats):  # every form once per round, so all see the same machine
        for key, sql in queries.items():
            start = time.perf_counter()
            conn.execute(sql).fetchall()
            times[key].append((time.perf_counter() - start) * 1e3)
    loads.append(os.getloadavg()[0])
    print(f"Command: `python -m benchmarks.clamp_cost --rows {args.rows} --repeats {args.repeats}` "
          f"(load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores)\n")
    print("| form | income DOUBLE ms | ratio | age INTEGER ms | ratio |")
    print("|---|---:|---:|---:|---:|")
    plain = {column: statistics.median(times[(column, next(iter(FORMS)))]) for column in COLUMNS}
    copied = {column: statistics.median(times[(column, "plain SUM on the copy")]) for column in COLUMNS}
    for form in [*FORMS, "plain SUM on the copy", STORED]:
        cells = []
        for column in COLUMNS:
            ms = statistics.median(times[(column, form)])
            base = copied[column] if form == STORED else plain[column]
            cells.append(f"{ms:.1f} | {ms / base:.2f}")
        print(f"| {form} | {' | '.join(cells)} |")
    print(f"\nMedians of {args.repeats} rounds; ratio = form / plain SUM of the same column (the "
          "stored value's: / plain SUM of the column on the same in-memory copy).")


if __name__ == "__main__":
    main()
