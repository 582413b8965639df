"""The hostile corpus: every query in tests/hostile/queries.jsonl is refused with exit code 2
and a one-line message naming the construct, charges nothing and never reaches the data (at
most the schema-only gate binds it)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dpsql.engine import cli
from dpsql.engine.backends import duckdb_execute as execute

CORPUS = Path(__file__).parent / "hostile" / "queries.jsonl"
ENTRIES = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
REQUIRED_CATEGORIES = {
    "file_reader", "statement", "multi", "subquery", "cte", "setop", "window", "nondeterministic",
    "catalog", "star", "raw_column", "probing", "group_by", "unit_aggregate", "clamp_literal",
    "nan_inf", "identifier", "join", "misc", "garbage", "implicit_cast", "text_to_number",
    "post_oracle", "ignored_option", "missing_argument", "dates", "unnest",
}


def test_corpus_is_large_and_covers_every_category():
    assert len(ENTRIES) >= 150
    assert {e["category"] for e in ENTRIES} == REQUIRED_CATEGORIES
    for entry in ENTRIES:
        assert set(entry) == {"category", "sql", "expect"} and entry["expect"]
    assert len({e["sql"] for e in ENTRIES}) == len(ENTRIES), "duplicate corpus entries"


@pytest.fixture(scope="module")
def shared(people_db, tmp_path_factory):
    """The people data with the public `regions` table, the parent `households` table (a key
    repeated, a NULL key) and the private `visits` table beside it, so join attacks meet real
    ones; people's note declared a list (docs/theory.md §31), so UNNEST attacks meet one."""
    from tests.library import with_library
    from tests.support import create_ledger, with_every_join

    root = tmp_path_factory.mktemp("hostile")
    db, policy = with_library(*with_every_join(root, people_db))  # a date column, a catalogue
    declared = yaml.safe_load(policy.read_text())
    declared["tables"]["people"]["columns"]["note"]["list"] = {"separator": ";", "max_items": 2,
                                                              "domain": ["row", "other"]}
    policy.write_text(yaml.safe_dump(declared, sort_keys=False))
    return db, policy, create_ledger(root / "ledger.sqlite", policy)


@pytest.fixture
def duckdb_spy(monkeypatch) -> list[str]:
    """Record every attempt to run analyst-derived SQL on the data connection."""
    calls: list[str] = []
    real_run, real_bound = execute.run, execute.bound_units

    def run(conn, sql, n_keys):
        calls.append(f"run: {sql}")
        return real_run(conn, sql, n_keys)

    def bound_units(conn, table, key, columns=None):
        calls.append(f"bound: {table.name}")
        return real_bound(conn, table, key, columns)

    monkeypatch.setattr(execute, "run", run)
    monkeypatch.setattr(execute, "bound_units", bound_units)
    return calls


def _cli(shared, sql: str) -> int:
    db, policy, ledger = shared
    args = ["query", "--db", str(db), "--policy", str(policy), "--ledger", str(ledger),
            "--epsilon", "0.5", "--", sql]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    return exit_info.value.code


def _charges(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['category']}-{i}" for i, e in enumerate(ENTRIES)])
def test_refused_before_duckdb_with_exit_2(entry, shared, duckdb_spy, capsys):
    code = _cli(shared, entry["sql"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert entry["expect"] in err, err
    assert duckdb_spy == []
    assert _charges(shared[2]) == 0


def test_spies_see_an_accepted_query(shared, duckdb_spy, capsys, tmp_path):
    """The harness would notice a query reaching DuckDB: an accepted one does."""
    from tests.support import create_ledger

    db, policy, _ = shared
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    code = _cli((db, policy, ledger), "SELECT COUNT(*) FROM people")
    assert code == 0, capsys.readouterr().err
    assert [c.split(":")[0] for c in duckdb_spy] == ["bound", "run"]
    assert _charges(tmp_path / "ledger.sqlite") == 1


@pytest.mark.parametrize("index", [0, 20, 70, 140, 200])
def test_real_process_exit_code(index, shared):
    entry = ENTRIES[index]
    db, policy, ledger = shared
    proc = subprocess.run(
        [sys.executable, "-m", "dpsql", "query", "--db", str(db), "--policy", str(policy),
         "--ledger", str(ledger), "--epsilon", "0.5", "--", entry["sql"]],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 2, proc.stderr
    assert entry["expect"] in proc.stderr and proc.stderr.count("\n") == 1
    assert proc.stdout == ""
    assert _charges(ledger) == 0
