"""Nothing fails after a charge: the noise, post-processing and the complete answer are made
inside the charge's transaction and stored with it; `history` returns exactly what was
printed, with no second charge and no fresh noise; version 2 ledgers migrate in place."""

from __future__ import annotations

import contextlib
import json
import sqlite3

import pytest
from dpsql.engine import PrivateDatabase, postprocess
from dpsql.engine.accounting.ledger_binding import LedgerBinding
from dpsql.engine.errors import DpsqlError
from dpsql.engine.report.build import build_report

from tests.support import cli_paths, create_ledger, run_cli, write_policy


def _charges(ledger) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT id, epsilon_dp FROM charges").fetchall()


def _history(capsys, setup, *extra) -> tuple[int, str, str]:
    return run_cli(capsys, "history", "--ledger", str(setup.ledger), *extra)


def test_rich_markup_in_an_alias_is_printed_literally_and_stored(capsys, setup):
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                          'SELECT COUNT(*) AS "[/x]", COUNT(*) AS "[bold]b" FROM people')
    assert code == 0, err
    assert "[/x]" in out and "[bold]b" in out
    (entry,) = json.loads(_history(capsys, setup, "--format", "json")[1])
    assert entry["answer"]["columns"] == ["[/x]", "[bold]b"]
    code, again, _ = _history(capsys, setup, "--id", str(entry["id"]))
    assert code == 0 and "[/x]" in again
    cell = next(line for line in out.splitlines() if "±" in line)
    assert cell in again, "the table printed again shows the same noisy values"
    assert len(_charges(setup.ledger)) == 1


def test_null_output_column_in_json_is_null_and_history_returns_the_printed_answer(capsys, setup):
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", "--format", "json",
                          "SELECT CAST(NULL AS BOOLEAN) AS b, COUNT(*) AS n FROM people")
    assert code == 0, err
    printed = json.loads(out)
    assert printed["rows"][0][0] is None and isinstance(printed["rows"][0][1], int)
    code, again, _ = _history(capsys, setup, "--id", "1", "--format", "json")
    assert code == 0 and json.loads(again) == printed
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        (entry,) = db.history()
        assert entry.answer == printed and db.history(id=1) == (entry,)
        assert db.budget().spent_dp == printed["epsilon_dp"], "fetching again charged nothing"
    assert len(_charges(setup.ledger)) == 1


@pytest.mark.parametrize("sql", ["SELECT COUNT(*) AS n FROM people",
                                 "SELECT state, AVG(income) AS a FROM people GROUP BY state"])
def test_json_at_the_largest_epsilon_is_valid_json_and_stored(capsys, setup, sql):
    write_policy(setup.policy, {"budget": {"epsilon": 1e7}})
    ledger = create_ledger(setup.ledger.with_name("big.sqlite"), setup.policy)
    code, out, err = run_cli(capsys, "query", "--db", str(setup.db), "--policy", str(setup.policy),
                          "--ledger", str(ledger), "--epsilon", "100", "--format", "json", sql)
    assert code == 0, err
    printed = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    code, again, _ = run_cli(capsys, "history", "--ledger", str(ledger), "--id", "1", "--format",
                          "json")
    assert json.loads(again) == printed


def test_post_processing_failing_after_the_noise_charges_releases_nothing_and_halts(
        capsys, setup, monkeypatch):
    """A HAVING/ORDER BY that passes the dry run on zeros and then fails on the real noisy
    values: the charge rolls back, the message carries no noisy value, and the database halts
    (a per-query refusal would answer a noise-dependent question for free, again and again)."""
    real = postprocess.finish

    def fails_on_noisy_values(conn, plan, sql, frame):
        if frame["__m0"].abs().sum() > 0:  # the dry run sees zeros; the real run does not
            raise ValueError(f"cannot evaluate on {frame['__m0'].tolist()}")
        return real(conn, plan, sql, frame)

    monkeypatch.setattr(postprocess, "finish", fails_on_noisy_values)
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                          "SELECT COUNT(*) AS n FROM people HAVING n > 10")
    assert code == 4 and out == "" and err.count("\n") == 1
    assert "halted" in err and "nothing was charged" in err and "[" not in err
    assert _charges(setup.ledger) == []
    assert json.loads(_history(capsys, setup, "--format", "json")[1]) == []
    monkeypatch.setattr(postprocess, "finish", real)
    code, _, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                        "SELECT COUNT(*) AS n FROM people")
    assert code == 4 and "halted" in err and _charges(setup.ledger) == []


def test_every_answer_is_stored_with_its_charge(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, analyst="ann",
                                 reuse=False) as db:  # three charged answers of one query
        results = [db.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon=0.5)
                   for _ in range(3)]
        history = db.history()
    assert [e.id for e in history] == [r.id for r in results] == [1, 2, 3]
    for entry, result in zip(history, results, strict=True):
        assert entry.answer == result.to_dict() and entry.analyst == "ann"
        assert entry.answer["rows"] == [[s, int(n)] for s, n in result.df.itertuples(index=False)]
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger, analyst="bob") as db:
        assert db.history() == ()
        with pytest.raises(DpsqlError, match="no released answer with id 1 for analyst 'bob'"):
            db.history(id=1)


V2_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL,
    analyst TEXT NOT NULL, sql TEXT NOT NULL, epsilon REAL NOT NULL,
    epsilon_dp REAL NOT NULL CHECK (epsilon_dp >= 0), mode TEXT NOT NULL, k INTEGER NOT NULL,
    eta REAL NOT NULL, aggregates TEXT NOT NULL);
CREATE TABLE bindings (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL,
    budget REAL NOT NULL, k INTEGER NOT NULL, eta REAL NOT NULL);
"""


def _v2_ledger(path, charges: int) -> None:
    """A ledger exactly as schema version 2 wrote it, with `charges` answers."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(V2_SCHEMA)
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [
            ("schema_version", "2"), ("hash_key", "00" * 16), ("created", "2026-01-01T00:00:00"),
            ("budget", "1000.0"), ("k", "1"), ("eta", "0.0")])
        conn.execute("INSERT INTO bindings (time, budget, k, eta) VALUES ('t', 1000.0, 1, 0.0)")
        conn.executemany(
            "INSERT INTO charges (time, analyst, sql, epsilon, epsilon_dp, mode, k, eta, "
            "aggregates) VALUES ('2026-01-01T00:00:00+00:00', 'analyst', ?, 0.5, 0.5, "
            "'independent', 1, 0.0, '[]')", [(f"SELECT COUNT(*) FROM people -- {i}",)
                                              for i in range(charges)])
        conn.commit()


def test_a_version_2_ledger_is_migrated_in_place_and_keeps_its_spending(setup, capsys):
    setup.ledger.unlink()
    _v2_ledger(setup.ledger, charges=3)
    assert build_report(setup.ledger).totals.spent_dp == 1.5, "reports read version 2 as it is"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        assert db.budget().spent_dp == 1.5
        assert [e.answer for e in db.history()] == [None, None, None]
        fresh = db.query("SELECT COUNT(*) AS n FROM people", epsilon=0.5)
        assert db.history(id=fresh.id)[0].answer == fresh.to_dict()
    with contextlib.closing(sqlite3.connect(setup.ledger)) as conn:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        bindings = conn.execute("SELECT budget, k, eta, mode FROM bindings").fetchall()
    assert meta["schema_version"] == "6" and meta["mode"] == "auto"
    assert bindings == [(1000.0, 1, 0.0, "auto")]
    assert _charges(setup.ledger)[:3] == [(1, 0.5), (2, 0.5), (3, 0.5)]
    code, _, err = _history(capsys, setup, "--id", "1")
    assert code == 2 and "charged before answers were stored" in err


def test_a_failed_migration_changes_nothing(setup, monkeypatch):
    """The migration is one transaction: if it fails midway the ledger stays version 2."""
    from dpsql.engine.accounting import ledger as ledger_module
    from dpsql.engine.accounting import ledger_schema

    setup.ledger.unlink()
    _v2_ledger(setup.ledger, charges=2)
    broken = (*ledger_schema._MIGRATE_2_TO_3[:2], "THIS IS NOT SQL")
    monkeypatch.setitem(ledger_schema.MIGRATIONS, "2", broken)
    with pytest.raises(DpsqlError):
        ledger_module.Ledger(setup.ledger, LedgerBinding(1000.0, 1, 0.0))
    with contextlib.closing(sqlite3.connect(setup.ledger)) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(charges)")]
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert "answer" not in columns and version == ("2",)
    assert _charges(setup.ledger) == [(1, 0.5), (2, 0.5)]


def test_a_stored_answer_with_nulls_prints_again_in_a_table(capsys, setup):
    """A value that was NaN or infinite when released is stored as null; printing it again
    from history must not fail."""
    from dpsql.engine.commands_output import print_result
    from dpsql.engine.result import QueryResult

    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        stored = db.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon=1).to_dict()
    stored["rows"][0][1] = None
    stored["ci95_bounds"][0][1] = None  # a NULL value has no interval to show
    again = QueryResult.from_dict(stored, id=1)
    print_result(again)
    out = capsys.readouterr().out
    assert "nan ±" in out and again.to_dict() == stored
