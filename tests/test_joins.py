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
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.backends.duckdb_execute import run
from dpsql.engine.errors import PolicyError
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support import (
    BASE_POLICY,
    HOUSEHOLDS,
    REGIONS,
    VISITS_TABLE,
    add_households,
    add_regions,
    add_visits,
    bound_plans,
    create_ledger,
    run_cli,
    with_households,
    with_regions,
    with_visits,
    write_policy,
)
from tests.test_sensitivity import row, unit_rows

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
    bound_plans(conn, PLANS)
    answers = [run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values for plan in PLANS]
    conn.close()
    return answers


def _join_moves_within(others, before, after) -> None:
    for plan, a, b in zip(PLANS, _exact({**others, 9: before}), _exact({**others, 9: after}), strict=True):
        for m in plan.measurements:
            moved = sum(abs(float(x) - float(y)) for x, y in zip(a[m.name], b[m.name], strict=True))
            assert moved <= sensitivity(m, plan) * (1 + 1e-9), (plan.sql, m.label, moved)


JOIN_CHANGES = {"others": st.dictionaries(st.integers(0, 6), unit_rows, max_size=5),
                "before": unit_rows, "after": unit_rows}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**JOIN_CHANGES)
@example(others={}, before=[("CA", 150, 2000.0, True)] * 3, after=[("NY", -20, -200.0, False)] * 3)
@example(others={1: [("TX", 5, 1.0, True)]}, before=[], after=[("WA", 150, 2000.0, True)] * 4)
def test_one_unit_moves_each_aggregate_of_a_join_within_its_sensitivity(others, before, after):
    """The sensitivity test of docs/theory.md §8 over join queries: unit 9's rows change, the
    public table stays; each exact aggregate moves (L1 over groups) by at most its sensitivity,
    the private table's alone (20 random tables and two worst cases; the slow variant runs 200)."""
    _join_moves_within(others, before, after)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**JOIN_CHANGES)
def test_one_unit_moves_each_aggregate_of_a_join_within_its_sensitivity_slow(others, before, after):
    _join_moves_within(others, before, after)


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
    assert 'JOIN regions AS "__other" ON "__private"."state" = "__other"."state"' in ex.rewritten_sql


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
    """Repeated NULL keys open and join no row: the exact aggregates the engine computes are
    those of the same regions without them (and the query is answered)."""
    sql = "SELECT region, COUNT(*) FROM people JOIN regions ON people.state = regions.state GROUP BY region"
    policy = write_policy(tmp_path / "policy.yaml", with_regions())
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)  # one key: the same rows kept
    exact = []
    for name, rows in (("with", REGIONS + [(None, "East", 1), (None, "West", 2)]), ("without", REGIONS)):
        db = add_regions(Path(shutil.copy(people_db, tmp_path / f"{name}.duckdb")), rows)
        with PrivateDatabase.connect(db, policy, ledger, reuse=False) as conn:
            conn.query(sql, epsilon=1.0)
            exact.append(conn._backend.run(conn.explain(sql, epsilon=1.0).rewritten_sql, 1))
    assert exact[0] == exact[1]
    assert sum(exact[0].values[next(iter(exact[0].values))]) > 0


def test_a_missing_public_table_or_column_is_named(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", with_regions())
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with pytest.raises(PolicyError, match="tables.regions: no such table in the data"):
        PrivateDatabase.connect(people_db, policy, ledger)


@pytest.mark.parametrize("change, message", [
    ({"key": "nosuch"}, "tables.regions.key: expected one of its columns (population, region, state)"),
    ({"public": "yes"}, "tables.regions.public: expected true or false, got 'yes'"),
    ({"privacy_unit": "state"}, "tables.regions.privacy_unit: unknown field (allowed: columns, data, key, "
                                "public)"),
    ({"data": "regions.txt"}, "tables.regions.data: expected the path of a CSV or Parquet file"),
    ({"data": 3}, "tables.regions.data: expected the path of a CSV or Parquet file"),
])
def test_bad_public_table_declarations_are_named(change, message):
    policy = {**BASE_POLICY, **with_regions()}
    policy["tables"]["regions"].update(change)
    with pytest.raises(PolicyError) as info:
        parse_policy(policy)
    assert message in str(info.value)


def _files(people_db: Path, root: Path, regions: list[tuple], suffix: str) -> tuple[Path, Path]:
    """The people table as a CSV, and `regions` in its own CSV or Parquet file."""
    with duckdb.connect(str(people_db), read_only=True) as raw:
        raw.execute(f"COPY people TO '{root / 'people.csv'}' (HEADER)")
    lookup = root / f"regions{suffix}"
    with duckdb.connect() as conn:
        conn.execute("CREATE TABLE regions (state VARCHAR, region VARCHAR, population VARCHAR)")
        conn.executemany("INSERT INTO regions VALUES (?, ?, ?)", regions)
        if suffix == ".parquet":  # a typed file: the population as a number
            conn.execute(f"COPY (SELECT state, region, CAST(population AS BIGINT) AS population "
                         f"FROM regions) TO '{lookup}' (FORMAT parquet)")
        else:
            conn.execute(f"COPY regions TO '{lookup}' (HEADER)")
    return root / "people.csv", lookup


def _row_level_with_data(data: str) -> dict:
    tables = copy.deepcopy(BASE_POLICY["tables"])
    del tables["people"]["privacy_unit"], tables["people"]["max_rows_per_unit"]
    section = with_regions(tables)
    section["tables"]["regions"]["data"] = data
    return section


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_public_table_may_live_in_its_own_file_beside_csv_data(people_db, tmp_path, suffix):
    """Private data in a CSV file has no DuckDB file to hold the lookup: `data:` names the public
    table's own file, relative to the policy's folder, and the join answers as from one file."""
    people, _ = _files(people_db, tmp_path, [(s, r, str(p)) for s, r, p in REGIONS], suffix)
    with duckdb.connect() as raw:
        exact = dict(raw.execute(
            f"SELECT r.region, COUNT(*) FROM read_csv_auto('{people}') p JOIN "
            f"(SELECT * FROM (VALUES {', '.join(str(r) for r in REGIONS)}) t(state, region, pop)) r "
            "ON p.state = r.state GROUP BY r.region").fetchall())
    policy = write_policy(tmp_path / "policy.yaml", _row_level_with_data(f"regions{suffix}"))
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    with PrivateDatabase.connect(people, policy, create_ledger(elsewhere / "l.sqlite", policy)) as conn:
        answer = conn.query("SELECT region, COUNT(*) AS n, SUM(population) AS p FROM people JOIN "
                            "regions ON people.state = regions.state GROUP BY region",
                            epsilon=100.0).df
    assert list(answer["region"]) == ["East", "South", "West"]
    for region, n in zip(answer["region"], answer["n"], strict=True):
        assert abs(n - exact[region]) < 1  # scale 0.02: within 1 with probability ~1


@pytest.mark.parametrize("regions, data, message", [
    (REGIONS, "nosuch.csv", "tables.regions.data: file not found: "),
    (REGIONS + [("CA", "East", 1)], "regions.csv",
     "tables.regions.key: state is not unique in the data (1 value(s) repeat)"),
    (REGIONS + [("OR", "West", "many")], "regions.csv", "tables.regions.data: cannot load "),
])
def test_a_public_data_file_that_cannot_serve_is_named_when_the_data_is_opened(
        people_db, tmp_path, regions, data, message):
    people, _ = _files(people_db, tmp_path, [(s, r, str(p)) for s, r, p in regions], ".csv")
    policy = write_policy(tmp_path / "policy.yaml", _row_level_with_data(data))
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with pytest.raises(PolicyError) as info:
        PrivateDatabase.connect(people, policy, ledger)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_public_data_file_may_not_shadow_a_table_of_the_data(people_db, tmp_path):
    db = add_regions(Path(shutil.copy(people_db, tmp_path / "people.duckdb")))
    _files(people_db, tmp_path, [(s, r, str(p)) for s, r, p in REGIONS], ".csv")
    policy = write_policy(tmp_path / "policy.yaml", _row_level_with_data("regions.csv"))
    with pytest.raises(PolicyError, match="tables.regions.data: the data already holds a table "
                                          "regions; remove data: from the policy or the table"):
        PrivateDatabase.connect(db, policy, create_ledger(tmp_path / "l.sqlite", policy))


def test_a_policy_needs_a_private_table():
    with pytest.raises(PolicyError, match="expected at least one private table"):
        parse_policy({**BASE_POLICY, "tables": {"regions": with_regions()["tables"]["regions"]}})


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM regions", "table regions is public: it is not answered on its own"),
    ("SELECT COUNT(*) FROM people JOIN regions ON people.state = regions.region",
     "JOIN refused: regions.region is not the table's declared unique key"),
    ("SELECT COUNT(*) FROM people JOIN people AS q ON people.state = q.state",
     "JOIN refused: people joined to itself"),
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


def test_a_repeated_key_would_break_the_bound_which_is_why_opening_refuses_it():
    """With CA listed twice, one unit's two CA rows count four times in an ungrouped COUNT whose
    sensitivity is m = 2: the uniqueness checked when the data is opened is what the bound needs."""
    regions = REGIONS + [("CA", "West", 39)]
    plan = PLANS[2]
    count = next(m for m in plan.measurements if m.label.startswith("COUNT"))
    before, after = _exact({}, regions)[2], _exact({9: [("CA", 30, 10.0, True)] * 2}, regions)[2]
    assert after[count.name][0] - before[count.name][0] == 4 > sensitivity(count, plan)


def test_the_schema_shown_to_analysts_lists_public_tables_and_their_keys():
    from dpsql.engine.service.schema import public_schema

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


# Parent tables (docs/theory.md §16): people reference households by household_id; the query
# reads one household row per key, so a key repeated in the data never multiplies a person's rows.
PARENTS = parse_policy({**BASE_POLICY, **with_households()})
PARENT_QUERIES = [
    "SELECT households.area, COUNT(*), SUM(rooms), COUNT(DISTINCT person_id) FROM people "
    "JOIN households ON people.household_id = households.household_id GROUP BY households.area",
    "SELECT h.area, COUNT(*), AVG(age), SUM(h.rooms) FROM people AS p LEFT JOIN households AS h "
    "ON p.household_id = h.household_id GROUP BY h.area",
    "SELECT SUM(rooms * 2 - age), COUNT(*) FILTER (WHERE area = 'West'), COUNT(rooms) FROM people "
    "JOIN households ON people.household_id = households.household_id WHERE people.age > 10",
    "WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT area, sick, COUNT(*), MAX(rooms) "
    "FROM adults LEFT JOIN households ON adults.household_id = households.household_id "
    "GROUP BY area, sick",
]
PARENT_PLANS = [build_plan(flatten(parse_select(q), PARENTS), PARENTS, q) for q in PARENT_QUERIES]
household_row = st.tuples(st.sampled_from([0, 1, 2, None]), st.sampled_from(["East", "West", None]),
                          st.one_of(st.none(), st.integers(-5, 20)))
person_row = st.tuples(st.sampled_from([0, 1, 2, 3, None]), row)


def _exact_parent(people: dict[int, list[tuple]], households: list[tuple]) -> list[dict[str, list]]:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, income DOUBLE, "
                 "sick BOOLEAN, note VARCHAR, household_id BIGINT)")
    conn.execute("CREATE TABLE households (household_id BIGINT, area VARCHAR, rooms BIGINT)")
    if households:
        conn.executemany("INSERT INTO households VALUES (?, ?, ?)", households)
    records = [(unit, *r, "x", hh) for unit, rows in people.items() for hh, r in rows]
    if records:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?, ?)", records)
    bound_plans(conn, PARENT_PLANS)
    answers = [run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values
               for plan in PARENT_PLANS]
    conn.close()
    return answers


def _parent_moves_within(others, households, before, after) -> None:
    for plan, a, b in zip(PARENT_PLANS, _exact_parent({**others, 9: before}, households),
                          _exact_parent({**others, 9: after}, households), strict=True):
        for m in plan.measurements:
            moved = sum(abs(float(x) - float(y)) for cell in m.cells
                        for x, y in zip(a[cell], b[cell], strict=True))
            assert moved <= sensitivity(m, plan) * (1 + 1e-9), (plan.sql, m.label, moved)


PARENT_CHANGES = {"others": st.dictionaries(st.integers(0, 6), st.lists(person_row, max_size=4), max_size=5),
                  "households": st.lists(household_row, max_size=6),
                  "before": st.lists(person_row, max_size=5), "after": st.lists(person_row, max_size=5)}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PARENT_CHANGES)
@example(others={}, households=[(1, "West", 20), (1, "East", 20), (1, None, None)],
         before=[(1, ("CA", 150, 2000.0, True))] * 3, after=[(None, ("NY", -20, -200.0, False))] * 3)
def test_one_unit_moves_each_aggregate_of_a_parent_join_within_its_sensitivity(
        others, households, before, after):
    """The sensitivity test of §8 over parent joins: person 9's rows change, the households stay
    (keys repeated, NULL or matching no person among them); each exact aggregate moves (L1 over
    groups) by at most the person table's sensitivity, with the parent columns' bounds (20 random
    tables and a worst case; the slow variant runs 200)."""
    _parent_moves_within(others, households, before, after)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PARENT_CHANGES)
def test_one_unit_moves_each_aggregate_of_a_parent_join_within_its_sensitivity_slow(
        others, households, before, after):
    _parent_moves_within(others, households, before, after)


def test_parent_join_sensitivities_are_the_person_tables():
    """m = 2: a grouped COUNT is 2m, SUM(rooms) with rooms in [0, 10] is 2m·10 grouped."""
    found = {m.label: sensitivity(m, PARENT_PLANS[0]) for m in PARENT_PLANS[0].measurements}
    assert found["COUNT(*)"] == 4 and found["SUM(households.rooms)"] == 2 * 2 * 10
    assert found["COUNT(DISTINCT unit)"] == 4


def test_a_repeated_parent_key_joins_each_person_row_once():
    """Household 1 is listed three times: each person row still joins one of its rows, which
    one is a function of household 1's rows alone (and the same whoever else is present)."""
    households = [(1, "West", 3), (1, "East", 9), (1, "West", None), (2, "East", 4)]
    people = {9: [(1, ("CA", 30, 10.0, True))] * 2}
    count = PARENT_PLANS[2].measurements[2]  # COUNT(rooms) over the inner join, ungrouped
    alone = _exact_parent(people, households)
    assert alone[0][PARENT_PLANS[0].measurements[0].name] in ([0, 2], [2, 0])
    with_others = _exact_parent({**people, 3: [(2, ("NY", 40, 1.0, False))]},
                                households + [(3, "West", 1)])
    assert alone[0][PARENT_PLANS[0].measurements[1].name] == \
        [a - b for a, b in zip(with_others[0][PARENT_PLANS[0].measurements[1].name],
                               _exact_parent({3: [(2, ("NY", 40, 1.0, False))]},
                                             households + [(3, "West", 1)])[0][
                                   PARENT_PLANS[0].measurements[1].name], strict=True)]
    assert alone[2][count.name][0] in (0, 2)


@pytest.fixture(scope="module")
def parented(people_db, tmp_path_factory):
    """The people data with household_id, the private `households` beside it (one key repeated,
    one NULL key, people without a household) and a connection."""
    root = tmp_path_factory.mktemp("parents")
    db = add_households(Path(shutil.copy(people_db, root / "people.duckdb")))
    policy = write_policy(root / "policy.yaml", with_households())
    conn = PrivateDatabase.connect(db, policy, create_ledger(root / "ledger.sqlite", policy))
    yield db, policy, conn
    conn.close()


def test_a_parent_join_answers_with_eta_1_and_reads_the_parent_columns(parented):
    _, _, conn = parented
    sql = ("SELECT households.area, COUNT(*) AS n, SUM(rooms) FROM people JOIN households ON "
           "people.household_id = households.household_id GROUP BY households.area")
    ex = conn.explain(sql, epsilon=1.0)
    assert {"households.area", "households.household_id", "households.rooms"} <= set(ex.columns_read)
    assert 'JOIN dpsql_bounded.main."households" AS "__other"' in ex.rewritten_sql
    answer = conn.query(sql, epsilon=1.0)
    assert list(answer.df["area"]) == ["East", "West"]
    assert answer.eta == 1.0 and answer.eta_from.startswith("1: a parent table's columns")
    assert answer.aggregates[0].sensitivity == 4 and answer.ci95 is not None


def test_queries_on_the_person_table_alone_keep_the_policy_eta(parented):
    _, _, conn = parented
    assert conn.query("SELECT COUNT(*) FROM people", epsilon=1.0).eta == 0.0


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM households", "table households is a parent table: its rows are shared"),
    ("SELECT COUNT(*) FROM people JOIN households ON people.age = households.household_id",
     "JOIN refused: people.age is not the foreign key of parent table households; join ON "
     "people.household_id = households.household_id"),
    ("SELECT COUNT(*) FROM people JOIN households ON people.household_id = households.rooms",
     "JOIN refused: households.rooms is not the table's declared key"),
    ("SELECT COUNT(*) FROM people RIGHT JOIN households ON people.household_id = households.household_id",
     "JOIN refused: RIGHT JOIN is not supported"),
    ("WITH h AS (SELECT * FROM households) SELECT COUNT(*) FROM people JOIN h "
     "ON people.household_id = h.household_id", "parent table households refused in CTE h"),
    ("SELECT COUNT(*) FROM people JOIN households AS people ON people.household_id = "
     "people.household_id", "JOIN refused: people names both tables"),
])
def test_other_parent_forms_are_refused_naming_what_is_accepted(parented, sql, fragment):
    _, _, conn = parented
    with pytest.raises(QueryRefused) as info:
        conn.explain(sql, epsilon=1.0)
    assert fragment in str(info.value)


@pytest.mark.parametrize("change, message", [
    ({"parent_of": {"table": "regions", "foreign_key": "state"}},
     "tables.households.parent_of.table: expected a private table of the policy (people), got "
     "unknown table 'regions'"),
    ({"parent_of": {"table": "people", "foreign_key": "nosuch"}},
     "tables.households.parent_of.foreign_key: expected a policy column of people"),
    ({"parent_of": {"table": "people"}}, "tables.households.parent_of.foreign_key: required field"),
    ({"parent_of": "people"}, "tables.households.parent_of: expected a mapping, got str"),
    ({"key": "rooms"}, "tables.households.key: rooms is int but people.household_id is int"),
    ({"key": "area"}, "tables.households.key: area is str but people.household_id is int"),
    ({"privacy_unit": "household_id"},
     "tables.households.privacy_unit: unknown field (allowed: columns, key, parent_of)"),
])
def test_bad_parent_declarations_are_named(change, message):
    policy = {**BASE_POLICY, **with_households()}
    policy["tables"]["households"].update(change)
    if message.startswith("tables.households.key: rooms"):
        parse_policy(policy)  # an int key of an int foreign key is a valid declaration
        return
    with pytest.raises(PolicyError) as info:
        parse_policy(policy)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_model_on_a_parent_table_is_refused():
    policy = {**BASE_POLICY, **with_households(),
              "dependence": {"k": 2, "eta": 1.0, "models": [
                  {"kind": "household", "table": "households", "column": "area", "sizes": {2: 1.0},
                   "marginal": [0.5, 0.5], "rho": 0.1}]}}
    with pytest.raises(PolicyError, match="dependence.models\\[0\\].table: households is a parent "
                                          "table"):
        parse_policy(policy)


def test_an_eta_declared_for_a_set_of_parent_columns_applies(parented, tmp_path):
    db, _, _ = parented
    changes = {**with_households(), "dependence": {"k": 2, "eta": 0.1, "eta_by_columns": [
        {"columns": ["households.area", "households.rooms", "households.household_id", "age",
                     "income", "state", "sick", "note", "people.household_id"], "eta": 0.5}]}}
    policy = write_policy(tmp_path / "policy.yaml", changes)
    with PrivateDatabase.connect(db, policy, create_ledger(tmp_path / "l.sqlite", policy)) as conn:
        ex = conn.explain("SELECT COUNT(*) FROM people JOIN households ON people.household_id = "
                          "households.household_id", epsilon=1.0)
        assert ex.eta == 0.5
        assert conn.explain("SELECT COUNT(*) FROM people", epsilon=1.0).eta == 0.1


def test_a_stored_binding_accounts_parent_columns_at_eta_1(tmp_path):
    """An accountant built from the ledger's binding (a later connection, a report) prices a
    transcript that read a parent column at eta 1, not the policy's default."""
    from dpsql.engine.accounting.ledger import Ledger
    from dpsql.engine.accounting.ledger_binding import binding_of

    policy = parse_policy({**BASE_POLICY, **with_households(),
                           "dependence": {"k": 3, "eta": 0.1}})
    ledger = Ledger(tmp_path / "l.sqlite", binding_of(policy), create=True)
    stored = ledger._stored_binding()
    ledger.close()
    assert stored.shared == policy.shared_columns == frozenset(
        {"households.area", "households.household_id", "households.rooms"})
    accountant = stored.accountant()
    assert accountant.scope(frozenset({"households.area", "people.age"})).eta == 1.0
    assert accountant.scope(frozenset({"people.age"})).eta == 0.1
    assert accountant.scope(None).eta == 1.0


def test_a_ledger_refuses_a_policy_that_drops_a_parent_and_accepts_one_that_adds_it(tmp_path):
    """Dropping a parent table would account the household columns already read at the default
    eta, below 1: more lenient, refused. Adding one only raises an eta: recorded."""
    from dpsql.engine.accounting.ledger import Ledger
    from dpsql.engine.accounting.ledger_binding import binding_of
    from dpsql.engine.errors import LedgerError

    tables = with_households()["tables"]
    plain = parse_policy({**BASE_POLICY, "tables": {"people": tables["people"]}})
    parented = parse_policy({**BASE_POLICY, "tables": tables})
    Ledger(tmp_path / "l.sqlite", binding_of(plain), create=True).close()
    book = Ledger(tmp_path / "l.sqlite", binding_of(parented))
    assert book._stored_binding().shared == parented.shared_columns
    book.close()
    with pytest.raises(LedgerError, match="this policy is more lenient \\(parents"):
        Ledger(tmp_path / "l.sqlite", binding_of(plain))


def test_a_ledger_without_a_parents_record_opens(tmp_path):
    """Ledgers written before parent tables hold no `parents` key: they open, with none."""
    import sqlite3

    from dpsql.engine.accounting.ledger import Ledger
    from dpsql.engine.accounting.ledger_binding import binding_of

    policy = parse_policy(BASE_POLICY)
    Ledger(tmp_path / "l.sqlite", binding_of(policy), create=True).close()
    with sqlite3.connect(tmp_path / "l.sqlite") as raw:
        assert raw.execute("SELECT COUNT(*) FROM meta WHERE key = 'parents'").fetchone() == (0,)
    book = Ledger(tmp_path / "l.sqlite", binding_of(policy))
    assert book._stored_binding().shared == frozenset()
    book.close()


def test_the_cli_answers_and_explains_a_parent_join(parented, capsys, tmp_path):
    db, policy, _ = parented
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    sql = ("SELECT area, COUNT(*) FROM people JOIN households ON people.household_id = "
           "households.household_id GROUP BY area")
    paths = ["--db", str(db), "--policy", str(policy), "--ledger", str(ledger)]
    code, out, err = run_cli(capsys, "explain", *paths, "--epsilon", "1", "--", sql)
    assert code == 0 and "households.area" in out, err
    code, out, err = run_cli(capsys, "query", *paths, "--epsilon", "1", "--", sql)
    assert code == 0 and "West" in out, err


def test_the_schema_shown_to_analysts_lists_parent_tables():
    from dpsql.engine.service.schema import public_schema

    schema = public_schema(PARENTS)
    assert schema["parent_tables"]["households"] == {
        "key": "household_id", "child": "people", "foreign_key": "household_id",
        "columns": public_schema(PARENTS)["parent_tables"]["households"]["columns"]}
    assert "households" not in schema["tables"] and "parent table" in schema["sql"]
    assert HOUSEHOLDS[1][0] == HOUSEHOLDS[2][0]  # the test data repeats a key


def test_parent_joins_on_adversarial_data_always_answer(people_db, tmp_path):
    """Households whose keys repeat with conflicting rows, a NULL key, extreme and NULL room
    counts and areas outside the domain; people whose household_id is NULL, negative, extreme or
    matches no household: every accepted parent join answers, none fails on the data."""
    db = Path(shutil.copy(people_db, tmp_path / "people.duckdb"))
    extreme = 2 ** 63 - 1
    add_households(db, [(0, "East", extreme), (0, "West", -extreme - 1), (0, "ZZ", None),
                        (1, "", 3), (None, "East", extreme), (extreme, "West", 1),
                        (-extreme - 1, "East", 2)])
    with duckdb.connect(str(db)) as raw:
        raw.execute(f"UPDATE people SET household_id = CASE person_id % 5 WHEN 0 THEN NULL WHEN 1 "
                    f"THEN {extreme} WHEN 2 THEN {-extreme - 1} WHEN 3 THEN 0 ELSE 99 END")
    policy = write_policy(tmp_path / "policy.yaml", with_households())
    queries = [*PARENT_QUERIES,
               "SELECT area, MEDIAN(rooms), VAR_POP(rooms), MIN(rooms * age) FROM people LEFT JOIN "
               "households ON people.household_id = households.household_id GROUP BY area",
               "SELECT COUNT(*), SUM(rooms) FROM people JOIN households ON households.household_id "
               "= people.household_id WHERE rooms IS NULL OR area NOT IN ('East', 'West')"]
    with PrivateDatabase.connect(db, policy, create_ledger(tmp_path / "l.sqlite", policy)) as conn:
        for sql in queries:
            assert len(conn.query(sql, epsilon=1.0).df) >= 1, sql


# Two private tables joined on their privacy unit (docs/theory.md §16): people (m1 = 2) and
# visits (m2 = 3), each bounded first, so a person has at most 6 joined rows.
UNITS = parse_policy({**BASE_POLICY, **with_visits()})
UNIT_QUERIES = [
    "SELECT visits.clinic, COUNT(*), SUM(days), COUNT(DISTINCT person_id), SUM(income) FROM people "
    "JOIN visits ON people.person_id = visits.person_id GROUP BY visits.clinic",
    "SELECT COUNT(*), SUM(days * age), AVG(income), COUNT(DISTINCT person_id), COUNT(days) FROM "
    "people LEFT JOIN visits AS v ON v.person_id = people.person_id WHERE urgent OR sick",
    "SELECT state, MEDIAN(days), MAX(age), VAR_POP(days) FROM people AS p JOIN visits AS v "
    "ON p.person_id = v.person_id GROUP BY state",
    "WITH adults AS (SELECT * FROM people WHERE age >= 18) SELECT urgent, COUNT(*), SUM(days), "
    "COUNT(DISTINCT adults.person_id) FROM adults JOIN visits ON adults.person_id = visits.person_id "
    "GROUP BY urgent",
]
UNIT_PLANS = [build_plan(flatten(parse_select(q), UNITS), UNITS, q) for q in UNIT_QUERIES]
visit_row = st.tuples(st.one_of(st.none(), st.integers(-5, 40)), st.one_of(st.none(), st.booleans()),
                      st.sampled_from(["north", "south", "east", None]))
person = st.tuples(unit_rows, st.lists(visit_row, max_size=5))


def _exact_units(people: dict[int | None, tuple[list, list]]) -> list[dict[str, list]]:
    """Exact measurements of every unit join; the None entry holds rows with a NULL unit."""
    conn = duckdb.connect()
    conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, income DOUBLE, "
                 "sick BOOLEAN, note VARCHAR)")
    conn.execute("CREATE TABLE visits (person_id BIGINT, days BIGINT, urgent BOOLEAN, clinic VARCHAR)")
    rows = [(unit, *r, "x") for unit, (mine, _) in people.items() for r in mine]
    visits = [(unit, *v) for unit, (_, theirs) in people.items() for v in theirs]
    if rows:
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", rows)
    if visits:
        conn.executemany("INSERT INTO visits VALUES (?, ?, ?, ?)", visits)
    bound_plans(conn, UNIT_PLANS)
    answers = [run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by)).values
               for plan in UNIT_PLANS]
    conn.close()
    return answers


def _unit_join_moves_within(others, before, after) -> None:
    for plan, a, b in zip(UNIT_PLANS, _exact_units({**others, 9: before}),
                          _exact_units({**others, 9: after}), strict=True):
        assert plan.rows_per_unit == 6
        for m in plan.measurements:
            moved = sum(abs(float(x) - float(y)) for cell in m.cells
                        for x, y in zip(a[cell], b[cell], strict=True))
            assert moved <= sensitivity(m, plan) * (1 + 1e-9), (plan.sql, m.label, moved)


UNIT_CHANGES = {"others": st.dictionaries(st.one_of(st.none(), st.integers(0, 6)), person, max_size=5),
                "before": person, "after": person}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**UNIT_CHANGES)
@example(others={}, before=([("CA", 150, 2000.0, True)] * 3, [(40, True, "north")] * 5),
         after=([("NY", -20, -200.0, False)] * 3, [(-5, False, "south")] * 5))
@example(others={None: ([("CA", 30, 5.0, True)], [(3, True, "north")])}, before=([], []),
         after=([("CA", 150, 2000.0, True)] * 4, [(40, True, "north")] * 4))
def test_one_unit_moves_each_aggregate_of_a_unit_join_within_its_sensitivity(others, before, after):
    """The sensitivity test of §8 over joins of two private tables on the unit: person 9's rows
    change in both tables (NULL-unit rows and other people stay); each exact aggregate moves
    (L1 over groups) by at most §8's sensitivity with m = m1 · m2 = 6 (15 random tables and two
    worst cases; the slow variant runs 200)."""
    _unit_join_moves_within(others, before, after)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**UNIT_CHANGES)
def test_one_unit_moves_each_aggregate_of_a_unit_join_within_its_sensitivity_slow(others, before, after):
    _unit_join_moves_within(others, before, after)


def test_a_unit_join_needs_m1_times_m2():
    """One person with 2 kept people rows and 3 kept visits has 6 joined rows: the ungrouped
    COUNT(*) moves by m1 · m2 = 6 when they appear, so m1 + m2 or max(m1, m2) would be wrong;
    COUNT(DISTINCT person_id) moves by 1."""
    plan = UNIT_PLANS[1]
    count = plan.measurements[0]
    distinct = next(m for m in plan.measurements if m.label == "COUNT(DISTINCT unit)")
    empty = _exact_units({})[1]
    full = _exact_units({9: ([("CA", 30, 1.0, True)] * 4, [(5, True, "north")] * 9)})[1]
    assert full[count.name][0] - empty[count.name][0] == 6 == sensitivity(count, plan)
    assert full[distinct.name][0] - empty[distinct.name][0] == 1 == sensitivity(distinct, plan)


@pytest.fixture(scope="module")
def visited(people_db, tmp_path_factory):
    """The people data with the private `visits` table beside it, and a connection."""
    root = tmp_path_factory.mktemp("units")
    db = add_visits(Path(shutil.copy(people_db, root / "people.duckdb")))
    policy = write_policy(root / "policy.yaml", with_visits())
    conn = PrivateDatabase.connect(db, policy, create_ledger(root / "ledger.sqlite", policy))
    yield db, policy, conn
    conn.close()


def test_a_unit_join_answers_reading_both_tables(visited):
    _, _, conn = visited
    sql = UNIT_QUERIES[0]
    ex = conn.explain(sql, epsilon=1.0)
    # people through the copy of the columns the query names (income), visits through its copy
    # of every column (docs/theory.md §28)
    assert set(ex.columns_read) == {"people.income"} | \
        {f"visits.{c}" for c in UNITS.tables["visits"].columns}
    assert ex.max_rows_per_unit == 6
    assert 'JOIN dpsql_bounded.main."visits" AS "__other" ON "__private"."person_id" = ' \
        '"__other"."person_id"' in ex.rewritten_sql
    answer = conn.query(sql, epsilon=1.0)
    assert list(answer.df["clinic"]) == ["north", "south"]
    assert [a.sensitivity for a in answer.aggregates] == [12, 2 * 6 * 30, 12, 2 * 6 * 1000]
    assert answer.ci95 is not None


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM people JOIN visits ON people.age = visits.days",
     "JOIN refused: two private tables join only on their privacy unit, each qualified by its "
     "table (join ON people.person_id = visits.person_id)"),
    ("SELECT COUNT(*) FROM people JOIN visits ON person_id = person_id",
     "two private tables join only on their privacy unit, each qualified"),
    ("SELECT COUNT(*) FROM people JOIN visits ON people.person_id = people.person_id",
     "JOIN refused: ON must compare the unit of people with that of visits"),
    ("SELECT COUNT(*) FROM people JOIN people AS q ON people.person_id = q.person_id",
     "JOIN refused: people joined to itself; a self-join is not supported"),
    ("SELECT COUNT(*) FROM people JOIN visits ON people.person_id = visits.person_id "
     "JOIN visits AS w ON people.person_id = w.person_id", "JOIN refused: visits is joined twice"),
    ("SELECT COUNT(DISTINCT visits.person_id) FROM people JOIN visits ON people.person_id = "
     "visits.person_id", "column visits.person_id is the privacy unit of visits: it may only appear as "
     "COUNT(DISTINCT people.person_id)"),
    ("SELECT COUNT(*) FROM people JOIN visits ON people.person_id = visits.person_id WHERE "
     "visits.person_id > 3", "column visits.person_id is the privacy unit of visits"),
    ("SELECT COUNT(*) FROM people FULL JOIN visits ON people.person_id = visits.person_id",
     "JOIN refused: FULL JOIN is not supported"),
    ("WITH v AS (SELECT * FROM visits) SELECT COUNT(*) FROM people JOIN v ON people.person_id = "
     "v.person_id", "JOIN refused: v is not a public table"),
])
def test_other_private_joins_are_refused_naming_what_is_accepted(visited, sql, fragment):
    _, _, conn = visited
    with pytest.raises(QueryRefused) as info:
        conn.explain(sql, epsilon=1.0)
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("visits, fragment", [
    ({k: v for k, v in VISITS_TABLE.items() if k not in ("privacy_unit", "max_rows_per_unit")},
     "JOIN refused: visits has no privacy unit"),
    ({**VISITS_TABLE, "privacy_unit": "patient_id"},
     "JOIN refused: people's privacy unit is person_id but visits's is patient_id"),
])
def test_private_tables_without_one_privacy_unit_are_not_joined(visits, fragment):
    tables = with_visits()["tables"] | {"visits": visits}
    policy = parse_policy({**BASE_POLICY, "tables": tables})
    sql = "SELECT COUNT(*) FROM people JOIN visits ON people.person_id = visits.person_id"
    with pytest.raises(QueryRefused, match=fragment.replace("(", "\\(")):
        build_plan(parse_select(sql), policy, sql)


def test_the_cli_answers_and_explains_a_unit_join(visited, capsys, tmp_path):
    db, policy, _ = visited
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    sql = ("SELECT clinic, COUNT(*), SUM(days) FROM people JOIN visits ON people.person_id = "
           "visits.person_id GROUP BY clinic")
    paths = ["--db", str(db), "--policy", str(policy), "--ledger", str(ledger)]
    code, out, err = run_cli(capsys, "explain", *paths, "--epsilon", "1", "--", sql)
    assert code == 0 and "at most 6 row(s) each" in out, err
    code, out, err = run_cli(capsys, "query", *paths, "--epsilon", "1", "--", sql)
    assert code == 0 and "north" in out, err


def test_units_of_two_data_types_are_refused_by_the_schema(people_db, tmp_path):
    """A text unit joined to an integer one would need a cast that fails on some values: the
    schema-only gate refuses the query, whatever the values are."""
    db = add_visits(Path(shutil.copy(people_db, tmp_path / "people.duckdb")))
    with duckdb.connect(str(db)) as raw:
        raw.execute("ALTER TABLE visits ALTER person_id TYPE VARCHAR")
    policy = write_policy(tmp_path / "policy.yaml", with_visits())
    with PrivateDatabase.connect(db, policy, create_ledger(tmp_path / "l.sqlite", policy)) as conn:
        with pytest.raises(QueryRefused, match="cast from VARCHAR to INTEGER refused: it could "
                                               "fail on some data value"):
            conn.explain(UNIT_QUERIES[0], epsilon=1.0)
