"""The benchmark workload: query templates, the two policies, epsilon (stdlib only: the
SmartNoise runner imports it from its own environment)."""

from __future__ import annotations

REGIONS = tuple(f"R{i:02d}" for i in range(50))
AGE_BOUNDS = (0, 100)
INCOME_BOUNDS = (0.0, 200_000.0)
MAX_ROWS_PER_UNIT = 3
EPSILON = 1.0
UNIT = "person_id"

TEMPLATES = {
    "count": "SELECT COUNT(*) AS n FROM people",
    "filtered_count": "SELECT COUNT(*) AS n FROM people WHERE age >= 40",
    "sum": "SELECT SUM(income) AS total FROM people",
    "avg": "SELECT AVG(income) AS mean FROM people",
    "grouped_count": "SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "grouped_count_sum_avg": "SELECT region, COUNT(*) AS n, SUM(income) AS total, "
                             "AVG(income) AS mean FROM people GROUP BY region",
    "count_distinct_unit": "SELECT COUNT(DISTINCT person_id) AS units FROM people",
}
"""Name -> SQL; the same text runs privately, in plain DuckDB and in SmartNoise SQL."""

POLICIES = ("row_level", "per_unit")
"""row_level: each row is one individual; per_unit: person_id, at most MAX_ROWS_PER_UNIT rows."""


def applies(template: str, policy: str) -> bool:
    """COUNT(DISTINCT unit) needs a privacy unit, so the row-level policy has no such query."""
    return template != "count_distinct_unit" or policy == "per_unit"


def policy_dict(policy: str, k: int = 1, eta: float = 0.0) -> dict:
    """The dpsql policy for one of POLICIES, with a budget no benchmark run can exhaust."""
    table: dict = {
        "columns": {
            "region": {"type": "str", "domain": list(REGIONS)},
            "age": {"type": "int", "lower": AGE_BOUNDS[0], "upper": AGE_BOUNDS[1]},
            "income": {"type": "float", "lower": INCOME_BOUNDS[0], "upper": INCOME_BOUNDS[1]},
        }
    }
    if policy == "per_unit":
        table = {"privacy_unit": UNIT, "max_rows_per_unit": MAX_ROWS_PER_UNIT, **table}
    return {"budget": {"epsilon": 1e12}, "dependence": {"k": k, "eta": eta, "mode": "auto"},
            "tables": {"people": table}}
