"""End-to-end through the Python API: answers, metadata, explain, bad input and the budget."""

from __future__ import annotations

import math

import duckdb
import pytest
from dpsql.calibration import DependenceModel, calibrate, transcript_level
from dpsql.engine import BudgetExhausted, InputError, LedgerError, PolicyError, PrivateDatabase, QueryRefused
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding

from tests.support import create_ledger, write_policy


def _connect(setup, **kwargs):
    return PrivateDatabase.connect(setup.db, policy=setup.policy, ledger=setup.ledger, **kwargs)


def _spent(setup) -> float:
    with _connect(setup) as db:
        return db.budget().spent_dp


def test_grouped_count_lists_every_domain_value_with_intervals(setup):
    with _connect(setup) as db:
        res = db.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon=1.0)
    assert list(res.df.columns) == ["state", "n"]
    assert list(res.df["state"]) == ["CA", "NY", "TX", "WA"]  # "ZZ" rows are outside the domain
    assert res.ci95["state"].isna().all()
    (agg,) = res.aggregates
    assert agg.mechanism == "discrete_laplace" and agg.sensitivity == 4  # 2m, m = 2
    assert agg.scale == pytest.approx(4 / res.epsilon_dp)
    assert res.ci95["n"].iloc[0] == pytest.approx(agg.ci95_halfwidth)
    assert all(isinstance(v, int) for v in res.df["n"].tolist())


def test_empty_group_appears_with_a_noisy_zero(setup):
    with _connect(setup) as db:
        res = db.query("SELECT sick, COUNT(*) FROM people WHERE age > 1000 GROUP BY sick", epsilon=1.0)
    assert list(res.df["sick"]) == [False, True]
    assert all(abs(v) < 60 for v in res.df["COUNT(*)"])  # true value 0; scale 4


def test_sum_and_avg_are_clamped_and_noisy(setup):
    with _connect(setup) as db:
        res = db.query("SELECT SUM(income), AVG(income), COUNT(*) FROM people", epsilon=1.0)
    functions = [a.function for a in res.aggregates]
    assert functions == ["SUM(income)", "COUNT(income)", "COUNT(*)"]
    assert all(a.epsilon_dp == pytest.approx(res.epsilon_dp / 3) for a in res.aggregates)
    total = next(a for a in res.aggregates if a.function == "SUM(income)")
    assert total.mechanism == "laplace" and total.sensitivity == 2 * 1000.0
    mean = res.df["AVG(income)"].iloc[0]
    assert 0 <= mean <= 1000
    assert res.ci95["AVG(income)"].iloc[0] > 0


def test_results_vary_between_runs_but_centre_on_the_truth(setup, people_db):
    exact = duckdb.connect(str(people_db), read_only=True).execute(
        "SELECT COUNT(*) FROM (SELECT * FROM people QUALIFY row_number() OVER (PARTITION BY person_id) <= 2)"
    ).fetchone()[0]
    with _connect(setup, reuse=False) as db:
        values = [db.query("SELECT COUNT(*) FROM people", epsilon=2.0).df.iloc[0, 0] for _ in range(40)]
    assert len(set(values)) >= 3  # discrete Laplace at scale 1: P(fewer) is about 1e-7
    # scale 2/2 = 1: the mean of 40 draws is within 1.5 of the truth with overwhelming probability
    assert abs(sum(values) / len(values) - exact) < 1.5


def test_json_form_has_the_documented_keys(setup):
    with _connect(setup) as db:
        out = db.query("SELECT COUNT(*) FROM people", epsilon=0.5).to_dict()
    for key in ("columns", "rows", "epsilon", "epsilon_dp", "mode", "k", "eta", "aggregates", "budget"):
        assert key in out
    assert set(out["aggregates"][0]) >= {"column", "mechanism", "sensitivity", "scale", "ci95_halfwidth"}
    assert set(out["budget"]) >= {"total", "spent_ip", "spent_dp", "remaining"}


def test_having_order_limit_run_on_noisy_values(setup):
    with _connect(setup) as db:
        res = db.query(
            "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING n > -1000 "
            "ORDER BY n DESC LIMIT 2", epsilon=1.0)
    assert len(res.df) == 2
    assert res.df["n"].iloc[0] >= res.df["n"].iloc[1]


def test_explain_spends_nothing_and_matches_the_query(setup):
    with _connect(setup) as db:
        ex = db.explain("SELECT state, SUM(age) FROM people GROUP BY state", epsilon=1.0)
        assert db.budget().spent_dp == 0
    assert ex.admissible and ex.groups == 4 and ex.group_by == ("state",)
    assert "dpsql_bounded" in ex.rewritten_sql  # always, whether or not a unit is over the bound
    (agg,) = ex.aggregates
    assert agg.sensitivity == 2 * 2 * 100  # 2m max(|lo|, |hi|)
    assert agg.scale == pytest.approx(agg.sensitivity / ex.epsilon_dp)


def test_calibration_drives_the_noise(tmp_path, setup):
    policy = write_policy(tmp_path / "dep.yaml", {"dependence": {"k": 10, "eta": 0.001}})
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy=policy, ledger=ledger) as db:
        res = db.query("SELECT COUNT(*) FROM people", epsilon=1.0)
        group = db.query("SELECT COUNT(*) FROM people", epsilon=1.0, mode="group")
    want = calibrate(1.0, DependenceModel(10, 0.001)).epsilon_dp
    assert res.mode == "tight" and res.epsilon_dp == pytest.approx(want)
    assert group.epsilon_dp == pytest.approx(0.1)
    assert res.aggregates[0].scale == pytest.approx(2 / want)


def test_budget_is_enforced_and_refusal_charges_nothing(tmp_path, setup):
    policy = write_policy(tmp_path / "small.yaml", {"budget": {"epsilon": 1.0}})
    ledger = create_ledger(tmp_path / "small.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy=policy, ledger=ledger, reuse=False) as db:
        db.query("SELECT COUNT(*) FROM people", epsilon=0.6)
        with pytest.raises(BudgetExhausted) as info:
            db.query("SELECT COUNT(*) FROM people", epsilon=0.6)
        assert db.budget().spent_dp == pytest.approx(0.6)
        db.query("SELECT COUNT(*) FROM people", epsilon=0.4)
        assert db.budget().remaining == pytest.approx(0, abs=1e-9)
    message = str(info.value)
    assert message.startswith("over budget") and "asks epsilon 0.6" in message
    assert "largest epsilon you can still ask is 0.4" in message
    assert (info.value.asked, info.value.cost) == (0.6, pytest.approx(0.6))
    assert info.value.largest_epsilon == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT COUNT(*) FROM nobody", "unknown table 'nobody'"),
        ("SELECT COUNT(salary) FROM people", "unknown column 'salary'"),
        ("SELECT SUM(note) FROM people", "SUM(note) refused: the column is str"),
        ("SELECT note, COUNT(*) FROM people GROUP BY note", "GROUP BY note refused: the column has no public"),
        ("SELECT COUNT(*) FROM people; SELECT 1", "2 statements given"),
        ("DELETE FROM people", "DELETE statement refused"),
        ("SELECT COUNT(*) FROM read_csv('people.csv')", "file reader"),
        ("SELECT * FROM people", "SELECT * refused"),
        ("SELECT age, COUNT(*) FROM people", "column age in SELECT refused"),
        ("SELECT state, COUNT(*) FROM people", "column state in SELECT refused"),
        ("SELECT COUNT(*) FROM people p JOIN people q ON p.age = q.age", "JOIN refused"),
    ],
)
def test_refusals_name_the_construct_and_charge_nothing(setup, sql, fragment):
    with _connect(setup) as db:
        with pytest.raises(QueryRefused) as info:
            db.query(sql, epsilon=0.5)
    assert fragment in str(info.value)
    assert _spent(setup) == 0


def test_sum_of_an_unbounded_column_is_refused(tmp_path, setup):
    policy = write_policy(tmp_path / "p.yaml", {"tables": {"people": {"columns": {
        "age": {"type": "int"}}}}})
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy=policy, ledger=ledger) as db:
        with pytest.raises(QueryRefused, match="gives no lower/upper bounds for age"):
            db.query("SELECT SUM(age) FROM people", epsilon=1)


@pytest.mark.parametrize("epsilon", [0, -1, math.nan, math.inf, "1", True])
def test_bad_epsilon_is_refused(setup, epsilon):
    with _connect(setup) as db:
        with pytest.raises(InputError, match="epsilon must be a finite number > 0"):
            db.query("SELECT COUNT(*) FROM people", epsilon=epsilon)
    assert _spent(setup) == 0


def test_missing_data_file_and_mismatched_schema(tmp_path, setup):
    with pytest.raises(InputError, match="data file not found"):
        PrivateDatabase.connect(tmp_path / "none.duckdb", policy=setup.policy, ledger=setup.ledger)
    policy = write_policy(tmp_path / "p.yaml", {"tables": {"people": {"columns": {
        "height": {"type": "float"}}}}})
    with pytest.raises(PolicyError, match="tables.people.columns.height: no such column"):
        PrivateDatabase.connect(setup.db, policy=policy, ledger=setup.ledger)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_csv_and_parquet_files_load_as_a_table_named_after_the_stem(tmp_path, setup, people_db, suffix):
    target = tmp_path / f"people.{suffix}"
    with duckdb.connect(str(people_db), read_only=True) as conn:
        conn.execute(f"COPY people TO '{target}'")
    with PrivateDatabase.connect(target, policy=setup.policy, ledger=setup.ledger) as db:
        res = db.query("SELECT sick, COUNT(*) FROM people GROUP BY sick", epsilon=1)
        assert len(res.df) == 2
        with pytest.raises(duckdb.PermissionException):
            db._backend.conn.execute(f"SELECT * FROM read_csv('{target}')")  # external access is off
    # the same for a file whose stem is not the policy's table
    other = tmp_path / f"other.{suffix}"
    target.rename(other)
    with pytest.raises(PolicyError, match="tables.people: no such table"):
        PrivateDatabase.connect(other, policy=setup.policy, ledger=setup.ledger)


def test_ledger_from_another_policy_is_refused(tmp_path, setup):
    with _connect(setup) as db:
        db.query("SELECT COUNT(*) FROM people", epsilon=0.5)
    policy = write_policy(tmp_path / "p.yaml", {"budget": {"epsilon": 5000.0}})
    with pytest.raises(LedgerError) as refused:
        PrivateDatabase.connect(setup.db, policy=policy, ledger=setup.ledger)
    assert str(refused.value) == (
        f"ledger {setup.ledger} was created for a policy with budget 1000.0, k 1, eta 0.0, mode "
        "auto (or tightened to it since), and this policy is more lenient (budget 1000.0 -> "
        "5000.0); past spending is never re-interpreted more leniently: keep the policy (a "
        "smaller budget, larger k or eta, larger etas per column set, or a more conservative "
        "mode is accepted), or start a new ledger")
    assert Ledger(setup.ledger, LedgerBinding(1000.0, 1, 0.0)).spent_dp() == pytest.approx(0.5)


def test_identifiers_are_case_insensitive_and_may_be_quoted(setup):
    with _connect(setup) as db:
        res = db.query('SELECT "State", count(*) AS "N" FROM "People" AS P WHERE P."AGE" >= 0 '
                       'GROUP BY "STATE"', epsilon=1.0)
    assert list(res.df.columns) == ["State", "N"] and len(res.df) == 4  # names as written


def test_data_connection_is_read_only_and_locked(setup):
    with _connect(setup) as db:
        for statement in ("SET enable_external_access = true", "DROP TABLE people",
                          "CREATE TABLE t AS SELECT 1", "INSTALL httpfs"):
            with pytest.raises(duckdb.Error):
                db._backend.conn.execute(statement)
        assert db._backend.conn.execute("SELECT count(*) FROM people").fetchone()[0] > 0


def test_transcript_level_composes_in_dp_space(tmp_path, setup):
    """Two answers at epsilon 0.5 under k=10, eta=0.001 are together about 2.31-private, not 1.0."""
    policy = write_policy(tmp_path / "dep.yaml", {"dependence": {"k": 10, "eta": 0.001}})
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect(setup.db, policy=policy, ledger=ledger, reuse=False) as db:
        first = db.query("SELECT COUNT(*) FROM people", epsilon=0.5)
        ex = db.explain("SELECT COUNT(*) FROM people", epsilon=0.5)
        second = db.query("SELECT COUNT(*) FROM people", epsilon=0.5)
    model = DependenceModel(10, 0.001)
    assert first.level_before == 0 and first.level_after == pytest.approx(0.5)
    assert ex.level_before == pytest.approx(0.5) and ex.level_after == pytest.approx(second.level_after)
    assert second.level_after == pytest.approx(transcript_level(2 * second.epsilon_dp, model))
    assert second.level_after == pytest.approx(2.3055, abs=1e-3)
    assert second.budget.spent_ip == pytest.approx(second.level_after)
