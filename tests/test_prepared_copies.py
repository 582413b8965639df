"""Bounded copies prepared once by the owner: used by every later connection while nothing they
depend on has changed, never once something has, and identical to bounding in memory."""

from __future__ import annotations

import json
import os
import stat
import sys

import duckdb
import pytest
import yaml
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.backends.bounded_store import store_dir
from dpsql.engine.database import PrivateDatabase
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import bounded_table

from tests.support import BASE_POLICY, create_ledger, make_people, run_cli, write_policy

COUNT = "SELECT COUNT(*) AS n FROM people"


@pytest.fixture
def owner(tmp_path):
    db = make_people(tmp_path / "people.duckdb", units=400)
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    return db, policy, ledger


def _prepare(capsys, db, policy, ledger) -> str:
    code, out, err = run_cli(capsys, "prepare", "--db", str(db), "--policy", str(policy),
                             "--ledger", str(ledger))
    assert code == 0, err
    return out


def _bounded_rows(conn: PrivateDatabase) -> list[tuple]:
    table = conn.policy.tables["people"]
    conn._backend.bound(table, conn.ledger.hash_key)
    return sorted(conn._backend.conn.execute(f"SELECT * FROM {bounded_table(table).sql('duckdb')}")
                  .fetchall(), key=repr)


def _builds(monkeypatch) -> list[str]:
    """Spy on the in-memory bounding statement."""
    built: list[str] = []
    original = execute.bounded_copy_sql
    monkeypatch.setattr(execute, "bounded_copy_sql",
                        lambda *args: built.append(args[0].name) or original(*args))
    return built


def test_a_prepared_copy_is_used_and_holds_exactly_the_rows_bounding_keeps(owner, capsys, monkeypatch):
    db, policy, ledger = owner
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        in_memory = _bounded_rows(conn)
    out = _prepare(capsys, db, policy, ledger)
    assert "people" in out and "rows kept" in out
    built = _builds(monkeypatch)
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        assert _bounded_rows(conn) == in_memory
        assert conn.query(COUNT, epsilon=1.0).df["n"][0] is not None
        # No eta_by_columns set or model names a column, so every column set has the same eta and
        # every query reads the copy of every column (docs/theory.md §28): the prepared one.
        for sql in ["SELECT SUM(income) AS s FROM people WHERE age > 40",
                    "SELECT state, COUNT(*) AS n FROM people WHERE sick GROUP BY state"]:
            conn.query(sql, epsilon=1.0)
    assert built == [], "the prepared copy was used, nothing was bounded in memory"
    files = list(store_dir(ledger).glob("people-*.duckdb"))
    assert len(files) == 1  # the copy of every column
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert stat.S_IMODE(store_dir(ledger).stat().st_mode) == 0o700


def test_a_copy_is_never_used_once_the_data_or_the_bounding_inputs_change(owner, tmp_path, capsys,
                                                                          monkeypatch):
    db, policy, ledger = owner
    _prepare(capsys, db, policy, ledger)
    built = _builds(monkeypatch)
    # The data changes: one unit gets another row.
    with duckdb.connect(str(db)) as conn:
        conn.execute("INSERT INTO people SELECT * FROM people LIMIT 1")
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        conn.query(COUNT, epsilon=1.0)
    assert built == ["people"]
    # A new ledger has a new secret hash key; a policy with another bound keeps other rows.
    _prepare(capsys, db, policy, ledger)
    other = create_ledger(tmp_path / "other.sqlite", policy)
    os.rename(store_dir(ledger), store_dir(other))
    with PrivateDatabase.connect(db, policy, other) as conn:
        conn.query(COUNT, epsilon=1.0)
    assert built == ["people", "people"]
    looser = write_policy(tmp_path / "three.yaml", {"tables": {"people": {
        **BASE_POLICY["tables"]["people"], "max_rows_per_unit": 3}}})
    _prepare(capsys, db, looser, create_ledger(tmp_path / "three.sqlite", looser))
    with PrivateDatabase.connect(db, looser, tmp_path / "three.sqlite") as conn:
        conn.query(COUNT, epsilon=1.0)
    assert built == ["people", "people"], "prepared for this policy: used"


def test_a_csv_copy_matches_and_explain_bounds_nothing(tmp_path, capsys, monkeypatch):
    source = make_people(tmp_path / "source.duckdb", units=300)
    csv = tmp_path / "people.csv"
    with duckdb.connect(str(source), read_only=True) as conn:
        conn.execute(f"COPY people TO '{csv}' (HEADER)")
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(csv, policy, ledger) as conn:
        in_memory = _bounded_rows(conn)
    _prepare(capsys, csv, policy, ledger)
    built = _builds(monkeypatch)
    with PrivateDatabase.connect(csv, policy, ledger) as conn:
        conn.explain(COUNT, epsilon=1.0)
        assert _bounded_rows(conn) == in_memory
    assert built == []


def test_prepare_refuses_bad_input_in_one_line(owner, tmp_path, capsys):
    db, policy, ledger = owner
    code, _, err = run_cli(capsys, "prepare", "--db", str(tmp_path / "missing.duckdb"),
                           "--policy", str(policy), "--ledger", str(ledger))
    assert code == 2 and err.count("\n") == 1 and "not found" in err
    code, _, err = run_cli(capsys, "prepare", "--db", str(db), "--policy", str(policy),
                           "--ledger", str(tmp_path / "none.sqlite"))
    assert code != 0 and err.count("\n") == 1 and "ledger" in err


def test_a_query_that_bounds_the_table_itself_says_so_on_a_terminal(owner, capsys, monkeypatch):
    """Without a prepared copy a query read on a terminal says on stderr, before bounding, that
    it bounds the table once and how long that may take, and suggests `dpsql prepare`; a JSON
    answer's output and stderr are unchanged, and with the copy prepared nothing is said."""
    db, policy, ledger = owner
    paths = ["--db", str(db), "--policy", str(policy), "--ledger", str(ledger)]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, err = run_cli(capsys, "query", COUNT, "--epsilon", "1", *paths)
    assert code == 0 and "bounding" not in out
    (line,) = [line for line in err.splitlines() if "dpsql: bounding" in line]
    assert "bounding rows per person_id in people" in line and "per million rows" in line
    assert f"dpsql prepare --db {db} --policy {policy} --ledger {ledger}" in line
    # asked again with fresh noise, so the table is bounded again (not answered from the first)
    code, out, err = run_cli(capsys, "query", COUNT, "--epsilon", "1", "--format", "json",
                             "--no-reuse", *paths)
    assert code == 0 and err == "" and "n" in json.loads(out)["columns"]
    _prepare(capsys, db, policy, ledger)
    code, out, err = run_cli(capsys, "query", COUNT, "--epsilon", "1", "--no-reuse", *paths)
    assert code == 0 and "bounding" not in err


def test_prepare_writes_the_copy_of_each_declared_column_set(tmp_path, capsys, monkeypatch):
    """A column set the policy's eta_by_columns declares gets a prepared copy of its own,
    identical to the one bounded in memory; another set is bounded in memory on first use."""
    db = make_people(tmp_path / "people.duckdb", units=200)
    policy = write_policy(tmp_path / "policy.yaml", {"dependence": {
        "k": 2, "eta": 1.0, "eta_by_columns": [{"columns": ["sick"], "eta": 0.3}]}})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    sick = "SELECT COUNT(*) AS n FROM people WHERE sick"
    table = parse_policy(yaml.safe_load(policy.read_text())).tables["people"]
    copy = bounded_table(table, {"sick"}).sql("duckdb")
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        conn._backend.bound(table, conn.ledger.hash_key, {"sick"})
        in_memory = sorted(conn._backend.conn.execute(f"SELECT * FROM {copy}").fetchall(), key=repr)
    _prepare(capsys, db, policy, ledger)
    assert len(list(store_dir(ledger).glob("people-*.duckdb"))) == 3
    built = _builds(monkeypatch)
    with PrivateDatabase.connect(db, policy, ledger) as conn:
        conn.query(sick, epsilon=1.0)
        assert sorted(conn._backend.conn.execute(f"SELECT * FROM {copy}").fetchall(), key=repr) == in_memory
        assert built == []
        conn.query("SELECT COUNT(*) AS n FROM people WHERE age > 30", epsilon=1.0)
    assert built == ["people"]
