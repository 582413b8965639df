"""No run-time error, refusal or explanation depends on the data.

Both layers are tested: the planner's type rules, and the structural gate alone (raw SQL bound
on the schema-only connection, as if the type rules were missing), which must refuse every form
that is shown here to fail on some data. A failure on the data that got past both halts the
database; `explain` and every refusal are byte-identical on neighbouring datasets."""

from __future__ import annotations

import json
import math

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
from dpsql.engine import PrivateDatabase, QueryRefused, cli, postprocess
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.backends.duckdb_gate import SchemaGate, total_cast
from dpsql.engine.commands import exit_code
from dpsql.engine.errors import EngineHalted
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import copies_read, readable_tables, rewrite
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select

from tests.support import BASE_POLICY, charge_count, create_ledger, run_cli, write_policy

SCHEMA = ("person_id BIGINT, state VARCHAR, age INTEGER, income DOUBLE, sick BOOLEAN, "
          "note VARCHAR")
COLUMNS = [tuple(part.split()) for part in SCHEMA.split(", ")]
IS_TRUE_ORACLE = ("SELECT COUNT(*) FROM people WHERE "
                  "(CASE WHEN age = 37 THEN 'x' ELSE 'true' END) IS TRUE")
# Datasets on which DuckDB evaluates the forms below; each form fails on at least one.
ADVERSARIAL_ROWS = [
    [(1, "CA", 37, 1.0, True, "x")],
    [(1, "CA", 2147483647, 1e300, False, "inf")],
    [(1, "CA", -2147483648, -1e300, None, "0x7FFFFFFFFFFFFFFF")],
    [(9223372036854775807, "NY", 0, float("nan"), True, "(")],
]
# Forms the type rules refuse; the gate alone must refuse them too, as each fails on some data.
FALLIBLE = [
    "(CASE WHEN age = 37 THEN 'x' ELSE 'true' END) IS TRUE",
    "note IS TRUE",
    "CAST(note AS INTEGER) > 0",
    "CAST(note AS DOUBLE) > 0",
    "CAST(income AS INTEGER) > 0",
    "CAST(age AS TINYINT) > 0",
    "age * age > 0",
    "person_id + person_id > 0",
    "ABS(age) > 0",
    "SUBSTRING(note, person_id, 2) = 'a'",
    "regexp_matches(note, note)",
    "CAST(income AS FLOAT) > 0",
]
TOTAL = [
    "TRY_CAST(note AS INTEGER) > 0",
    "TRY_CAST(age AS DOUBLE) + TRY_CAST(1 AS DOUBLE) > TRY_CAST(2.5 AS DOUBLE)",
    "SUBSTRING(note, TRY_CAST(person_id AS INTEGER), 2) = 'a'",
    "note LIKE '%a' AND LOWER(note) = 'x' AND LENGTH(TRIM(note)) > 1",
    "CAST(age AS VARCHAR) = '3' AND CAST(age AS BIGINT) > 1 AND sick IS TRUE",
    "COALESCE(age, 1) IN (1, 2) AND GREATEST(income, 1.0) > 2",
]


def _gate() -> SchemaGate:
    return SchemaGate({("people",): COLUMNS})


def _fails_somewhere(condition: str) -> bool:
    for rows in ADVERSARIAL_ROWS:
        with duckdb.connect(":memory:", config={"error_on_division_by_zero": False}) as conn:
            conn.execute(f"CREATE TABLE people ({SCHEMA})")
            conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", rows)
            try:
                conn.execute(f"SELECT COUNT(*) FROM people WHERE {condition}").fetchall()
            except duckdb.Error:
                return True
    return False


@pytest.mark.parametrize("condition", FALLIBLE)
def test_gate_alone_refuses_every_form_that_fails_on_some_data(condition):
    """Layer (b) without layer (a): the raw SQL reaches the gate directly."""
    assert _fails_somewhere(condition), "the form should fail on one of the datasets"
    with pytest.raises(QueryRefused, match="could fail on some data value"):
        _gate().check(f"SELECT COUNT(*) FROM people WHERE {condition}")


@pytest.mark.parametrize("condition", TOTAL)
def test_gate_accepts_total_forms_and_they_run_on_every_dataset(condition):
    _gate().check(f"SELECT COUNT(*) FROM people WHERE {condition}")
    assert not _fails_somewhere(condition)


def test_gate_reports_binder_errors_without_data_and_caches_its_verdict(monkeypatch):
    gate = _gate()
    with pytest.raises(QueryRefused, match="cannot be run: .*nosuch"):
        gate.check("SELECT COUNT(*) FROM people WHERE nosuch > 1")
    calls = []
    judge = gate._judge
    monkeypatch.setattr(gate, "_judge", lambda sql: calls.append(sql) or judge(sql))
    for _ in range(3):
        gate.check("SELECT COUNT(*) FROM people")
    assert len(calls) == 1


def test_total_cast_table_matches_duckdb():
    """Every cast the table calls total succeeds on its source type's extreme values."""
    extremes = {"TINYINT": ["-128", "127"], "SMALLINT": ["-32768", "32767"],
                "INTEGER": ["-2147483648", "2147483647"],
                "BIGINT": ["-9223372036854775808", "9223372036854775807"],
                "UBIGINT": ["0", "18446744073709551615"], "FLOAT": ["'-inf'", "'nan'", "3e38"],
                "DOUBLE": ["'-inf'", "'nan'", "1e308"], "BOOLEAN": ["true", "false"],
                "DECIMAL(18,3)": ["-999999999999999.999", "999999999999999.999"],
                "VARCHAR": ["'x'", "'true'"]}
    targets = list(extremes) + ["HUGEINT", "DECIMAL(38,3)", "DECIMAL(10,2)"]
    conn = duckdb.connect()
    checked = 0
    for source, values in extremes.items():
        for target in targets:
            kinds = [conn.execute(f"SELECT json_serialize_plan('SELECT NULL::{t}')").fetchone()[0]
                     for t in (source, target)]
            src, dst = (_type_of_null(k) for k in kinds)
            if not total_cast(src, dst):
                continue
            for value in values:
                conn.execute(f"SELECT CAST(CAST({value} AS {source}) AS {target})").fetchall()
                checked += 1
    assert checked > 40


def _type_of_null(plan_json: str) -> dict:
    expression = json.loads(plan_json)["plans"][0]["expressions"][0]
    return expression["return_type"]


@pytest.fixture
def neighbours(tmp_path):
    """Two datasets differing in one unit's rows; in the second, that unit is over the bound
    (2 rows) and one row's age is 37."""
    paths = []
    for name, extra in (("a", [(7, "CA", 30, 10.0, True, "r")]),
                        ("b", [(7, "NY", 37, 20.0, False, "r")] * 3)):
        path = tmp_path / f"{name}.duckdb"
        with duckdb.connect(str(path)) as conn:
            conn.execute(f"CREATE TABLE people ({SCHEMA})")
            rows = [(i, "TX", 20 + i, 5.0, False, "r") for i in range(6)] + extra
            conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", rows)
        paths.append(path)
    return paths


EXPLAINED = [
    "SELECT state, COUNT(*), AVG(age) FROM people WHERE age > 30 GROUP BY state",
    "SELECT COUNT(DISTINCT person_id) FROM people",
    "SELECT COUNT(*) FROM people",
]
REFUSED = [
    "SELEC COUNT(*) FROM people",
    "SELECT COUNT(*) FROM people WHERE nosuch = 1",
    "SELECT COUNT(*) FROM people WHERE age = 'x'",
    IS_TRUE_ORACLE,
    "SELECT COUNT(*) FROM people WHERE CAST(CASE WHEN sick THEN 'inf' END AS DOUBLE) > 0",
    "SELECT COUNT(*) FROM people LIMIT 10%",
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state "
    "HAVING (CASE WHEN n > 0 THEN 'x' ELSE 'true' END) IS TRUE",
]


def _cli(capsys, args: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.parametrize("command", ["explain", "query"])
def test_explain_and_refusals_are_identical_on_neighbouring_datasets(neighbours, tmp_path,
                                                                   capsys, command):
    policy = write_policy(tmp_path / "policy.yaml")
    cases = [(sql, fmt, "1") for sql in EXPLAINED for fmt in ("table", "json")
             if command == "explain"]
    cases += [(sql, "table", "1") for sql in REFUSED]
    cases += [("SELECT COUNT(*) FROM people", "table", eps) for eps in ("0", "-1", "nan")]
    outputs = []
    for i, data in enumerate(neighbours):
        create_ledger(tmp_path / f"ledger{i}.sqlite", policy)
        seen = []
        for sql, fmt, eps in cases:
            args = [command, "--db", str(data), "--policy", str(policy), "--ledger",
                    str(tmp_path / f"ledger{i}.sqlite"), "--epsilon", eps, "--format", fmt, "--", sql]
            seen.append(_cli(capsys, args))
        outputs.append(seen)
    assert outputs[0] == outputs[1]
    codes = [code for code, _, _ in outputs[0]]
    assert codes.count(0) == (len(EXPLAINED) * 2 if command == "explain" else 0)
    assert all(code in (0, 2) for code in codes)


def test_explain_reads_no_data(setup, monkeypatch):
    """explain never runs SQL on the data connection, nor makes the bounded copy."""
    touched = []
    monkeypatch.setattr(execute, "run", lambda *a: touched.append("run"))
    monkeypatch.setattr(execute, "bound_units", lambda *a: touched.append("bound"))
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        ex = db.explain("SELECT state, SUM(age) FROM people GROUP BY state", epsilon=1.0)
    assert touched == [] and "dpsql_bounded" in ex.rewritten_sql


def test_is_true_oracle_is_refused_the_same_way_whatever_the_data(neighbours, tmp_path):
    """Before, this query failed exactly when some row had age 37 (free, exact), and was
    answered otherwise."""
    policy = write_policy(tmp_path / "policy.yaml")
    messages = []
    for i, data in enumerate(neighbours):
        ledger = tmp_path / f"l{i}.sqlite"
        with PrivateDatabase.connect(data, policy, ledger, create=True) as db, \
                pytest.raises(QueryRefused) as refused:
            db.query(IS_TRUE_ORACLE, epsilon=1.0)
        messages.append(str(refused.value))
        assert charge_count(ledger) == 0
    assert messages[0] == messages[1] and "IS TRUE on a str value" in messages[0]


@pytest.mark.parametrize("sql, why", [
    ("SELECT COUNT(*) FROM people WHERE CAST('0x7FFFFFFFFFFFFFFF' AS BIGINT) > 0", "plain decimal"),
    ("SELECT COUNT(*) FROM people WHERE CAST(CASE WHEN sick THEN 'inf' END AS DOUBLE) > 0",
     "text expression"),
    ("SELECT COUNT(*) FROM people WHERE CAST('1e16' AS DOUBLE) > 0", "magnitudes above"),
    ("SELECT COUNT(*) FROM people WHERE CAST(COALESCE(note, 'nan') AS DOUBLE) > 0",
     "text expression"),
    ("SELECT COUNT(*) FROM people WHERE CAST('1_000' AS INT) > 0", "plain decimal"),
])
def test_literal_caps_hold_through_casts_of_text(sql, why):
    with pytest.raises(QueryRefused, match=why):
        build_plan(parse_select(sql), parse_policy(BASE_POLICY), sql)


def test_text_columns_and_plain_numeric_text_may_still_be_cast(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query("SELECT COUNT(*) FROM people WHERE CAST(note AS DOUBLE) > CAST(' 12.5 ' AS DOUBLE)",
                 epsilon=1.0)


def test_having_that_passes_on_zeros_and_fails_on_a_noisy_value_is_refused(setup):
    """Before, this passed the dry run on zeros (ELSE 'true'), was charged, then failed on the
    first positive noisy count."""
    sql = ("SELECT state, COUNT(*) AS n FROM people GROUP BY state "
           "HAVING (CASE WHEN n > 0 THEN 'x' ELSE 'true' END) IS TRUE")
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(QueryRefused, match="IS TRUE on a str value"):
            db.query(sql, epsilon=1.0)
    assert charge_count(setup.ledger) == 0


def test_post_processing_gate_alone_refuses_the_having_oracle():
    plan = build_plan(parse_select("SELECT state, COUNT(*) AS n FROM people GROUP BY state"),
                      parse_policy(BASE_POLICY), "")
    gate = SchemaGate({("noisy",): postprocess.noisy_columns(plan)})
    with pytest.raises(QueryRefused, match="cast from VARCHAR to BOOLEAN"):
        gate.check('SELECT * FROM noisy WHERE CASE WHEN "__m0" > 0 THEN \'x\' ELSE \'true\' END')
    gate.check('SELECT * FROM noisy WHERE TRY_CAST("__m0" AS DOUBLE) / 0 > 1')


POST_QUERIES = [
    "SELECT state, COUNT(*) AS n, SUM(income) AS s, AVG(age) AS a FROM people GROUP BY state "
    "HAVING n / s > 1 OR ROUND(a, 2) < -1 OR SUBSTRING(state, n, s) = 'C' ORDER BY n * s DESC, "
    "CAST(a AS INTEGER) LIMIT 3",
    "SELECT SUM(income) / COUNT(*) - AVG(income) % 7 AS x, ABS(-SUM(age)) FROM people "
    "HAVING CAST(x AS BIGINT) IS NULL OR FLOOR(x) = CEIL(x) OR LEAST(x, 1) IN (1, 2.5)",
]


@pytest.mark.parametrize("sql", POST_QUERIES)
def test_post_processing_is_total_on_every_float(sql):
    """Post-processing sees only noisy values; it must not fail on any of them."""
    policy = parse_policy(BASE_POLICY)
    plan = build_plan(parse_select(sql), policy, sql)
    SchemaGate({("noisy",): postprocess.noisy_columns(plan)}).check(postprocess.query_sql(plan))
    conn = postprocess.connect()
    floats = [0.0, -0.0, 1e308, -1e308, math.inf, -math.inf, math.nan, 5e-324, 2.0**63]
    ints = [0, 1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63)]
    rng = np.random.default_rng(3)
    for _ in range(200):
        groups = len(plan.group_by[0].keys) if plan.group_by else 1
        frame = pd.DataFrame({c.name: list(c.keys) for c in plan.group_by})
        if not plan.group_by:
            frame = pd.DataFrame(index=range(1))
        for m in plan.measurements:
            pool = ints if m.integer else floats
            frame[m.name] = [pool[i] for i in rng.integers(0, len(pool), groups)]
        for j in range(len(plan.outputs)):
            for prefix in ("__ci", "__cs"):
                frame[f"{prefix}{j}"] = [floats[i] for i in rng.integers(0, len(floats), groups)]
        postprocess.finish(conn, plan, postprocess.query_sql(plan), frame)


def test_a_failure_on_the_data_halts_the_database_durably(setup, monkeypatch):
    def fail(*args):
        raise execute.DataFailure("the query failed while running on the data")

    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        monkeypatch.setattr(execute, "run", fail)
        with pytest.raises(EngineHalted, match="halted") as halted:
            db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
        monkeypatch.undo()
        with pytest.raises(EngineHalted) as again:
            db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
    assert str(again.value) == str(halted.value) and exit_code(halted.value) == 4
    assert charge_count(setup.ledger) == 0
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        assert "SELECT COUNT(*) FROM people" in db.ledger.halted()
        with pytest.raises(EngineHalted):
            db.explain("SELECT COUNT(*) FROM people", epsilon=1.0)


def test_the_owner_resumes_a_halted_ledger_after_inspecting_it(setup, monkeypatch, capsys):
    def fail(*args):
        raise execute.DataFailure("the query failed while running on the data")

    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        monkeypatch.setattr(db._backend, "run", fail)
        with pytest.raises(EngineHalted):
            db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
    args = ["ledger", "resume", "--ledger", str(setup.ledger), "--policy", str(setup.policy)]
    code, out, _ = run_cli(capsys, *args)
    shown = " ".join(out.split())
    assert code == 0 and "failed while running on the data" in shown and "may run again" in shown
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and "is not halted" in err and charge_count(setup.ledger) == 1


def test_a_halt_recorded_while_a_query_runs_stops_its_charge(setup, monkeypatch):
    """Two processes: one halts while the other's query is already past its checks. The other
    must not be answered (it would tell apart queries that failed from queries that did not,
    many at once); every charge re-reads the halt under the write lock."""
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as first, \
            PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as second:
        real = second._backend.run

        def halted_meanwhile(sql, n_keys):
            first.ledger.halt("another query failed on the data")
            return real(sql, n_keys)

        monkeypatch.setattr(second._backend, "run", halted_meanwhile)
        with pytest.raises(EngineHalted):
            second.query("SELECT COUNT(*) FROM people", epsilon=1.0)
    assert charge_count(setup.ledger) == 0


def test_rows_with_a_null_unit_are_each_counted(tmp_path):
    """251 rows with a NULL unit and 10 units of 3 rows (bound 2): 251 + 20 rows, 261 units."""
    path = tmp_path / "nulls.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE people ({SCHEMA})")
        rows = [(None, "CA", 30, 1.0, True, "r")] * 251
        rows += [(u, "NY", 40, 2.0, False, "r") for u in range(10) for _ in range(3)]
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", rows)
    policy = write_policy(tmp_path / "policy.yaml", {"budget": {"epsilon": 1e8}})
    with PrivateDatabase.connect(path, policy, tmp_path / "l.sqlite", create=True) as db:
        res = db.query("SELECT COUNT(*) AS n, COUNT(DISTINCT person_id) AS u FROM people",
                       epsilon=100)  # noise is 0 with probability 1 - 3e-11
    assert res.df["n"].iloc[0] == 271
    assert res.df["u"].iloc[0] == 261


def test_gate_reads_and_or_as_boolean():
    """DuckDB's plan gives AND/OR no return type; the gate knows they are boolean (it used to
    crash with a KeyError on `LEAST((sick AND NULL))`, found by the differential fuzzer)."""
    gate = _gate()
    gate.check('SELECT COUNT(*) FROM "people" WHERE LEAST(("sick" AND NULL), "sick" OR "sick")')
    with pytest.raises(QueryRefused, match="Cannot combine types of BOOLEAN and VARCHAR"):
        gate.check('SELECT COUNT(*) FROM "people" WHERE LEAST(("sick" AND NULL), "note")::BOOLEAN')


@pytest.mark.parametrize("age_type", ["TINYINT", "SMALLINT", "BIGINT", "UTINYINT", "UBIGINT",
                                      "HUGEINT"])
@pytest.mark.parametrize("income_type", ["FLOAT", "DECIMAL(18,3)", "INTEGER"])
def test_gate_accepts_ordinary_queries_over_every_column_type(age_type, income_type):
    """DuckDB casts literals to a narrow column's type (3 to TINYINT in `age > 3`): the gate
    accepts a constant the type holds, so ordinary queries run whatever the data's types."""
    columns = [("person_id", "BIGINT"), ("age", age_type), ("income", income_type),
               ("note", "VARCHAR"), ("sick", "BOOLEAN"), ("state", "VARCHAR")]
    policy = parse_policy(BASE_POLICY)
    gate = SchemaGate(readable_tables(policy, {"people": dict(columns)}))  # as a backend's gate
    for sql in ["SELECT COUNT(*), SUM(age), AVG(income), COUNT(DISTINCT person_id) FROM people "
                "WHERE age > 3 AND age < 300 AND income < 2.5 AND age IN (1, 2) AND sick",
                "SELECT state, sick, SUM(age), SUM(income) FROM people WHERE age BETWEEN 1 AND "
                "1e15 AND LEAST(age, 5) = 3 AND COALESCE(income, 1) > 0 GROUP BY state, sick"]:
        query = rewrite(build_plan(parse_select(sql), policy, sql))
        for path, kept in copies_read(policy, query, {"people": dict(columns)}).items():
            gate.add(path, kept)  # the copy of the columns it reads, as a backend adds it
        gate.check(query.sql("duckdb"))
    if age_type == "TINYINT":
        with pytest.raises(QueryRefused, match="cast from INTEGER to TINYINT"):
            gate.check("SELECT COUNT(*) FROM people WHERE "
                       "(CASE WHEN age = 37 THEN CAST(300 AS TINYINT) END) = 1")


def test_gate_stops_a_fallible_query_that_got_past_the_planner(setup, monkeypatch):
    """As if the type rules and the rewriter had a gap: the SQL handed to the data is the IS
    TRUE oracle itself. The gate refuses it before the data is touched, and nothing is charged."""
    from dpsql.engine import prepare

    oracle = ('SELECT COUNT(*) AS "__m0" FROM dpsql_bounded.main."people" WHERE '
              "(CASE WHEN age = 37 THEN 'x' ELSE 'true' END) IS TRUE")
    monkeypatch.setattr(prepare, "rewrite", lambda plan: sqlglot.parse_one(oracle, read="duckdb"))
    touched = []
    monkeypatch.setattr(execute, "run", lambda *a: touched.append("run"))
    monkeypatch.setattr(execute, "bound_units", lambda *a: touched.append("bound"))
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        for call in (db.query, db.explain):
            with pytest.raises(QueryRefused, match="cast from VARCHAR to BOOLEAN"):
                call("SELECT COUNT(*) FROM people", epsilon=1.0)
    assert touched == [] and charge_count(setup.ledger) == 0
