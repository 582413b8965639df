"""Golden files: the SQL run on the data, the post-processing SQL and each measurement's noise
parameters for a fixed set of queries, so that a refactoring cannot change them unnoticed.

Regenerate (only when a change of the SQL is intended, and review the diff):
    DPSQL_REGENERATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dpsql.engine.backends.duckdb_execute import bounded_copy_sql
from dpsql.engine.noise import build_mechanism
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.postprocess import noisy_columns, query_sql
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select

from tests.support import BASE_POLICY

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("DPSQL_REGENERATE_GOLDEN") == "1"
EPSILON_DP = 1.0
HASH_KEY = "golden-hash-key"

POLICY = parse_policy({**BASE_POLICY, "tables": {
    **BASE_POLICY["tables"],
    "visits": {  # row-level: each row is one individual
        "columns": {
            "clinic": {"type": "str", "domain": ["north", "south"]},
            "minutes": {"type": "float", "lower": 0.0, "upper": 120.0},
            "urgent": {"type": "bool"},
        },
    },
}})

QUERIES = {
    "count_star": "SELECT COUNT(*) FROM people",
    "count_column": "SELECT COUNT(age) AS n FROM people",
    "count_distinct_unit": "SELECT COUNT(DISTINCT person_id) FROM people",
    "sum_int": "SELECT SUM(age) FROM people",
    "sum_float": "SELECT SUM(income) AS total FROM people",
    "avg": "SELECT AVG(income) FROM people",
    "all_aggregates": "SELECT COUNT(*), COUNT(DISTINCT person_id), SUM(age), AVG(income) FROM people",
    "grouped_count": "SELECT state, COUNT(*) FROM people GROUP BY state",
    "grouped_two_keys": "SELECT state, sick, COUNT(*) AS n, SUM(income) FROM people GROUP BY state, sick",
    "grouped_avg": "SELECT sick, AVG(age) AS mean_age FROM people GROUP BY sick",
    "grouped_distinct": "SELECT state, COUNT(DISTINCT person_id) FROM people GROUP BY state",
    "where_comparison": "SELECT COUNT(*) FROM people WHERE age >= 18 AND income < 500.5",
    "where_in_like": "SELECT COUNT(*) FROM people WHERE state IN ('CA', 'NY') OR note LIKE 'r%'",
    "where_between_not": "SELECT SUM(income) FROM people WHERE NOT (age BETWEEN 20 AND 30)",
    "where_is_null": "SELECT COUNT(*) FROM people WHERE income IS NOT NULL AND sick IS TRUE",
    "where_functions": ("SELECT COUNT(*) FROM people WHERE LOWER(TRIM(note)) = 'row' AND "
                        "ROUND(income / 3, 1) > ABS(age - 40) AND LENGTH(SUBSTRING(note, 1, 2)) = 2"),
    "where_case_cast": ("SELECT COUNT(*) FROM people WHERE CASE WHEN sick THEN CAST(age AS DOUBLE) "
                        "ELSE COALESCE(income, 0) END > 10"),
    "expression_output": "SELECT state, SUM(income) / COUNT(*) + 1 AS ratio FROM people GROUP BY state",
    "having": "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING COUNT(*) > 10",
    "order_limit": "SELECT state, SUM(age) AS s FROM people GROUP BY state ORDER BY s DESC LIMIT 2",
    "order_position_offset": ("SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY 2, state "
                              "LIMIT 3 OFFSET 1"),
    "alias_qualified": "SELECT COUNT(p.age) FROM people AS p WHERE p.sick",
    "quantiles": ("SELECT state, MEDIAN(income) AS m, QUANTILE_CONT(income, 0.9), MIN(age) FROM people "
                  "GROUP BY state HAVING m > 10"),
    "row_level_count": "SELECT COUNT(*) FROM visits",
    "row_level_grouped": ("SELECT clinic, urgent, AVG(minutes), SUM(minutes) FROM visits "
                          "WHERE minutes > 5 GROUP BY clinic, urgent"),
    "row_level_having_order": ("SELECT clinic, COUNT(*) AS n FROM visits GROUP BY clinic "
                               "HAVING n >= 1 ORDER BY clinic DESC LIMIT 1"),
}


def render(sql: str) -> str:
    """Everything decided from the query text and the policy, as text."""
    plan = build_plan(parse_select(sql), POLICY, sql)
    lines = [f"-- query\n{sql}", f"-- rewritten\n{rewrite(plan).sql('duckdb')}",
             f"-- postprocess\n{query_sql(plan)}",
             "-- noisy columns", *(f"{name} {kind}" for name, kind in noisy_columns(plan)),
             "-- measurements"]
    share = EPSILON_DP / len(plan.measurements)
    for m in plan.measurements:
        mech = build_mechanism(m, sensitivity(m, plan), share)
        lines.append(f"{m.name} {m.label} integer={m.integer} mechanism={mech.mechanism} "
                     f"sensitivity={mech.sensitivity!r} scale={mech.scale!r}")
    lines.append("-- outputs")
    lines += [f"{out.name} function={out.aggregate.function if out.aggregate else None} "
              f"from={','.join(out.measurements)}"
              for out in plan.outputs]
    return "\n".join(lines) + "\n"


def check(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.sql"
    if REGENERATE:
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; regenerate (see this module's docstring)"
    assert text == path.read_text(), f"{name}: output differs from {path}"


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_query_matches_golden(name: str) -> None:
    check(name, render(QUERIES[name]))


def test_bounded_copy_matches_golden() -> None:
    check("bounded_copy_people", bounded_copy_sql(POLICY.tables["people"], HASH_KEY, False) + "\n")


def test_every_golden_file_is_checked() -> None:
    """A golden file without a query would silently stop being compared."""
    expected = {f"{name}.sql" for name in QUERIES} | {"bounded_copy_people.sql"}
    assert {p.name for p in GOLDEN.glob("*.sql")} == expected
