"""Column-scoped eta: a query is calibrated by the eta of the columns it reads, the transcript
is accounted with the eta of every column read so far (docs/theory.md §11)."""

from __future__ import annotations

import contextlib
import copy
import json
import sqlite3

import duckdb
import pytest
import sqlglot
import yaml
from dpsql.calibration import DependenceModel, calibrate, transcript_level
from dpsql.engine import BudgetExhausted, PrivateDatabase
from dpsql.engine.errors import DpsqlError, LedgerError, PolicyError
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.report.build import build_report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from tests import adversarial
from tests import test_differential_fuzz as differential
from tests.support import BASE_POLICY, create_ledger, make_people, run_cli, write_policy

K = 4
DEFAULT_ETA = 1.0
SICK_ETA = 0.3
SICK_AGE_ETA = 0.35

ROW_LEVEL = {
    "people": {
        "columns": copy.deepcopy(BASE_POLICY["tables"]["people"]["columns"]),
    },
}
SCOPED = {
    "k": K, "eta": DEFAULT_ETA, "mode": "auto",
    "eta_by_columns": [{"columns": ["sick"], "eta": SICK_ETA},
                       {"columns": ["sick", "age"], "eta": SICK_AGE_ETA}],
}


def _policy(dependence: dict | None = None, tables: dict | None = None,
            budget: float = 1000.0) -> dict:
    return {"budget": {"epsilon": budget}, "dependence": dependence or copy.deepcopy(SCOPED),
            "tables": tables or copy.deepcopy(ROW_LEVEL)}


@pytest.fixture
def scoped(tmp_path):
    """A row-level people table under a policy declaring eta for {sick} and {sick, age}."""
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml", _policy())
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    return db, policy, ledger


def _eps_dp(epsilon: float, eta: float) -> float:
    return calibrate(epsilon, DependenceModel(K, eta), "auto").epsilon_dp


@pytest.mark.parametrize(("sql", "eta", "columns"), [
    ("SELECT COUNT(*) AS n FROM people WHERE sick", SICK_ETA, ("people.sick",)),
    ("SELECT sick, COUNT(*) AS n FROM people GROUP BY sick", SICK_ETA, ("people.sick",)),
    ("SELECT COUNT(*) AS n FROM people WHERE sick AND age > 40", SICK_AGE_ETA,
     ("people.age", "people.sick")),
    ("SELECT SUM(age) AS s FROM people WHERE sick", SICK_AGE_ETA, ("people.age", "people.sick")),
    ("SELECT COUNT(*) AS n FROM people WHERE sick AND income > 100", DEFAULT_ETA,
     ("people.income", "people.sick")),
    ("SELECT state, COUNT(*) AS n FROM people GROUP BY state", DEFAULT_ETA, ("people.state",)),
    # Reading no column (only each individual's presence): every declared set contains it.
    ("SELECT COUNT(*) AS n FROM people", SICK_ETA, ()),
])
def test_a_query_is_calibrated_by_the_eta_of_the_columns_it_reads(scoped, sql, eta, columns):
    db, policy, ledger = scoped
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        plan = conn.explain(sql, epsilon=1.0)
        result = conn.query(sql, epsilon=1.0)
    for shown in (plan, result):
        assert shown.eta == eta and shown.columns_read == columns
        assert shown.epsilon_dp == pytest.approx(_eps_dp(1.0, eta), rel=1e-12)
    assert ("eta_by_columns" in result.eta_from) == (eta != DEFAULT_ETA)
    assert result.to_dict()["eta"] == eta and result.to_dict()["columns_read"] == list(columns)


def test_scoping_gives_less_noise_than_the_record_level_eta(scoped):
    db, policy, ledger = scoped
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        sick = conn.explain("SELECT COUNT(*) AS n FROM people WHERE sick", epsilon=1.0)
        state = conn.explain("SELECT COUNT(*) AS n FROM people WHERE state = 'CA'", epsilon=1.0)
    assert state.eta == DEFAULT_ETA and state.epsilon_dp == pytest.approx(1.0 / K)  # group privacy
    assert sick.aggregates[0].scale == pytest.approx(1.0 / _eps_dp(1.0, SICK_ETA), rel=1e-12)
    assert sick.aggregates[0].scale < 0.6 * state.aggregates[0].scale  # 2.35 against 4


def test_the_transcript_is_accounted_with_the_eta_of_every_column_read(scoped):
    db, policy, ledger = scoped
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        first = conn.query("SELECT COUNT(*) AS n FROM people WHERE sick", epsilon=0.5)
        assert first.budget.eta == SICK_ETA
        assert first.level_after == pytest.approx(
            transcript_level(first.epsilon_dp, DependenceModel(K, SICK_ETA), "auto"), rel=1e-12)
        second = conn.query("SELECT COUNT(*) AS n FROM people WHERE age > 50", epsilon=0.5)
        # {sick} then {age}: the union {sick, age} has its own declaration.
        spent = first.epsilon_dp + second.epsilon_dp
        assert second.budget.eta == SICK_AGE_ETA
        assert second.level_before == pytest.approx(first.level_after, rel=1e-12)
        assert second.level_after == pytest.approx(
            transcript_level(spent, DependenceModel(K, SICK_AGE_ETA), "auto"), rel=1e-12)
        third = conn.query("SELECT COUNT(*) AS n FROM people WHERE income > 10", epsilon=0.5)
        spent += third.epsilon_dp
        assert third.budget.eta == DEFAULT_ETA and conn.budget().eta == DEFAULT_ETA
        assert third.cost == pytest.approx(third.level_after - third.level_before)
        assert conn.budget().spent_ip == pytest.approx(
            transcript_level(spent, DependenceModel(K, DEFAULT_ETA), "auto"), rel=1e-12)
    report = build_report(ledger)
    assert report.totals.eta == DEFAULT_ETA
    assert list(report.entries["columns_read"]) == ["people.sick", "people.age", "people.income"]
    assert list(report.levels) == pytest.approx([first.level_after, second.level_after,
                                                 third.level_after], rel=1e-12)


def test_a_query_reading_a_new_column_is_admitted_against_the_union(tmp_path):
    """A query cheap under its own eta is refused when widening the transcript's columns makes
    the whole transcript exceed the budget, with the largest epsilon that query could ask."""
    db = make_people(tmp_path / "people.duckdb")
    policy = write_policy(tmp_path / "policy.yaml", _policy(budget=2.0))
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        conn.query("SELECT COUNT(*) AS n FROM people WHERE sick", epsilon=1.9)
        assert conn.budget().largest_epsilon > 0.05
        # income's eta is 1: the transcript {sick, income} is at group privacy, L(S) = K S.
        spent = conn.budget().spent_dp
        assert K * spent > 2.0
        explained = conn.explain("SELECT COUNT(*) AS n FROM people WHERE income > 1", epsilon=0.01)
        assert not explained.admissible and explained.transcript_eta == DEFAULT_ETA
        with pytest.raises(BudgetExhausted) as refused:
            conn.query("SELECT COUNT(*) AS n FROM people WHERE income > 1", epsilon=0.01)
        assert refused.value.largest_epsilon == 0.0
        # A query reading sick only is still admitted.
        conn.query("SELECT COUNT(*) AS n FROM people WHERE NOT sick", epsilon=0.01)
    with contextlib.closing(sqlite3.connect(ledger)) as raw:
        rows = raw.execute("SELECT columns, eta FROM charges ORDER BY id").fetchall()
    assert [(json.loads(c), e) for c, e in rows] == [(["people.sick"], SICK_ETA)] * 2


def test_a_table_with_a_privacy_unit_is_calibrated_by_the_columns_it_reads(tmp_path):
    """The bounded copy a query reads keeps each unit's rows by the rule over the columns it
    reads alone (docs/theory.md §28), so eta_by_columns applies to a table with a privacy unit:
    COUNT(*) WHERE sick under {sick: 0.3} gets eps_dp of eta 0.3, not group privacy's."""
    db = make_people(tmp_path / "people.duckdb")
    per_unit = copy.deepcopy(BASE_POLICY["tables"])
    dependence = {"k": K, "eta": DEFAULT_ETA, "mode": "auto",
                  "eta_by_columns": [{"columns": ["sick"], "eta": SICK_ETA}]}
    policy = write_policy(tmp_path / "policy.yaml", _policy(dependence, per_unit))
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        sick = conn.query("SELECT COUNT(*) AS n FROM people WHERE sick", epsilon=1.0)
        both = conn.explain("SELECT COUNT(*) AS n FROM people WHERE sick AND age > 30", epsilon=1.0)
    assert sick.columns_read == ("people.sick",) and sick.eta == SICK_ETA
    assert sick.epsilon_dp == pytest.approx(calibrate(1.0, DependenceModel(K, SICK_ETA), "auto").epsilon_dp)
    assert both.columns_read == ("people.age", "people.sick") and both.eta == DEFAULT_ETA
    assert both.epsilon_dp == pytest.approx(1.0 / K)  # eta 1: group privacy
    assert sick.epsilon_dp > 1.6 * both.epsilon_dp


def test_cli_explain_and_query_say_which_eta_applied_and_why(scoped, capsys):
    db, policy, ledger = scoped
    paths = ["--db", str(db), "--policy", str(policy), "--ledger", str(ledger)]
    sql = "SELECT COUNT(*) AS n FROM people WHERE sick"
    code, out, _ = run_cli(capsys, "explain", sql, "--epsilon", "1", *paths)
    assert code == 0 and "eta_by_columns {people.sick}" in out and "people.sick" in out
    code, out, _ = run_cli(capsys, "query", sql, "--epsilon", "1", "--format", "json", *paths)
    answer = json.loads(out)
    assert code == 0 and answer["eta"] == SICK_ETA
    assert answer["eta_from"] == "dependence.eta_by_columns {people.sick}"
    code, out, _ = run_cli(capsys, "report", "--ledger", str(ledger), "--format", "table")
    assert code == 0 and "people.sick" in out


@pytest.mark.parametrize(("declared", "message"), [
    ([{"columns": ["wealth"], "eta": 0.1}], "unknown column 'wealth'"),
    ([{"columns": ["sick"], "eta": 1.5}], "expected a number in [0, 1]"),
    ([{"columns": [], "eta": 0.1}], "non-empty list of column names"),
    ([{"columns": ["sick"], "eta": 0.1}, {"columns": ["SICK"], "eta": 0.2}], "declared twice"),
    ([{"columns": ["sick"]}], "eta: required field is missing"),
    ([{"columns": ["sick"], "eta": 0.1, "why": "x"}], "unknown field"),
    ({"sick": 0.1}, "expected a list"),
    ([{"columns": ["sick"], "eta": True}], "expected a finite number"),
])
def test_bad_declarations_are_refused_with_the_field_and_what_is_accepted(declared, message):
    with pytest.raises(PolicyError) as refused:
        parse_policy(_policy(dict(SCOPED, eta_by_columns=declared)))
    assert message in str(refused.value) and "dependence.eta_by_columns" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_declaration_above_the_default_eta_is_refused():
    with pytest.raises(PolicyError, match=r"in \[0, 0.2\]"):
        parse_policy(_policy(dict(SCOPED, eta=0.2)))


def test_columns_of_several_tables_must_be_qualified():
    tables = copy.deepcopy(ROW_LEVEL)
    tables["visits"] = {"columns": {"sick": {"type": "bool"}}}
    with pytest.raises(PolicyError, match="several tables; write one of people.sick, visits.sick"):
        parse_policy(_policy(tables=tables))
    qualified = dict(SCOPED, eta_by_columns=[{"columns": ["visits.sick"], "eta": 0.1}])
    assert parse_policy(_policy(qualified, tables)).eta_for(frozenset({"visits.sick"})).eta == 0.1


def test_a_ledger_refuses_a_policy_that_lowers_a_column_sets_eta(scoped, tmp_path):
    db, _, ledger = scoped
    looser = dict(SCOPED, eta_by_columns=[{"columns": ["sick"], "eta": 0.1}])
    with pytest.raises(LedgerError, match="eta_by_columns"):
        PrivateDatabase.connect(db, write_policy(tmp_path / "looser.yaml", _policy(looser)), ledger)
    # A declaration on a new, larger set at the old eta of one of its subsets also loosens:
    # {sick, income} was at the default 1.
    wider = dict(SCOPED, eta_by_columns=SCOPED["eta_by_columns"]
                 + [{"columns": ["sick", "income"], "eta": 0.4}])
    with pytest.raises(LedgerError, match="eta_by_columns"):
        PrivateDatabase.connect(db, write_policy(tmp_path / "wider.yaml", _policy(wider)), ledger)
    stricter = dict(SCOPED, eta_by_columns=[{"columns": ["sick"], "eta": 0.32}])
    with PrivateDatabase.connect(db, write_policy(tmp_path / "strict.yaml", _policy(stricter)),
                                 ledger) as conn:
        assert conn.explain("SELECT COUNT(*) AS n FROM people WHERE sick", epsilon=1).eta == 0.32


def test_a_connection_is_held_to_a_ledger_tightened_meanwhile(scoped, tmp_path):
    db, policy, ledger = scoped
    with PrivateDatabase.connect(db, policy, ledger) as old:
        stricter = dict(SCOPED, eta_by_columns=[{"columns": ["sick"], "eta": 0.6}])
        PrivateDatabase.connect(db, write_policy(tmp_path / "s.yaml", _policy(stricter)),
                                ledger).close()
        result = old.query("SELECT COUNT(*) AS n FROM people WHERE sick", epsilon=1.0)
    assert result.epsilon_dp == pytest.approx(_eps_dp(1.0, 0.6), rel=1e-12)


def test_answers_charged_before_columns_were_recorded_count_as_reading_every_column(scoped):
    db, policy, ledger = scoped
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        conn.query("SELECT COUNT(*) AS n FROM people WHERE sick", epsilon=0.5)
    with contextlib.closing(sqlite3.connect(ledger)) as raw:
        # As a ledger written before columns were recorded (and before its charges were chained).
        raw.execute("UPDATE charges SET columns = NULL")
        raw.execute("DROP TABLE links")
        raw.commit()
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        assert conn.budget().eta == DEFAULT_ETA
    assert build_report(ledger).entries["columns_read"][0].startswith("(every column")


@pytest.fixture(scope="module")
def row_level_fuzz_db(tmp_path_factory):
    """The fuzzer's schema with each row an individual, so the columns read are the query's own,
    a public lookup table `levels` keyed by the level's code and a parent table `tiers` that
    people reference by their level (its key repeated in the data)."""
    root = tmp_path_factory.mktemp("scoped_fuzz")
    policy = copy.deepcopy(adversarial.POLICY)
    table = policy["tables"]["people"]
    del table["privacy_unit"], table["max_rows_per_unit"]
    policy["tables"]["levels"] = {"public": True, "key": "code", "columns": {
        "code": {"type": "int", "domain": adversarial.LEVELS},
        "label": {"type": "str", "domain": ["low", "mid", "high"]}}}
    policy["tables"]["tiers"] = {"parent_of": {"table": "people", "foreign_key": "level"},
                                 "key": "code", "columns": {
                                     "code": {"type": "int"},
                                     "rank": {"type": "int", "lower": 0, "upper": 5}}}
    path = root / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    db = adversarial.write_dataset(root / "people.duckdb", adversarial.datasets()["ordinary"])
    with duckdb.connect(str(db)) as raw:
        raw.execute("CREATE TABLE levels AS SELECT * FROM (VALUES (1, 'low'), (2, 'mid'), (3, 'high')) "
                    "AS v(code, label)")
        raw.execute("CREATE TABLE tiers AS SELECT * FROM (VALUES (1, 4), (1, 0), (2, NULL), "
                    "(NULL, 3)) AS v(code, rank)")
    conn = PrivateDatabase.connect(db, path, root / "ledger.sqlite", create=True)
    yield conn
    conn.close()


def _named_in_reads(sql: str) -> set[str]:
    """Policy columns the analyst's text names in WHERE, GROUP BY or an aggregate's argument,
    in the query or in a CTE or subquery it reads."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    parts = [*tree.find_all(exp.Where), *tree.find_all(exp.Group), *tree.find_all(exp.AggFunc)]
    return {f"people.{col.name.lower()}" for part in parts if part is not None
            for col in part.find_all(exp.Column)
            if col.name.lower() in adversarial.POLICY["tables"]["people"]["columns"]}


# How the query reaches the table: directly, through CTEs named t that filter it, joined to
# the public table on people.level, or joined to the parent table people reference by level.
JOINED = " FROM people JOIN levels ON people.level = levels.code"
PARENTED = " FROM people LEFT JOIN tiers ON people.level = tiers.code"
TIERS = {"tiers.code", "tiers.rank"}
SOURCES = ["", "WITH t AS (SELECT * FROM people) ", "WITH t AS (SELECT * FROM people WHERE level > 1) ",
           "WITH u AS (SELECT * FROM people WHERE NOT sick), t AS (SELECT * FROM u) ", JOINED,
           PARENTED]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sql=differential.queries(), source=st.sampled_from(SOURCES))
def test_every_column_a_query_names_where_it_reads_data_is_counted(row_level_fuzz_db, sql, source):
    """Random queries of the fuzzer's grammar, on the table, through a CTE that filters it or
    joined to a public or parent table: every policy column named in WHERE, GROUP BY or an
    aggregate, the join column and every parent column (the row kept per key is chosen by all
    of them) is among the columns read, so no column can pick a smaller eta unseen."""
    if source in (JOINED, PARENTED):
        sql = sql.replace(" FROM people", source, 1)
    elif source:
        sql = source + sql.replace(" FROM people", " FROM t", 1)
    try:
        plan = row_level_fuzz_db.explain(sql, epsilon=1.0)
    except DpsqlError:
        return
    assert _named_in_reads(sql) <= set(plan.columns_read)
    assert source not in (JOINED, PARENTED) or "people.level" in plan.columns_read
    assert source != PARENTED or TIERS <= set(plan.columns_read)
    assert set(plan.columns_read) - TIERS <= {f"people.{c}" for c in adversarial.POLICY["tables"]
                                              ["people"]["columns"] if c in sql.lower()}
