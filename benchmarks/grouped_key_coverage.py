"""Coverage of the 95% intervals of grouped answers whose keys are a public table's rows or a
moved date (docs/theory.md §32), on peer-shaped data: library checkouts (patrons, at most 5 each)
joined to a public catalogue whose titles and authors have no declared values (some pairs repeat),
and a week of visits (VisitorId, day, spent; at most 4 each). Every unit is within its bound, so
the exact answer is plain DuckDB's. Prints, per query and column, the cells x runs whose interval
held the exact value.

    .venv/bin/python benchmarks/grouped_key_coverage.py [runs]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import yaml
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import binding_of
from dpsql.engine.policy_yaml import load_policy

GENRES = ["Fiction", "Mystery", "Science"]
POLICY = {
    "budget": {"epsilon": 1e9},
    "dependence": {"k": 1, "eta": 0.0, "mode": "auto"},
    "tables": {
        "checkouts": {"privacy_unit": "patron", "max_rows_per_unit": 5, "columns": {
            "book_id": {"type": "int", "lower": 0, "upper": 99},
            "genre": {"type": "str", "domain": GENRES}}},
        "catalogue": {"public": True, "key": "book_id", "columns": {
            "book_id": {"type": "int"}, "title": {"type": "str"}, "author": {"type": "str"}}},
        "visits": {"privacy_unit": "VisitorId", "max_rows_per_unit": 4, "columns": {
            "day": {"type": "date", "lower": "2024-03-04", "upper": "2024-03-10"},
            "spent": {"type": "float", "lower": 0.0, "upper": 100.0}}},
    },
}
# (query, the same grouping on the raw data, its key columns)
QUERIES = [
    ("SELECT c.title, c.author, COUNT(*) AS n FROM checkouts k JOIN catalogue c ON k.book_id = "
     "c.book_id GROUP BY c.title, c.author",
     "SELECT c.title, c.author, COUNT(*) FROM checkouts k JOIN catalogue c ON k.book_id = c.book_id "
     "GROUP BY 1, 2", 2),
    ("SELECT c.author, k.genre, COUNT(*) AS n FROM checkouts k JOIN catalogue c ON k.book_id = "
     "c.book_id GROUP BY c.author, k.genre",
     "SELECT c.author, k.genre, COUNT(*) FROM checkouts k JOIN catalogue c ON k.book_id = c.book_id "
     "GROUP BY 1, 2", 2),
    ("SELECT day + INTERVAL 1 DAY AS d, COUNT(*) AS n, SUM(spent) AS s FROM visits GROUP BY 1",
     "SELECT CAST(day + INTERVAL 1 DAY AS DATE), COUNT(*), SUM(spent) FROM visits GROUP BY 1", 1),
    ("SELECT CAST(day + INTERVAL 20 HOUR AS DATE) AS d, COUNT(*) AS n FROM visits GROUP BY d",
     "SELECT CAST(day + INTERVAL 20 HOUR AS DATE), COUNT(*) FROM visits GROUP BY 1", 1),
]


def write_data(path: Path, seed: int = 5) -> None:
    rng = np.random.default_rng(seed)
    patrons = np.repeat(np.arange(2000), rng.integers(1, 6, 2000))
    checkouts = pd.DataFrame({"patron": patrons, "book_id": rng.integers(0, 100, patrons.size),
                              "genre": np.array(GENRES)[rng.integers(0, 3, patrons.size)]})
    books = np.arange(90)  # books 90 to 99 are checked out but not catalogued
    catalogue = pd.DataFrame({"book_id": books, "title": [f"title {b % 70}" for b in books],
                              "author": [f"author {b % 70 % 25}" for b in books]})
    visitors = np.repeat(np.arange(1500), rng.integers(1, 5, 1500))
    visits = pd.DataFrame({"VisitorId": visitors,
                           "day": pd.Timestamp("2024-03-04") + pd.to_timedelta(
                               rng.integers(0, 7, visitors.size), unit="D"),
                           "spent": np.round(rng.gamma(2, 15, visitors.size).clip(0, 100), 2)})
    visits["day"] = visits["day"].dt.date
    with duckdb.connect(str(path)) as conn:
        for name, frame in (("checkouts", checkouts), ("catalogue", catalogue), ("visits", visits)):
            conn.register("frame", frame)
            conn.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            conn.unregister("frame")


def main(runs: int) -> None:
    root = Path(tempfile.mkdtemp())
    write_data(root / "peers.duckdb")
    policy_path = root / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(POLICY, sort_keys=False))
    Ledger(root / "ledger.sqlite", binding_of(load_policy(policy_path)), create=True).close()
    with duckdb.connect(str(root / "peers.duckdb"), read_only=True) as conn:
        truths = [{tuple(row[:keys]): row[keys:] for row in conn.execute(exact).fetchall()}
                  for _, exact, keys in QUERIES]
    print(f"| query (ε = 1, {runs} runs) | column | cells | cells x runs whose 95% interval held "
          "the exact value |\n|---|---|---|---|")
    with PrivateDatabase.connect(root / "peers.duckdb", policy_path, root / "ledger.sqlite",
                                 reuse=False) as db:  # repeated draws for coverage
        for (sql, _, keys), truth in zip(QUERIES, truths, strict=True):
            hits: dict[str, int] = {}
            cells = 0
            for _ in range(runs):
                result = db.query(sql, epsilon=1.0)
                frame, widths = result.df, result.ci95
                cells = len(frame)
                for column in frame.columns[keys:]:
                    index = list(frame.columns).index(column) - keys
                    empty = (0.0,) * (len(frame.columns) - keys)  # a key no row has
                    exact = np.array([float(truth.get(tuple(row[:keys]), empty)[index])
                                      for row in frame.itertuples(index=False)])
                    noisy, width = frame[column].to_numpy(dtype=float), widths[column].to_numpy(dtype=float)
                    held = np.abs(noisy - exact) <= width
                    hits[column] = hits.get(column, 0) + int(held.sum())
            for column, hit in hits.items():
                total = cells * runs
                print(f"| `{sql}` | {column} | {cells} | {hit}/{total} = {hit / total:.4f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
