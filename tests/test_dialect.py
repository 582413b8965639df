"""The spellings peers' users write (docs/theory.md §23): each is answered exactly as its
canonical spelling is (the same plan, so the same sensitivity, charge and answer), or refused
with one line naming what is accepted when peers give it different meanings."""

from __future__ import annotations

import copy
import dataclasses

import duckdb
import numpy as np
import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sensitivity import sensitivity
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.domain_literals import coerce_literals
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select
from sqlglot import exp

from tests.support import BASE_POLICY, create_ledger, write_policy

POLICY = parse_policy(BASE_POLICY)


def _plan(sql: str):
    """The plan of `sql` without its text, so two spellings' plans compare equal."""
    return dataclasses.replace(build_plan(parse_select(sql), POLICY, sql), sql="")


def _refusal(sql: str) -> str:
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select(sql), POLICY, sql)
    return str(info.value)


@pytest.mark.parametrize("written, canonical", [
    ("SELECT VARIANCE(age) AS v FROM people", "SELECT VAR_SAMP(age) AS v FROM people"),
    ("SELECT STDDEV(age) AS v FROM people", "SELECT STDDEV_SAMP(age) AS v FROM people"),
    ("SELECT state, variance(income) AS v FROM people GROUP BY state",
     "SELECT state, VAR_SAMP(income) AS v FROM people GROUP BY state"),
])
def test_variance_spellings_are_the_canonical_aggregate(written, canonical):
    assert _plan(written) == _plan(canonical)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT VAR(age) FROM people", "VAR(age) refused in SELECT: VAR is the sample variance in SQL "
     "Server but the population variance in SmartNoise SQL; write VAR_SAMP"),
    ("SELECT std(age) FROM people", "STD(age) refused in SELECT: STD is the population deviation"),
    ("SELECT state, COUNT(*) FROM people GROUP BY state HAVING STD(age) > 1", "refused in HAVING: STD is"),
])
def test_spellings_peers_read_differently_are_refused_naming_both(sql, fragment):
    assert fragment in _refusal(sql)


@pytest.mark.parametrize("written, canonical", [
    ("SELECT TOP 2 state, COUNT(*) FROM people GROUP BY state ORDER BY 2 DESC",
     "SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY 2 DESC LIMIT 2"),
    ("select top (3) state, AVG(age) AS a FROM people GROUP BY state",
     "SELECT state, AVG(age) AS a FROM people GROUP BY state LIMIT 3"),
    ("SELECT TOP 0 COUNT(*) FROM people", "SELECT COUNT(*) FROM people LIMIT 0"),
])
def test_top_is_limit(written, canonical):
    assert _plan(written) == _plan(canonical)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT TOP 5 PERCENT COUNT(*) FROM people", "TOP n PERCENT refused"),
    ("SELECT TOP 5 WITH TIES state, COUNT(*) FROM people GROUP BY state", "TOP n WITH TIES refused"),
    ("SELECT TOP 2 COUNT(*) FROM people LIMIT 3", "TOP and LIMIT both given"),
    ("SELECT TOP 1.5 COUNT(*) FROM people", "LIMIT 1.5 refused: expected a whole number"),
    ("SELECT top FROM people", "unknown column 'top'"),
])
def test_top_refusals(sql, fragment):
    assert fragment in _refusal(sql)


def test_top_releases_only_n_rows_and_charges_as_limit(people_db, tmp_path):
    """TOP keeps the first n released rows (post-processing): the charge is the full query's."""
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(people_db, policy, ledger, reuse=False) as db:
        top = db.query("SELECT TOP 2 state, COUNT(*) AS n FROM people GROUP BY state "
                       "ORDER BY state", epsilon=1.0)
        limit = db.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state "
                         "ORDER BY state LIMIT 2", epsilon=1.0)
    assert list(top.df["state"]) == list(limit.df["state"]) == ["CA", "NY"]
    assert (top.epsilon, top.epsilon_dp) == (limit.epsilon, limit.epsilon_dp)


_FUNCTIONS = ("SELECT state, AVG(age) AS a, EXP(AVG(age) / 100) AS e, LN(AVG(age)) AS l, "
              "LOG10(AVG(age)) AS g, POWER(AVG(age), 2) AS p, PI() * AVG(age) AS pa, "
              "COS(AVG(age)) AS c, SIN(AVG(age)) AS s, ROUND(AVG(age), 2) AS r "
              "FROM people GROUP BY state")


def test_functions_of_released_values_cost_nothing_more():
    """A function of a released aggregate reads the aggregate's measurements and no others."""
    assert _plan(_FUNCTIONS).measurements == _plan(
        "SELECT state, AVG(age) AS a FROM people GROUP BY state").measurements
    assert _plan("SELECT SQRT(VARIANCE(age)) AS v FROM people").measurements == \
        _plan("SELECT VARIANCE(age) AS v FROM people").measurements


def test_functions_of_released_values_are_those_functions_of_the_released_value(people_db, tmp_path):
    """Each function column is the function of the AVG released in the same answer; the
    increasing ones (EXP, LN, LOG10, PI ·) carry an interval, the others (POWER, COS, SIN) say
    they have none."""
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(people_db, policy, ledger) as db:
        result = db.query(_FUNCTIONS, epsilon=1.0)
    df, a = result.df, result.df["a"].to_numpy(float)
    assert np.allclose(df["e"], np.exp(a / 100))
    assert np.allclose(df["l"], np.log(a))
    assert np.allclose(df["g"], np.log10(a))
    assert np.allclose(df["p"], a ** 2)
    assert np.allclose(df["pa"], np.pi * a)
    assert np.allclose(df["c"], np.cos(a))
    assert np.allclose(df["s"], np.sin(a))
    # DuckDB rounds halves away from zero, numpy to even: one cent apart at most.
    assert np.allclose(df["r"], np.round(a, 2), atol=0.01 + 1e-9)
    ci = result.ci95
    assert ci[["e", "pa"]].notna().all().all()
    # LN and LOG10 carry an interval where the AVG's interval stays above 0, else it is
    # unbounded below: the same rows for both, and most of them at this epsilon.
    assert (ci["l"].notna() == ci["g"].notna()).all() and ci["l"].notna().sum() >= 2
    assert ci[["p", "c", "s"]].isna().all().all()
    reasons = dict(result.no_interval)
    assert set(reasons) == {"p", "c", "s", "l", "g"}
    assert reasons["l"] == ("no interval in rows where the interval of LN's argument reaches 0 "
                            "or below (the logarithm is unbounded below there)")
    assert reasons["g"] == reasons["l"].replace("LN", "LOG10")
    assert reasons["c"].startswith("no interval: COS has no interval rule")
    assert reasons["p"].startswith("no interval: POWER has no interval rule")


def test_interval_of_an_increasing_function_is_the_function_of_the_interval():
    """EXP's interval maps the AVG's interval through EXP (ends of an increasing function)."""
    from dpsql.engine.intervals import evaluate
    from sqlglot import parse_one
    bounds = evaluate(parse_one("EXP(x / 100)"), lambda _: (np.array([10.0]), np.array([30.0])))
    assert np.allclose(bounds, ([np.exp(0.1)], [np.exp(0.3)]))
    bounds = evaluate(parse_one("LOG10(x)", dialect="duckdb"),
                      lambda _: (np.array([-1.0]), np.array([100.0])))
    assert bounds[0][0] == -np.inf and bounds[1][0] == 2.0


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM people WHERE LN(age) > 1", "function LN() (allowed: ABS"),
    ("SELECT SUM(POWER(age, 2)) FROM people", "function POWER() (allowed: ABS"),
    ("SELECT AVG(EXP(age)) FROM people", "function EXP() (allowed: ABS"),
    ("SELECT LOG(AVG(age)) FROM people", "LOG(AVG(age)) refused: LOG is base 10 in DuckDB"),
    ("SELECT LOG(2, AVG(age)) FROM people", "write LOG10(x) or LN(x)"),
    ("SELECT COS(AVG(note)) FROM people", "AVG(note) refused"),
])
def test_released_only_functions_are_refused_on_rows(sql, fragment):
    assert fragment in _refusal(sql)


def test_count_of_the_unit_has_count_stars_sensitivity():
    """COUNT(unit) counts rows, as COUNT(*) does: the same sensitivity (m, 2m grouped)."""
    plan = _plan("SELECT state, COUNT(person_id) AS n, COUNT(*) AS s FROM people GROUP BY state")
    unit, star = plan.measurements
    assert (unit.label, star.label) == ("COUNT(unit)", "COUNT(*)")
    assert sensitivity(unit, plan) == sensitivity(star, plan) == 4
    plan = _plan("SELECT COUNT(people.person_id) FROM people")
    assert sensitivity(plan.measurements[0], plan) == 2


def test_count_of_the_unit_counts_rows_whose_unit_is_not_null(tmp_path):
    """20 units of 1 or 2 rows (30 rows) and 5 rows without a unit: at ε = 100 (noise scale
    0.04 rows) COUNT(person_id) is 30 and COUNT(*) 35, each within its interval."""
    path = tmp_path / "people.duckdb"
    units = [i for i in range(20) for _ in range(1 + i % 2)] + [None] * 5
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE people AS SELECT unnest($1) AS person_id, 'CA' AS state, 30 AS age, "
                     "1.0 AS income, false AS sick, 'row' AS note", [units])
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(path, policy, ledger) as db:
        result = db.query("SELECT COUNT(person_id) AS n, COUNT(*) AS s FROM people", epsilon=100)
    assert abs(result.df["n"][0] - 30) <= result.ci95["n"][0]
    assert abs(result.df["s"][0] - 35) <= result.ci95["s"][0]
    assert result.ci95["n"][0] < 1


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT SUM(person_id) FROM people", "column person_id is the privacy unit"),
    ("SELECT COUNT(person_id + 1) FROM people", "column person_id is the privacy unit"),
])
def test_the_unit_is_still_refused_elsewhere(sql, fragment):
    assert fragment in _refusal(sql)


SCHEMA_POLICY = parse_policy({**copy.deepcopy(BASE_POLICY), "schema": "PUMS"})


def _schema_plan(sql: str):
    return dataclasses.replace(build_plan(parse_select(sql), SCHEMA_POLICY, sql), sql="")


@pytest.mark.parametrize("written, canonical", [
    ("SELECT COUNT(*) FROM PUMS.people", "SELECT COUNT(*) FROM people"),
    ("SELECT state, AVG(p.age) AS a FROM pums.People AS p GROUP BY state",
     "SELECT state, AVG(p.age) AS a FROM people AS p GROUP BY state"),
])
def test_a_table_qualified_by_the_policys_schema_is_the_table(written, canonical):
    assert _schema_plan(written) == _schema_plan(canonical)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM other.people", "qualified table name other.people refused: name the "
     "table alone or as pums.people (the policy's schema)"),
    ("SELECT COUNT(*) FROM db.PUMS.people", "qualified table name db.PUMS.people refused"),
    ("SELECT COUNT(*) FROM PUMS.nothere", "unknown table 'nothere' (tables: people)"),
    ("SELECT COUNT(*) FROM information_schema.tables", "qualified table name "
     "information_schema.tables refused"),
])
def test_other_qualifiers_are_refused_in_one_line(sql, fragment):
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select(sql), SCHEMA_POLICY, sql)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_without_a_schema_in_the_policy_a_qualifier_is_refused_as_before():
    assert _refusal("SELECT COUNT(*) FROM PUMS.people") == \
        "qualified table name PUMS.people refused: name the table alone"


@pytest.mark.parametrize("schema", ["main", "pg_catalog", "a.b", "", 3])
def test_a_schema_that_names_a_catalog_or_no_name_is_refused_by_the_policy(schema):
    from dpsql.engine.errors import PolicyError
    with pytest.raises(PolicyError, match="^schema: "):
        parse_policy({**copy.deepcopy(BASE_POLICY), "schema": schema})


def test_a_schema_qualified_query_is_answered(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", {"schema": "PUMS"})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(people_db, policy, ledger) as db:
        result = db.query("SELECT COUNT(*) AS n FROM PUMS.people", epsilon=1.0)
    assert list(result.df.columns) == ["n"] and result.ci95["n"][0] > 0


@pytest.mark.parametrize("written, canonical", [
    ("SELECT COUNT(*) FROM people WHERE sick = 1", "SELECT COUNT(*) FROM people WHERE sick = TRUE"),
    ("SELECT COUNT(*) FROM people WHERE sick <> 0", "SELECT COUNT(*) FROM people WHERE sick <> FALSE"),
    ("SELECT COUNT(*) FROM people WHERE age = TRUE", "SELECT COUNT(*) FROM people WHERE age = 1"),
    ("SELECT COUNT(*) FROM people WHERE 1 = sick AND age IN (FALSE, 3)",
     "SELECT COUNT(*) FROM people WHERE TRUE = sick AND age IN (0, 3)"),
])
def test_bool_and_int_literals_are_cast_as_duckdb_casts_them(written, canonical):
    """§26: 0/1 against a bool column and TRUE/FALSE against an int column, the same plan."""
    assert _plan(written) == _plan(canonical)


DATED = parse_policy({**BASE_POLICY, "tables": {"people": {
    **BASE_POLICY["tables"]["people"], "columns": {
        **BASE_POLICY["tables"]["people"]["columns"],
        "day": {"type": "date", "lower": "2024-01-01", "upper": "2024-01-31"}}}}})


def _dated(sql: str):
    return dataclasses.replace(build_plan(parse_select(sql), DATED, sql), sql="")


@pytest.mark.parametrize("written, canonical", [
    ("SELECT COUNT(*) FROM people WHERE day > '2024-01-05'",
     "SELECT COUNT(*) FROM people WHERE day > DATE '2024-01-05'"),
    ("SELECT COUNT(*) FROM people WHERE day BETWEEN '2024-01-02' AND '2024-01-09'",
     "SELECT COUNT(*) FROM people WHERE day BETWEEN DATE '2024-01-02' AND DATE '2024-01-09'"),
    ("SELECT day, COUNT(*) FROM people WHERE day >= '2024-01-30' GROUP BY day",
     "SELECT day, COUNT(*) FROM people WHERE day >= DATE '2024-01-30' GROUP BY day"),
    ("SELECT COUNT(*) FROM people WHERE '2024-01-05' <= day AND day IN ('2024-01-07')",
     "SELECT COUNT(*) FROM people WHERE DATE '2024-01-05' <= day AND day IN (DATE '2024-01-07')"),
])
def test_a_date_column_compared_with_text_reads_it_as_a_date(written, canonical):
    plan = _dated(written)
    assert plan == _dated(canonical)
    if plan.group_by:
        assert len(plan.group_by[0].keys) == 2  # WHERE narrows the days as for a DATE literal


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM people WHERE day > '2024-13-05'", "DATE literal: '2024-13-05' is not a valid date"),
    ("SELECT COUNT(*) FROM people WHERE sick = 2", "cannot compare or combine condition (bool) and number"),
])
def test_literals_that_do_not_cast_are_refused(sql, fragment):
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select(sql), DATED, sql)
    assert fragment in str(info.value)


@pytest.mark.parametrize("written, canonical", [
    ("SELECT COUNT(*) FROM (people) AS c WHERE c.age > 3", "SELECT COUNT(*) FROM people AS c WHERE c.age > 3"),
    ("SELECT state, COUNT(*) FROM (people) GROUP BY state",
     "SELECT state, COUNT(*) FROM people GROUP BY state"),
])
def test_a_parenthesized_table_is_the_table(written, canonical):
    """§26: `FROM (t) AS c`, as SmartNoise's tests write it, is `FROM t AS c`."""
    def plan(sql: str):
        return dataclasses.replace(build_plan(flatten(parse_select(sql), POLICY), POLICY, sql), sql="")
    assert plan(written) == plan(canonical)


def test_a_parenthesized_table_with_a_clause_is_refused():
    sql = "SELECT COUNT(*) FROM (people LIMIT 3) AS c"
    with pytest.raises(QueryRefused, match="'limit' of TABLE is not supported"):
        build_plan(flatten(parse_select(sql), POLICY), POLICY, sql)


@pytest.mark.parametrize("start, shift", [
    ("2024-01-31", "1 MONTH"), ("2024-03-31", "-13 MONTH"), ("2024-02-29", "1 YEAR"), ("2024-03-04", "3 DAY"),
    ("2024-03-04", "2 WEEK"), ("2023-12-31", "-1 DAY"), ("2024-03-04", "5 HOUR"), ("2020-05-31", "-3 MONTH"),
])
def test_a_date_literal_plus_an_interval_is_the_date_duckdb_computes(start, shift):
    """§26: `DATE 'x' + INTERVAL n unit` folds, from the text, to the moment DuckDB gives; the
    query then plans as the one with the folded literal."""
    amount, unit = shift.split()
    tree = parse_select(f"SELECT COUNT(*) FROM people WHERE day < DATE '{start}' + INTERVAL ({amount}) {unit}")
    coerce_literals(tree, lambda column: None)
    folded = tree.args["where"].this.expression
    expected = duckdb.connect().execute(f"SELECT DATE '{start}' + INTERVAL ({amount}) {unit}").fetchone()[0]
    assert isinstance(folded, exp.Cast) and folded.this.this == \
        (expected.isoformat(sep=" ") if unit == "HOUR" else expected.date().isoformat())
    kind = "TIMESTAMP" if unit == "HOUR" else "DATE"
    canonical = f"SELECT COUNT(*) FROM people WHERE day < {kind} '{folded.this.this}'"
    written = f"SELECT COUNT(*) FROM people WHERE day < DATE '{start}' + INTERVAL ({amount}) {unit}"
    assert _dated(written) == _dated(canonical)


def test_an_interval_beyond_year_9999_is_refused():
    with pytest.raises(QueryRefused, match="falls outside the years 1 to 9999"):
        sql = "SELECT COUNT(*) FROM people WHERE day < DATE '9999-12-31' + INTERVAL 1 DAY"
        build_plan(parse_select(sql), DATED, sql)


# SELECT DISTINCT over released rows (docs/theory.md §26.1): post-processing, cost unchanged.
def test_select_distinct_has_the_plan_and_cost_of_the_query_without_it():
    with_distinct = _plan("SELECT DISTINCT sick, COUNT(*) > 5 AS many FROM people GROUP BY state, sick")
    without = _plan("SELECT sick, COUNT(*) > 5 AS many FROM people GROUP BY state, sick")
    assert with_distinct.distinct and not without.distinct
    assert dataclasses.replace(with_distinct, distinct=False) == without
    assert [sensitivity(m, with_distinct) for m in with_distinct.measurements] == \
        [sensitivity(m, without) for m in without.measurements]


def test_select_distinct_shows_each_released_row_once(people_db, tmp_path):
    """The DISTINCT answer is the answer without DISTINCT (same noise seed is not available, so
    compared on the released rows of one answer): its rows are those rows de-duplicated in
    every value and interval, in order, LIMIT counting distinct rows."""
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    sql = "SELECT DISTINCT sick, COUNT(*) > 0 AS some FROM people GROUP BY state, sick ORDER BY 1"
    with PrivateDatabase.connect(people_db, policy, ledger) as db:
        explained = db.explain(sql, epsilon=1.0)
        plain = db.explain(sql.replace("DISTINCT ", ""), epsilon=1.0)
        result = db.query(sql, epsilon=1.0)
        limited = db.query(sql + " LIMIT 1", epsilon=1.0)
    assert explained.epsilon_dp == plain.epsilon_dp
    assert [a.sensitivity for a in explained.aggregates] == [a.sensitivity for a in plain.aggregates]
    rows = list(zip(result.df["sick"], result.df["some"], strict=True))
    assert len(rows) == len(set(rows)) and 1 <= len(rows) <= 4  # 4 states x 2 has 8 rows before
    assert sorted(result.df["sick"].tolist()) == result.df["sick"].tolist()
    assert len(limited.df) == 1


def test_distinct_on_is_refused_in_one_line():
    assert _refusal("SELECT DISTINCT ON (state) state, COUNT(*) FROM people GROUP BY state") == \
        "SELECT DISTINCT ON (state) refused: write SELECT DISTINCT (released rows equal in every " \
        "value and interval shown once)"


# QUANTILE_CONT(x, [q, ...]) (docs/theory.md §26.2): one column per q, one histogram for all.
@pytest.mark.parametrize("written, canonical", [
    ("SELECT QUANTILE_CONT(age, [0.25, 0.5, 0.75]) FROM people",
     "SELECT QUANTILE_CONT(age, 0.25), QUANTILE_CONT(age, 0.5), QUANTILE_CONT(age, 0.75) FROM people"),
    ("SELECT PERCENTILE_CONT([0.1, 0.9]) WITHIN GROUP (ORDER BY income) FROM people",
     "SELECT QUANTILE_CONT(income, 0.1), QUANTILE_CONT(income, 0.9) FROM people"),
    ("SELECT state, QUANTILE_CONT(income, [0.1, 0.9]) AS q, COUNT(*) FROM people GROUP BY 1 "
     "ORDER BY 2 DESC, 3",
     'SELECT state, QUANTILE_CONT(income, 0.1) AS "q[0.1]", QUANTILE_CONT(income, 0.9) AS "q[0.9]", '
     "COUNT(*) FROM people GROUP BY 1 ORDER BY 2 DESC, 3 DESC, 4"),
])
def test_a_list_of_quantiles_is_one_quantile_per_q(written, canonical):
    """The same plan (each output's aggregate is a new Quantile per call, so compared by its q)."""
    ours, theirs = _plan(written), _plan(canonical)

    def shape(plan):
        return [(o.name, o.expression, o.measurements, o.operand, getattr(o.aggregate, "q", None))
                for o in plan.outputs]
    assert shape(ours) == shape(theirs)
    assert dataclasses.replace(ours, outputs=()) == dataclasses.replace(theirs, outputs=())


def test_a_list_of_quantiles_reads_one_histogram():
    """Every q reads the one noisy histogram of the operand: the list costs what one q costs."""
    listed = _plan("SELECT QUANTILE_CONT(age, [0.1, 0.5, 0.9]) FROM people")
    single = _plan("SELECT QUANTILE_CONT(age, 0.5) FROM people")
    assert listed.measurements == single.measurements and len(listed.measurements) == 1
    assert len(listed.outputs) == 3


_OWN_ITEM = "a list of qs is a SELECT item of its own"


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT QUANTILE_CONT(age, []) FROM people", "a list of 1 to 100 qs in [0, 1] is accepted, got 0"),
    ("SELECT QUANTILE_CONT(age, [0.5, 1.5]) FROM people", "q must be in [0, 1], got 1.5"),
    ("SELECT QUANTILE_CONT(age, [0.5, 'x']) FROM people", "takes a number literal q in [0, 1]"),
    ("SELECT COUNT(*) FROM people HAVING QUANTILE_CONT(age, [0.5, 0.9]) > 3", _OWN_ITEM),
    ("SELECT QUANTILE_CONT(age, [0.5, 0.9]) + 1 FROM people", _OWN_ITEM),
])
def test_a_list_of_quantiles_outside_a_select_item_or_of_bad_qs_is_refused(sql, fragment):
    assert fragment in _refusal(sql)


def test_a_list_of_quantiles_is_answered_with_an_interval_per_q(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(people_db, policy, ledger) as db:
        listed = db.explain("SELECT QUANTILE_CONT(age, [0.25, 0.5, 0.75]) FROM people", epsilon=1.0)
        single = db.explain("SELECT MEDIAN(age) FROM people", epsilon=1.0)
        result = db.query("SELECT QUANTILE_CONT(age, [0.25, 0.5, 0.75]) FROM people", epsilon=5.0)
    assert listed.epsilon_dp == single.epsilon_dp
    assert [a.sensitivity for a in listed.aggregates] == [a.sensitivity for a in single.aggregates]
    assert list(result.df.columns) == [f"QUANTILE_CONT(age, {q})" for q in (0.25, 0.5, 0.75)]
    assert result.ci95.notna().all().all()
    values = result.df.iloc[0].to_numpy(float)
    assert (np.diff(values) >= 0).all() and ((values >= 0) & (values <= 100)).all()


# A date column ± INTERVAL compared with a literal (docs/theory.md §26.3): the literal moves.
@pytest.mark.parametrize("written, canonical", [
    ("SELECT COUNT(*) FROM people WHERE day + INTERVAL 7 DAY > DATE '2024-01-10'",
     "SELECT COUNT(*) FROM people WHERE day > DATE '2024-01-03'"),
    ("SELECT COUNT(*) FROM people WHERE '2024-01-10' <= INTERVAL 2 WEEK + day",
     "SELECT COUNT(*) FROM people WHERE DATE '2023-12-27' <= day"),
    ("SELECT COUNT(*) FROM people WHERE day - INTERVAL 1 DAY BETWEEN '2024-01-02' AND DATE '2024-01-09'",
     "SELECT COUNT(*) FROM people WHERE day BETWEEN DATE '2024-01-03' AND DATE '2024-01-10'"),
    ("SELECT COUNT(*) FROM people WHERE (day + INTERVAL 1 DAY) IN ('2024-01-07', '2024-03-01')",
     "SELECT COUNT(*) FROM people WHERE day IN (DATE '2024-01-06', DATE '2024-02-29')"),
    ("SELECT COUNT(*) FROM people WHERE day + INTERVAL 36 HOUR < TIMESTAMP '2024-01-05 00:00:00'",
     "SELECT COUNT(*) FROM people WHERE day < TIMESTAMP '2024-01-03 12:00:00'"),
    ("SELECT day, COUNT(*) FROM people WHERE day + INTERVAL 7 DAY >= '2024-02-06' GROUP BY day",
     "SELECT day, COUNT(*) FROM people WHERE day >= DATE '2024-01-30' GROUP BY day"),
])
def test_a_date_column_plus_an_interval_moves_the_literal_instead(written, canonical):
    plan = _dated(written)
    assert plan == _dated(canonical)
    if plan.group_by:
        assert len(plan.group_by[0].keys) == 2  # WHERE narrows the days as the moved literal does


@pytest.mark.parametrize("predicate, moved", [
    ("d + INTERVAL 7 DAY > DATE '2024-01-10'", "d > DATE '2024-01-03'"),
    ("d - INTERVAL 3 WEEK <= DATE '2024-01-10'", "d <= DATE '2024-01-31'"),
    ("d + INTERVAL 36 HOUR = TIMESTAMP '2024-01-05 12:00:00'", "d = TIMESTAMP '2024-01-04 00:00:00'"),
    ("d + INTERVAL 1 DAY IS DISTINCT FROM DATE '2024-03-01'", "d IS DISTINCT FROM DATE '2024-02-29'"),
])
def test_moving_the_literal_keeps_the_rows_duckdb_keeps(predicate, moved):
    """On every kind of date a row can hold (infinite, DuckDB's extreme years, NULL, each side of
    the literal), DuckDB's shifted predicate and the moved one hold on the same rows, and the
    moved one never shifts a row (so an extreme date cannot make it fail)."""
    days = ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-30", "2024-01-31", "2024-02-29",
            "2024-03-01", "2024-01-05", "2024-01-03", "infinity", "-infinity", "0001-01-01",
            "9999-12-31"]
    conn = duckdb.connect()
    conn.execute("CREATE TABLE t AS SELECT CAST(v AS DATE) AS d FROM (SELECT UNNEST(?) AS v "
                 "UNION ALL SELECT NULL)", [days])
    shifted = conn.execute(f"SELECT d, ({predicate}) FROM t ORDER BY d").fetchall()
    assert shifted == conn.execute(f"SELECT d, ({moved}) FROM t ORDER BY d").fetchall()
    sql = f"SELECT COUNT(*) FROM people WHERE {predicate.replace('d ', 'day ', 1)}"
    assert "INTERVAL" not in build_plan(parse_select(sql), DATED, sql).where.sql()


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM people WHERE day + INTERVAL 1 MONTH > DATE '2024-01-10'",
     "day + INTERVAL '1' MONTH refused: a date column compared with a literal moves by a fixed "
     "length (weeks, days, hours, minutes, seconds); a month step has none"),
    ("SELECT COUNT(*) FROM people WHERE day + INTERVAL 1 DAY > '2024-13-01'", "is not a valid date"),
    ("SELECT COUNT(*) FROM people WHERE day + INTERVAL 1 DAY > day", "arithmetic needs numbers"),
    # A grouped shift of a fixed length is a key (docs/theory.md §32.2); a calendar one is not.
    ("SELECT day + INTERVAL 1 MONTH, COUNT(*) FROM people GROUP BY 1", "a month step has none"),
])
def test_a_shift_without_a_fixed_length_or_a_literal_is_refused(sql, fragment):
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select(sql), DATED, sql)
    assert fragment in str(info.value)
