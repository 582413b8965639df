"""A private table joined to a public one on its declared unique key: each private row matches
at most one public row, so every sensitivity is the private table's; the public columns are
group keys with their policy domains. A key that repeats in the data is refused when the data
is opened, before any query; every other join is refused."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine import PrivateDatabase, QueryRefused
from engine.binding import build_plan
from engine.errors import PolicyError
from engine.execute import bound_units, run
from engine.flatten import flatten
from engine.parse import parse_select
from engine.policy import parse_policy
from engine.rewrite import rewrite
from engine.sensitivity import sensitivity
from tests.support import (
    BASE_POLICY,
    REGIONS,
    add_regions,
    create_ledger,
    run_cli,
    with_regions,
    write_policy,
)
from tests.test_sensitivity import unit_rows

POLICY = parse_policy({**BASE_POLICY, **with_regions()})
QUERIES = [
    "SELECT regions.region, COUNT(*), SUM(income), COUNT(DISTINCT person_id) FROM people "
    "JOIN regions ON people.state = regions.state GROUP BY regions.region",
    "SELECT r.region, COUNT(*), AVG(age), SUM(r.population) FROM people AS p LEFT JOIN regions AS r "
    "ON p.state = r.state GROUP BY r.region",
    "SELECT SUM(population * 2 - age), COUNT(*) FILTER (WHERE region = 'West') FROM people "
    "JOIN regions ON people.state = regions.state WHERE people.age > 10",
    "WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT region, sick, COUNT(*) FROM adults "
    "LEFT JOIN regions ON adults.state = regions.state GROUP BY region, sick",
]
PLANS = [build_plan(flatten(parse_select(q), POLICY), POLICY, q) for q in QUERIES]


def _exact(table: dict[int, list[tuple]], regions: list[tuple] = REGIONS) -> list[dict[str, list]]:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, income DOUBLE, "
                 "sick BOOLEAN, note VARCHAR)")
    conn.execute("CREATE TABLE regions (state VARCHAR, region VARCHAR, population BIGINT)")
    conn.executemany("INSERT INTO regions VALUES (?, ?, ?)", regions)
    records = [(unit, *r, "x") for unit, rows in table.items() for r in rows]
    if records:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", records)
    bound_units(conn, POLICY.tables["people"], "fixed-key")
    answers = [run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values for plan in PLANS]
    conn.close()
    return answers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(others=st.dictionaries(st.integers(0, 6), unit_rows, max_size=5), before=unit_rows,
       after=unit_rows)
@example(others={}, before=[("CA", 150, 2000.0, True)] * 3, after=[("NY", -20, -200.0, False)] * 3)
@example(others={1: [("TX", 5, 1.0, True)]}, before=[], after=[("WA", 150, 2000.0, True)] * 4)
def test_one_unit_moves_each_aggregate_of_a_join_within_its_sensitivity(others, before, after):
    """The sensitivity test of docs/theory.md §8 over join queries: unit 9's rows change, the
    public table stays; each exact aggregate moves (L1 over groups) by at most its sensitivity,
    the private table's alone."""
    for plan, a, b in zip(PLANS, _exact({**others, 9: before}), _exact({**others, 9: after}), strict=True):
        for m in plan.measurements:
            moved = sum(abs(float(x) - float(y)) for x, y in zip(a[m.name], b[m.name], strict=True))
            assert moved <= sensitivity(m, plan) * (1 + 1e-9), (plan.sql, m.label, moved)


def test_join_sensitivities_are_the_private_tables():
    """m = 2: a grouped COUNT is 2m, SUM(population) m·50, as without the join."""
    counts = {m.label: sensitivity(m, plan) for plan in PLANS[:2] for m in plan.measurements}
    assert counts["COUNT(*)"] == 4 and counts["SUM(regions.population)"] == 2 * 2 * 50


@pytest.fixture(scope="module")
def joined(people_db, tmp_path_factory):
    """The people data with `regions` beside it, each row an individual, and a connection."""
    root = tmp_path_factory.mktemp("joins")
    db = add_regions(Path(shutil.copy(people_db, root / "people.duckdb")))
    with duckdb.connect(str(db), read_only=True) as raw:
        exact = dict(raw.execute("SELECT r.region, COUNT(*) FROM people p JOIN regions r "
                                 "ON p.state = r.state GROUP BY r.region").fetchall())
    tables = copy.deepcopy(BASE_POLICY["tables"])
    del tables["people"]["privacy_unit"], tables["people"]["max_rows_per_unit"]
    policy = write_policy(root / "policy.yaml", with_regions(tables))
    conn = PrivateDatabase.connect(db, policy, create_ledger(root / "ledger.sqlite", policy))
    yield db, policy, conn, exact
    conn.close()


def test_answers_are_the_joined_counts_with_noise(joined):
    _, _, conn, exact = joined
    sql = ("SELECT regions.region, COUNT(*) AS n FROM people JOIN regions ON people.state = "
           "regions.state GROUP BY regions.region")
    left = sql.replace(" JOIN", " LEFT JOIN")
    answer = conn.query(sql, epsilon=100.0).df  # scale 0.02: within 1 with probability ~1
    assert list(answer["region"]) == ["East", "South", "West"]
    for region, n in zip(answer["region"], answer["n"], strict=True):
        assert abs(n - exact[region]) < 1
    # LEFT JOIN keeps the rows whose state has no region (ZZ, NULL): not in any region group.
    assert list(conn.query(left, epsilon=100.0).df["region"]) == ["East", "South", "West"]


def test_explain_reads_the_private_join_column_and_no_public_column(joined):
    _, _, conn, _ = joined
    ex = conn.explain("SELECT region, SUM(population) FROM people JOIN regions ON people.state = "
                      "regions.state WHERE age > 30 GROUP BY region", epsilon=1.0)
    assert ex.columns_read == ("people.age", "people.state")
    assert ex.group_by == ("regions.region",)
    assert 'JOIN regions AS "__public" ON "__private"."state" = "__public"."state"' in ex.rewritten_sql


def test_a_repeated_key_is_refused_when_the_data_is_opened(people_db, tmp_path):
    """Before any query, whoever opens the data learns only that the public key repeats."""
    db = add_regions(Path(shutil.copy(people_db, tmp_path / "people.duckdb")),
                     REGIONS + [("CA", "East", 1)])
    policy = write_policy(tmp_path / "policy.yaml", with_regions())
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with pytest.raises(PolicyError) as info:
        PrivateDatabase.connect(db, policy, ledger)
    assert "tables.regions.key: state is not unique in the data (1 value(s) repeat)" in str(info.value)
    assert info.value.repeated == 1


def test_null_keys_may_repeat_and_join_nothing(people_db, tmp_path):
    db = add_regions(Path(shutil.copy(people_db, tmp_path / "people.duckdb")),
                     REGIONS + [(None, "East", 1), (None, "West", 2)])
    policy = write_policy(tmp_path / "policy.yaml", with_regions())
    with PrivateDatabase.connect(db, policy, create_ledger(tmp_path / "ledger.sqlite", policy)) as conn:
        conn.query("SELECT COUNT(*) FROM people JOIN regions ON people.state = regions.state", epsilon=1.0)


def test_a_missing_public_table_or_column_is_named(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", with_regions())
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with pytest.raises(PolicyError, match="tables.regions: no such table in the data"):
        PrivateDatabase.connect(people_db, policy, ledger)


@pytest.mark.parametrize("change, message", [
    ({"key": "nosuch"}, "tables.regions.key: expected one of its columns (population, region, state)"),
    ({"public": "yes"}, "tables.regions.public: expected true or false, got 'yes'"),
    ({"privacy_unit": "state"}, "tables.regions.privacy_unit: unknown field (allowed: columns, key, public)"),
])
def test_bad_public_table_declarations_are_named(change, message):
    policy = {**BASE_POLICY, **with_regions()}
    policy["tables"]["regions"].update(change)
    with pytest.raises(PolicyError) as info:
        parse_policy(policy)
    assert message in str(info.value)


def test_a_policy_needs_a_private_table():
    with pytest.raises(PolicyError, match="expected at least one private table"):
        parse_policy({**BASE_POLICY, "tables": {"regions": with_regions()["tables"]["regions"]}})


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM regions", "table regions is public: it is not answered on its own"),
    ("SELECT COUNT(*) FROM people JOIN regions ON people.state = regions.region",
     "JOIN refused: regions.region is not the table's declared unique key"),
    ("SELECT COUNT(*) FROM people JOIN people AS q ON people.state = q.state",
     "JOIN refused: people is private"),
    ("SELECT COUNT(*) FROM people, regions", "JOIN refused: a join without ON"),
])
def test_other_joins_are_refused_naming_what_is_accepted(joined, sql, fragment):
    _, _, conn, _ = joined
    with pytest.raises(QueryRefused) as info:
        conn.explain(sql, epsilon=1.0)
    assert fragment in str(info.value)


def test_the_cli_answers_a_join(joined, capsys, tmp_path):
    db, policy, _, _ = joined
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    code, out, err = run_cli(capsys, "query", "--db", str(db), "--policy", str(policy), "--ledger",
                             str(ledger), "--epsilon", "1", "--", "SELECT region, COUNT(*) FROM people "
                             "JOIN regions ON people.state = regions.state GROUP BY region")
    assert code == 0, err
    assert "West" in out


def test_spark_refuses_a_join_with_a_clear_message(spark, joined):
    _, policy, _, _ = joined
    from engine.backends.spark import SparkBackend
    from engine.policy import load_policy

    people = spark.createDataFrame([(1, "CA", 30, 1.0, True, "x")],
                                   "person_id long, state string, age long, income double, "
                                   "sick boolean, note string")
    backend = SparkBackend.open(spark, {"people": people}, load_policy(policy))
    plan = PLANS[0]
    with pytest.raises(QueryRefused, match="JOIN with public table regions refused on Spark"):
        backend.render(rewrite(plan))


def test_a_repeated_key_would_break_the_bound_which_is_why_opening_refuses_it():
    """With CA listed twice, one unit's two CA rows count four times in an ungrouped COUNT whose
    sensitivity is m = 2: the uniqueness checked when the data is opened is what the bound needs."""
    regions = REGIONS + [("CA", "West", 39)]
    plan = PLANS[2]
    count = next(m for m in plan.measurements if m.label.startswith("COUNT"))
    before, after = _exact({}, regions)[2], _exact({9: [("CA", 30, 10.0, True)] * 2}, regions)[2]
    assert after[count.name][0] - before[count.name][0] == 4 > sensitivity(count, plan)


def test_the_schema_shown_to_analysts_lists_public_tables_and_their_keys():
    from engine.service.schema import public_schema

    schema = public_schema(POLICY)
    assert schema["public_tables"]["regions"]["key"] == "state"
    assert schema["public_tables"]["regions"]["columns"]["region"]["domain"] == ["East", "South", "West"]
    assert "regions" not in schema["tables"] and "joined to one public table on its key" in schema["sql"]


@pytest.mark.parametrize("where, group, keys", [
    ("region = 'West'", "region", ("West",)),
    ("regions.region IN ('East', 'South')", "regions.region", ("East", "South")),
    ("people.state = 'CA'", "people.state", ("CA",)),
    # The public key is another column than the private one of the same name: no pruning.
    ("regions.state = 'CA'", "people.state", ("CA", "NY", "TX", "WA")),
])
def test_a_where_on_a_grouped_column_prunes_its_keys_by_the_column_it_names(where, group, keys):
    sql = (f"SELECT {group}, COUNT(*) FROM people JOIN regions ON people.state = regions.state "
           f"WHERE {where} GROUP BY {group}")
    (key,) = build_plan(parse_select(sql), POLICY, sql).group_by
    assert key.keys == keys
