"""The query forms peers' users write (docs/theory.md §26), drawn only where they are valid.

Computed GROUP BY keys over the bounded int, date, bool and domain columns of tests/adversarial.py,
DISTINCT aggregates of columns that are not the unit, and the dialect's literals (ISO text against
a date or timestamp, 0/1 against a bool, TRUE against an int, DATE ± INTERVAL literals, a
column ± INTERVAL compared with a literal),
quantile lists and SELECT DISTINCT over released rows; UNNEST of the note column, which the
fuzzer's policy declares a list (docs/theory.md §31), in the forms users write it; and the
two-level forms of §33 (`TWO_LEVEL_FORMS`, run as they are). Every
form is one the engine accepts, so a refusal of a drawn query is itself a finding; the
differential fuzzer mixes these queries into its random ones, and its sensitivity test runs them
on neighbouring hostile datasets.
"""

from __future__ import annotations

from hypothesis import strategies as st

# Computed keys whose values follow from the policy: age 0..100, level {1, 2, 3}, a bool, the
# state domain and the visit dates 2020..2024 (at most 105 keys each).
COMPUTED_KEYS = [
    "FLOOR(age / 10) * 10", "CEIL(age / 7.0)", "COALESCE(level, 1)", "COALESCE(age, 1) % 3",
    "UPPER(state)", "level * 2 + CAST(sick AS INTEGER)", "CAST(CEIL(age / 10.0) * 10 AS INTEGER)",
    "YEAR(visit) - 2020", "age > 50 AND sick", "COALESCE(sick, FALSE)", "CEIL(level / 2)",
    "age - (2025 - YEAR(visit))",
    # A date moved by a fixed INTERVAL (§32.2): its keys are the declared range moved.
    "date_trunc('month', visit + INTERVAL 3 DAY)", "EXTRACT(dow FROM visit - INTERVAL 1 DAY)",
    "YEAR(visit + INTERVAL 36 HOUR)",
]
# Keys of the forms before §26, to cross with a computed one.
PLAIN_KEYS = ["state", "sick", "level", "EXTRACT(month FROM visit)"]
DISTINCT_AGGREGATES = [
    "COUNT(DISTINCT age)", "COUNT(DISTINCT state)", "COUNT(DISTINCT visit)", "COUNT(DISTINCT sick)",
    "COUNT(DISTINCT note)", "COUNT(DISTINCT level)", "COUNT(DISTINCT FLOOR(income / 100))",
    "SUM(DISTINCT level)", "SUM(DISTINCT income - 500)", "SUM(DISTINCT age)", "AVG(DISTINCT income)",
    "AVG(DISTINCT age - 50)",
]
PLAIN_AGGREGATES = ["COUNT(*)", "COUNT(person_id)", "SUM(income)", "AVG(age)", "COUNT(visit)"]
# Lists of quantiles, one column per q read from one histogram (§26.2); with one key at most,
# so that keys x bins stay under the policy's noisy-value limit.
QUANTILE_LISTS = ["QUANTILE_CONT(age, [0.25, 0.5, 0.75])", "QUANTILE_CONT(level, [0, 1])",
                  "PERCENTILE_CONT([0.1, 0.9]) WITHIN GROUP (ORDER BY income)"]
# Literals read as DuckDB casts them, and DATE ± INTERVAL folded from the text.
DIALECT_CONDITIONS = [
    "visit >= '2022-03-01'", "visit BETWEEN '2021-01-01' AND '2023-06-30'", "visit = '2024-02-29'",
    "visit IN ('2024-02-29', '2020-01-01')", "visit <> '2019-12-31'", "sick = 1", "sick <> 0",
    "level = TRUE", "age > FALSE", "seen < '2024-03-01 10:00:00'",
    "visit < DATE '2023-01-01' + INTERVAL 2 MONTH", "visit >= DATE '2024-03-31' - INTERVAL 1 MONTH",
    "seen >= TIMESTAMP '2024-06-01 00:00:00' - INTERVAL 36 HOUR",
    # A column ± INTERVAL compared with a literal: the literal moves instead (§26.3).
    "visit + INTERVAL 7 DAY > '2022-03-01'", "seen - INTERVAL 36 HOUR < TIMESTAMP '2024-06-01 00:00:00'",
    "visit + INTERVAL 2 WEEK BETWEEN '2021-01-01' AND DATE '2023-06-30'",
    "visit - INTERVAL 1 DAY IN ('2024-02-28', '2019-12-31')",
]

# Two-level forms of docs/theory.md §33, run as they are on the hostile neighbours: a histogram
# of an integer per-unit value (rows per unit; distinct levels, a 3-value domain, per unit and
# state) and aggregates over released rows (the inner release's measurements).
TWO_LEVEL_FORMS = [
    "SELECT n, COUNT(*) FROM (SELECT person_id, COUNT(*) AS n FROM people GROUP BY person_id) GROUP BY n",
    "SELECT d, COUNT(*), SUM(s) FROM (SELECT person_id, state, COUNT(DISTINCT level) AS d, SUM(age) AS s "
    "FROM people WHERE visit >= '2021-01-01' GROUP BY 1, 2) GROUP BY d",
    "WITH per AS (SELECT person_id, MAX(level) AS top FROM people GROUP BY person_id) "
    "SELECT top, COUNT(*) FROM per WHERE top > 1 GROUP BY top",
    "SELECT AVG(c), MAX(c), MIN(s), SUM(s) FROM (SELECT state, COUNT(*) AS c, SUM(income) AS s FROM people "
    "GROUP BY state)",
    "SELECT AVG(t) FROM (SELECT level, SUM(n) AS t FROM (SELECT person_id, level, COUNT(*) AS n "
    "FROM people GROUP BY person_id, level) GROUP BY level)",
]


@st.composite
def peer_queries(draw) -> str:
    """A SELECT over `people` of the peer forms: a computed key (sometimes crossed with a plain
    one, sometimes none), DISTINCT and plain aggregates, a list of quantiles, a dialect WHERE,
    ORDER BY, and SELECT DISTINCT or TOP."""
    keys: list[str] = []
    if draw(st.integers(0, 4)):
        keys.append(draw(st.sampled_from(COMPUTED_KEYS)))
        if draw(st.integers(0, 3)) == 0:
            keys.append(draw(st.sampled_from(PLAIN_KEYS)))
    items = [draw(st.sampled_from(DISTINCT_AGGREGATES))]
    for _ in range(draw(st.integers(0, 2))):
        items.append(draw(st.sampled_from(DISTINCT_AGGREGATES + PLAIN_AGGREGATES)))
    if len(keys) <= 1 and draw(st.integers(0, 3)) == 0:
        items.append(draw(st.sampled_from(QUANTILE_LISTS)))
    prefix = draw(st.sampled_from(["", "", "", "DISTINCT ", f"TOP {draw(st.integers(1, 3))} "]))
    sql = f"SELECT {prefix if keys else ''}{', '.join(keys + items)} FROM people"
    conditions = draw(st.lists(st.sampled_from(DIALECT_CONDITIONS), max_size=2, unique=True))
    if conditions:
        sql += " WHERE " + draw(st.sampled_from([" AND ", " OR "])).join(conditions)
    if keys:
        sql += " GROUP BY " + ", ".join(str(i + 1) for i in range(len(keys)))
        if draw(st.integers(0, 3)) == 0:
            sql += f" ORDER BY {len(keys) + 1} DESC"
    return sql


# UNNEST of note, a ';'-separated list of at most 3 items read, whose items' domain is row and x
# (tests/adversarial.py): the comma join, CROSS JOIN ... AS item and a FROM-subquery (§31).
UNNEST_SOURCES = [
    "people, UNNEST(string_split(note, ';')) AS g(item)",
    "people CROSS JOIN UNNEST(string_split(note, ';')) AS item",
    "(SELECT person_id, age, level, income, state, note, sick, visit, seen, "
    "UNNEST(string_split(note, ';')) AS item FROM people) AS p",
]
ITEM_CONDITIONS = ["item = 'row'", "item <> 'x'", "item IN ('row', 'x')", "item IS NOT NULL"]


@st.composite
def unnest_queries(draw) -> str:
    """A SELECT over the items of people's note: grouped by the item (sometimes with a plain
    key), by a computed key or not at all, with plain and DISTINCT aggregates and a condition on
    the item or a dialect one."""
    keys = draw(st.sampled_from([[], ["item"], ["item", draw(st.sampled_from(PLAIN_KEYS))],
                                 [draw(st.sampled_from(COMPUTED_KEYS))]]))
    items = [draw(st.sampled_from(PLAIN_AGGREGATES + DISTINCT_AGGREGATES))
             for _ in range(draw(st.integers(1, 3)))]
    sql = f"SELECT {', '.join(keys + items)} FROM {draw(st.sampled_from(UNNEST_SOURCES))}"
    conditions = draw(st.lists(st.sampled_from(ITEM_CONDITIONS + DIALECT_CONDITIONS), max_size=2,
                               unique=True))
    if conditions:
        sql += " WHERE " + draw(st.sampled_from([" AND ", " OR "])).join(conditions)
    if keys:
        sql += " GROUP BY " + ", ".join(str(i + 1) for i in range(len(keys)))
    return sql
