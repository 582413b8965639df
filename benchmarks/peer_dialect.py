"""Queries in the forms peers' users write (computed GROUP BY keys, DISTINCT aggregates, literals
read as DuckDB casts them, FROM (t) AS c), tried on data shaped like the peers' examples: census
rows with a person id and a few rows each, a week of visits (VisitorId, day, spent) and library
checkouts with genres. Prints, per construct, the queries tried / answered / refused, and the
measured coverage of the 95% intervals of the DISTINCT aggregates over repeated runs.

    .venv/bin/python benchmarks/peer_dialect.py [runs]
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import duckdb
import numpy as np
import yaml
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import binding_of
from dpsql.engine.errors import DpsqlError
from dpsql.engine.policy_yaml import load_policy

GENRES = ["Fiction", "Mystery", "Science", "History", "Children"]
POLICY = {
    "budget": {"epsilon": 1e9},
    "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
    "tables": {
        "census": {"privacy_unit": "pid", "max_rows_per_unit": 3, "columns": {
            "age": {"type": "int", "lower": 0, "upper": 99},
            "educ": {"type": "int", "lower": 1, "upper": 16},
            "income": {"type": "float", "lower": 0.0, "upper": 500000.0},
            "married": {"type": "bool"},
            "sex": {"type": "str", "domain": ["F", "M"]},
            "joined": {"type": "date", "lower": "2020-01-01", "upper": "2024-12-31"}}},
        "visits": {"privacy_unit": "VisitorId", "max_rows_per_unit": 4, "columns": {
            "day": {"type": "date", "lower": "2024-03-04", "upper": "2024-03-10"},
            "spent": {"type": "float", "lower": 0.0, "upper": 100.0},
            "items": {"type": "int", "lower": 0, "upper": 20}}},
        "checkouts": {"privacy_unit": "patron", "max_rows_per_unit": 5, "columns": {
            "genre": {"type": "str", "domain": GENRES},
            "title": {"type": "str"},
            "pages": {"type": "int", "lower": 10, "upper": 1000},
            "out": {"type": "date", "lower": "2024-01-01", "upper": "2024-12-31"}}},
    },
}

QUERIES: dict[str, list[str]] = {
    "GROUP BY expression": [
        "SELECT FLOOR(age / 10) * 10 AS decade, COUNT(*) FROM census GROUP BY 1",
        "SELECT CAST(CEIL(age / 10.0) * 10 AS INTEGER) AS band, AVG(income) FROM census GROUP BY band",
        "SELECT COALESCE(educ, 1) AS e, COUNT(*) FROM census GROUP BY COALESCE(educ, 1)",
        "SELECT age - (2025 - YEAR(joined)) AS age_at_join, COUNT(*) FROM census GROUP BY age_at_join",
        "SELECT sex, age > 64 AS senior, COUNT(*) FROM census GROUP BY sex, age > 64",
        "SELECT CEIL(spent / 10) AS tens, COUNT(*) FROM visits GROUP BY tens",
        "SELECT EXTRACT(dow FROM day) + 1 AS weekday, SUM(spent) FROM visits GROUP BY weekday",
        "SELECT UPPER(genre) AS g, COUNT(*) FROM checkouts GROUP BY UPPER(genre)",
        "SELECT genre IN ('Fiction', 'Mystery') AS novel, COUNT(*) FROM checkouts GROUP BY 1",
        "SELECT FLOOR(pages / 100) * 100 AS p, COUNT(*) FROM checkouts GROUP BY p",
        "SELECT CEIL(income) AS dollars, COUNT(*) FROM census GROUP BY dollars",
        "SELECT LOWER(title) AS t, COUNT(*) FROM checkouts GROUP BY t",
    ],
    "COUNT(DISTINCT col)": [
        "SELECT COUNT(DISTINCT educ) FROM census",
        "SELECT sex, COUNT(DISTINCT age) FROM census GROUP BY sex",
        "SELECT day, COUNT(DISTINCT items) FROM visits GROUP BY day",
        "SELECT COUNT(DISTINCT genre) FROM checkouts",
        "SELECT MONTH(out) AS m, COUNT(DISTINCT title) FROM checkouts GROUP BY m",
        "SELECT COUNT(DISTINCT day) FROM visits",
        "SELECT COUNT(DISTINCT educ, sex) FROM census",
    ],
    "SUM/AVG(DISTINCT col)": [
        "SELECT SUM(DISTINCT items) FROM visits",
        "SELECT AVG(DISTINCT spent) FROM visits",
        "SELECT genre, AVG(DISTINCT pages) FROM checkouts GROUP BY genre",
        "SELECT SUM(DISTINCT title) FROM checkouts",
    ],
    "literal casts (date = text, bool = 0/1, int = TRUE, DATE + INTERVAL)": [
        "SELECT COUNT(*) FROM visits WHERE day < DATE '2024-03-04' + INTERVAL 3 DAY",
        "SELECT COUNT(*) FROM visits WHERE day >= '2024-03-08'",
        "SELECT day, SUM(spent) FROM visits WHERE day BETWEEN '2024-03-05' AND '2024-03-07' GROUP BY day",
        "SELECT COUNT(*) FROM census WHERE married = 1",
        "SELECT COUNT(*) FROM census WHERE educ = TRUE",
        "SELECT COUNT(*) FROM checkouts WHERE out < '2024-02-30'",
    ],
    "FROM (t) AS c": [
        "SELECT COUNT(*) FROM (census) AS c WHERE c.age > 30",
        "SELECT genre, COUNT(*) FROM (checkouts) AS c GROUP BY genre",
    ],
    "not done: QUANTILE_CONT list, SELECT DISTINCT, a column + INTERVAL": [
        "SELECT QUANTILE_CONT(spent, [0.25, 0.5, 0.75]) FROM visits",
        "SELECT COUNT(*) FROM visits WHERE day + INTERVAL 1 DAY > DATE '2024-03-06'",
        "SELECT DISTINCT genre, COUNT(*) FROM checkouts GROUP BY genre",
    ],
}

# (query, exact SQL of the same cells in plain DuckDB) for the coverage runs.
COVERAGE = [
    ("SELECT COUNT(DISTINCT items) AS v FROM visits", "SELECT COUNT(DISTINCT items) FROM visits"),
    ("SELECT COUNT(DISTINCT educ) AS v FROM census", "SELECT COUNT(DISTINCT educ) FROM census"),
    ("SELECT COUNT(DISTINCT genre) AS v FROM checkouts", "SELECT COUNT(DISTINCT genre) FROM checkouts"),
    ("SELECT SUM(DISTINCT items) AS v FROM visits", "SELECT SUM(DISTINCT items) FROM visits"),
    ("SELECT AVG(DISTINCT spent) AS v FROM visits",
     "SELECT AVG(DISTINCT LEAST(GREATEST(spent, 0), 100)) FROM visits"),
]


def write_data(path: Path, seed: int = 11) -> None:
    """Rows within each table's per-unit bound, so the exact values are plain DuckDB's."""
    rng = np.random.default_rng(seed)
    census, visits, checkouts = [], [], []
    for pid in range(2000):
        for _ in range(int(rng.integers(1, 4))):
            educ = None if rng.random() < 0.05 else int(rng.integers(1, 17))
            census.append((pid, int(rng.integers(0, 100)), educ, float(rng.lognormal(10, 1)),
                           bool(rng.random() < 0.5), ["F", "M"][int(rng.integers(0, 2))],
                           dt.date(2020, 1, 1) + dt.timedelta(days=int(rng.integers(0, 1827)))))
    for visitor in range(1500):
        for _ in range(int(rng.integers(1, 5))):
            visits.append((visitor, dt.date(2024, 3, 4) + dt.timedelta(days=int(rng.integers(0, 7))),
                           round(float(rng.gamma(2, 15)), 2), int(rng.integers(0, 21))))
    for patron in range(800):
        for _ in range(int(rng.integers(1, 6))):
            checkouts.append((patron, GENRES[int(rng.integers(0, 5))], f"title {int(rng.integers(0, 400))}",
                              int(rng.integers(10, 1001)),
                              dt.date(2024, 1, 1) + dt.timedelta(days=int(rng.integers(0, 366)))))
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE census (pid BIGINT, age BIGINT, educ BIGINT, income DOUBLE, "
                     "married BOOLEAN, sex VARCHAR, joined DATE)")
        conn.executemany("INSERT INTO census VALUES (?, ?, ?, ?, ?, ?, ?)", census)
        conn.execute("CREATE TABLE visits (VisitorId BIGINT, day DATE, spent DOUBLE, items BIGINT)")
        conn.executemany("INSERT INTO visits VALUES (?, ?, ?, ?)", visits)
        conn.execute("CREATE TABLE checkouts (patron BIGINT, genre VARCHAR, title VARCHAR, pages BIGINT, "
                     "out DATE)")
        conn.executemany("INSERT INTO checkouts VALUES (?, ?, ?, ?, ?)", checkouts)


def main(runs: int) -> None:
    root = Path(tempfile.mkdtemp())
    write_data(root / "peers.duckdb")
    policy_path = root / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    Ledger(root / "ledger.sqlite", binding_of(load_policy(policy_path)), create=True).close()
    with duckdb.connect(str(root / "peers.duckdb"), read_only=True) as conn:
        exact = [float(conn.execute(exact_sql).fetchone()[0]) for _, exact_sql in COVERAGE]
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    with PrivateDatabase.connect(root / "peers.duckdb", policy_path, root / "ledger.sqlite",
                                 reuse=False) as db:  # repeated draws for coverage
        for construct, queries in QUERIES.items():
            for sql in queries:
                tally[construct][0] += 1
                try:
                    db.query(sql, epsilon=1.0)
                    tally[construct][1] += 1
                    print(f"  answered  {sql}")
                except DpsqlError as exc:
                    tally[construct][2] += 1
                    print(f"  refused   {sql}\n            {exc}")
        print("\n| construct | tried | answered | refused |\n|---|---|---|---|")
        for construct, (tried, answered, refused) in tally.items():
            print(f"| {construct} | {tried} | {answered} | {refused} |")
        print(f"\n| query (ε = 1, {runs} runs) | exact | 95% intervals holding it |\n|---|---|---|")
        for (sql, _), truth in zip(COVERAGE, exact, strict=True):
            hits = 0
            for _ in range(runs):
                result = db.query(sql, epsilon=1.0)
                hits += int(abs(float(result.df["v"][0]) - truth) <= float(result.ci95["v"][0]))
            print(f"| `{sql}` | {truth:g} | {hits}/{runs} = {hits / runs:.3f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
