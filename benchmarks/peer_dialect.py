"""Queries in the forms peers' users write (computed GROUP BY keys, DISTINCT aggregates, literals
read as DuckDB casts them, FROM (t) AS c, SELECT DISTINCT over released rows, lists of
quantiles, a date column ± INTERVAL compared with a literal, two-level aggregation, the join forms
of docs/theory.md §30), tried on data shaped like the peers' examples: census rows with a person
id and a few rows each, a week of visits (VisitorId, day, spent) and library checkouts with genres.
Prints, per construct, the queries tried / answered / refused, and the measured coverage of the
95% intervals of the DISTINCT and two-level aggregates and of each q of a quantile list over
repeated runs.

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
AUTHORS = [f"author {i}" for i in range(20)]
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
        # Join forms (docs/theory.md §30): a second table of the census person, members and their
        # loans (the unit under two names: members.id, loans.member_id) and a public catalogue.
        "survey": {"privacy_unit": "pid", "max_rows_per_unit": 1, "columns": {
            "score": {"type": "int", "lower": 0, "upper": 10}}},
        "members": {"privacy_unit": "id", "max_rows_per_unit": 1, "columns": {
            "band": {"type": "str", "domain": ["child", "adult", "senior"]}}},
        "loans": {"privacy_unit": {"through": "member_id", "references": "members.id"},
                  "max_rows_per_unit": 5, "columns": {
                      "title": {"type": "str"}, "days": {"type": "int", "lower": 1, "upper": 60}}},
        "catalogue": {"public": True, "key": "title", "columns": {
            "title": {"type": "str"}, "author": {"type": "str", "domain": AUTHORS},
            "genre": {"type": "str", "domain": GENRES}}},
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
    "two-level aggregation (per-unit pre-aggregation; outer queries over released rows, §29)": [
        "WITH per_visitor AS (SELECT VisitorId, day, SUM(spent) AS s FROM visits GROUP BY VisitorId, day) "
        "SELECT day, SUM(s) FROM per_visitor GROUP BY day",
        "SELECT AVG(n) FROM (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId)",
        "SELECT COUNT(*) FROM (SELECT VisitorId FROM visits GROUP BY VisitorId)",
        "WITH s AS (SELECT VisitorId, SUM(spent) AS total FROM visits GROUP BY VisitorId) "
        "SELECT SUM(LEAST(total, 100)) FROM s",
        "SELECT day, AVG(s), COUNT(*) FROM (SELECT VisitorId, day, SUM(spent) AS s FROM visits "
        "GROUP BY VisitorId, day) GROUP BY day",
        "SELECT AVG(days) FROM (SELECT VisitorId, COUNT(DISTINCT day) AS days FROM visits GROUP BY VisitorId)",
        "WITH per_patron AS (SELECT patron, genre, COUNT(*) AS n FROM checkouts GROUP BY patron, genre) "
        "SELECT genre, SUM(n), COUNT(*) FROM per_patron GROUP BY genre",
        "SELECT sex, AVG(mean_income) FROM (SELECT pid, sex, AVG(income) AS mean_income FROM census "
        "GROUP BY pid, sex) GROUP BY sex",
        "SELECT MAX(top) FROM (SELECT VisitorId, MAX(items) AS top FROM visits GROUP BY VisitorId)",
        "WITH v AS (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId) "
        "SELECT n, COUNT(*) FROM v GROUP BY n",
        "SELECT AVG(c) FROM (SELECT day, COUNT(*) AS c FROM visits GROUP BY day)",
        "SELECT day, c FROM (SELECT day, COUNT(*) AS c FROM visits GROUP BY day) AS r WHERE c > 500 "
        "ORDER BY c DESC",
        "WITH g AS (SELECT genre, COUNT(*) AS n, AVG(pages) AS p FROM checkouts GROUP BY genre) "
        "SELECT genre, p FROM g ORDER BY n DESC LIMIT 3",
        "WITH big AS (SELECT VisitorId, SUM(spent) AS s FROM visits GROUP BY VisitorId HAVING SUM(spent) > 50) "
        "SELECT COUNT(*) FROM big",
    ],
    "JOIN ... USING (unit)": [
        "SELECT COUNT(*), AVG(score) FROM census JOIN survey USING (pid)",
        "SELECT sex, SUM(score), COUNT(DISTINCT pid) FROM census LEFT JOIN survey USING (pid) GROUP BY sex",
        "SELECT COUNT(*) FROM checkouts JOIN catalogue USING (title)",
    ],
    "the unit under two names (members.id = loans.member_id)": [
        "SELECT COUNT(*), SUM(days) FROM members JOIN loans ON members.id = loans.member_id",
        "SELECT m.band, COUNT(*) FROM members AS m JOIN loans AS l ON m.id = l.member_id GROUP BY m.band",
        "SELECT band, AVG(days) FROM loans, members WHERE member_id = id GROUP BY band",
        "SELECT COUNT(DISTINCT member_id), COUNT(*) FROM loans",
    ],
    "a public table first in FROM": [
        "SELECT c.author, COUNT(*) FROM catalogue c JOIN checkouts k ON c.title = k.title GROUP BY c.author",
        "SELECT catalogue.genre, SUM(days) FROM catalogue, loans WHERE catalogue.title = loans.title "
        "GROUP BY catalogue.genre",
    ],
    "joins inside a CTE, a public table under two aliases": [
        "WITH x AS (SELECT k.pages, c.author FROM checkouts k JOIN catalogue c ON k.title = c.title) "
        "SELECT author, SUM(pages) FROM x GROUP BY author",
        "SELECT c1.author, COUNT(*) FROM loans JOIN catalogue c1 ON loans.title = c1.title JOIN "
        "catalogue c2 ON c1.title = c2.title WHERE c2.genre = 'Fiction' GROUP BY c1.author",
    ],
    "a key set given as a public table's rows (§32.1)": [
        "SELECT c.title, c.author, COUNT(*) FROM checkouts k JOIN catalogue c ON k.title = c.title "
        "GROUP BY c.title, c.author",
        "SELECT c.title, k.genre, COUNT(*) FROM checkouts k JOIN catalogue c ON k.title = c.title "
        "WHERE c.title IN ('title 1', 'title 2') GROUP BY c.title, k.genre",
        "SELECT c.title, SUM(days) FROM loans JOIN catalogue c ON loans.title = c.title GROUP BY c.title",
    ],
    "refused rightly: joins that could multiply a unit's rows": [
        "SELECT COUNT(*) FROM checkouts a JOIN checkouts b ON a.title = b.title",
        "SELECT COUNT(*) FROM census JOIN survey ON census.age = survey.score",
        "SELECT COUNT(*) FROM loans JOIN catalogue ON loans.title = catalogue.author",
    ],
    "SELECT DISTINCT over released rows": [
        "SELECT DISTINCT genre, COUNT(*) FROM checkouts GROUP BY genre",
        "SELECT DISTINCT sex, married FROM census GROUP BY sex, married",
        "SELECT DISTINCT married, COUNT(*) > 100 AS big FROM census GROUP BY sex, married",
        "SELECT DISTINCT EXTRACT(dow FROM day) < 5 AS weekday, SUM(spent) > 0 AS paid FROM visits "
        "GROUP BY day ORDER BY 1",
        "SELECT DISTINCT ROUND(AVG(pages), -2) AS hundreds FROM checkouts GROUP BY genre",
        "SELECT DISTINCT ROUND(AVG(pages) / 100) * 100 AS hundreds FROM checkouts GROUP BY genre",
        "SELECT DISTINCT ON (genre) genre, COUNT(*) FROM checkouts GROUP BY genre",
    ],
    "QUANTILE_CONT / PERCENTILE_CONT list": [
        "SELECT QUANTILE_CONT(spent, [0.25, 0.5, 0.75]) FROM visits",
        "SELECT day, QUANTILE_CONT(spent, [0.1, 0.9]) AS q FROM visits GROUP BY day",
        "SELECT PERCENTILE_CONT([0.5, 0.9]) WITHIN GROUP (ORDER BY pages) FROM checkouts",
        "SELECT genre, QUANTILE_CONT(pages, [0.25, 0.75]), COUNT(*) FROM checkouts GROUP BY genre "
        "ORDER BY 2",
        "SELECT QUANTILE_CONT(age, [0.5, 0.99]) AS q, MEDIAN(income) FROM census",
        "SELECT QUANTILE_DISC(age, [0.25, 0.5]) FROM census",
        "SELECT COUNT(*) FROM census HAVING QUANTILE_CONT(age, [0.5, 0.9]) > 3",
    ],
    "a column + INTERVAL compared with a literal, and grouped on (§26.3, §32.2)": [
        "SELECT COUNT(*) FROM visits WHERE day + INTERVAL 1 DAY > DATE '2024-03-06'",
        "SELECT day, SUM(spent) FROM visits WHERE day - INTERVAL 2 DAY >= '2024-03-05' GROUP BY day",
        "SELECT COUNT(*) FROM census WHERE joined + INTERVAL 52 WEEK < DATE '2022-01-01'",
        "SELECT COUNT(*) FROM checkouts WHERE out + INTERVAL 1 MONTH > DATE '2024-06-01'",
        "SELECT day + INTERVAL 7 DAY AS next_week, COUNT(*) FROM visits GROUP BY 1",
        "SELECT CAST(day + INTERVAL 20 HOUR AS DATE) AS d, SUM(spent) FROM visits GROUP BY d",
        "SELECT date_trunc('week', out + INTERVAL 3 DAY) AS w, COUNT(*) FROM checkouts GROUP BY w",
        "SELECT EXTRACT(dow FROM day - INTERVAL 1 DAY) AS w, AVG(spent) FROM visits GROUP BY w",
        "SELECT day + INTERVAL 1 MONTH AS m, COUNT(*) FROM visits GROUP BY m",
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
    # A list of quantiles: one column per q, all from one histogram of the clamped values.
    ("SELECT QUANTILE_CONT(spent, [0.25, 0.5, 0.75]) AS v FROM visits",
     "SELECT QUANTILE_CONT(LEAST(GREATEST(spent, 0), 100), [0.25, 0.5, 0.75]) FROM visits"),
    ("SELECT PERCENTILE_CONT([0.1, 0.9]) WITHIN GROUP (ORDER BY pages) AS v FROM checkouts",
     "SELECT QUANTILE_CONT(LEAST(GREATEST(pages, 10), 1000), [0.1, 0.9]) FROM checkouts"),
    ("SELECT AVG(n) AS v FROM (SELECT VisitorId, COUNT(*) AS n FROM visits GROUP BY VisitorId)",
     "SELECT AVG(n) FROM (SELECT COUNT(*) AS n FROM visits GROUP BY VisitorId)"),
    ("SELECT SUM(s) AS v FROM (SELECT VisitorId, day, SUM(spent) AS s FROM visits GROUP BY VisitorId, day)",
     "SELECT SUM(LEAST(GREATEST(spent, 0), 100)) FROM visits"),
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
    survey = [(pid, int(rng.integers(0, 11))) for pid in range(0, 2000, 2)]
    members = [(member, ["child", "adult", "senior"][int(rng.integers(0, 3))]) for member in range(600)]
    loans = [(member, f"title {int(rng.integers(0, 400))}", int(rng.integers(1, 61)))
             for member in range(600) for _ in range(int(rng.integers(0, 6)))]
    catalogue = [(f"title {i}", AUTHORS[i % 20], GENRES[i % 5]) for i in range(400)]
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE survey (pid BIGINT, score BIGINT)")
        conn.executemany("INSERT INTO survey VALUES (?, ?)", survey)
        conn.execute("CREATE TABLE members (id BIGINT, band VARCHAR)")
        conn.executemany("INSERT INTO members VALUES (?, ?)", members)
        conn.execute("CREATE TABLE loans (member_id BIGINT, title VARCHAR, days BIGINT)")
        conn.executemany("INSERT INTO loans VALUES (?, ?, ?)", loans)
        conn.execute("CREATE TABLE catalogue (title VARCHAR, author VARCHAR, genre VARCHAR)")
        conn.executemany("INSERT INTO catalogue VALUES (?, ?, ?)", catalogue)
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
        exact = [np.atleast_1d(np.asarray(conn.execute(exact_sql).fetchone()[0], dtype=float))
                 for _, exact_sql in COVERAGE]
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
        print(f"\n| query (ε = 1, {runs} runs) | column | exact | 95% intervals holding it |\n"
              "|---|---|---|---|")
        for (sql, _), truth in zip(COVERAGE, exact, strict=True):
            hits = np.zeros(len(truth), dtype=int)
            for _ in range(runs):
                result = db.query(sql, epsilon=1.0)
                values = result.df.iloc[0].to_numpy(dtype=float)
                hits += np.abs(values - truth) <= result.ci95.iloc[0].to_numpy(dtype=float)
            for column, value, hit in zip(result.df.columns, truth, hits, strict=True):
                print(f"| `{sql}` | {column} | {value:g} | {hit}/{runs} = {hit / runs:.3f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
