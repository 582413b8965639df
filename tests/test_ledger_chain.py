"""The ledger's hash chain: a ledger written by the engine verifies, and any edit of a charge
or of its stored answer, a deleted or reordered record, is named by `dpsql ledger verify`."""

from __future__ import annotations

import contextlib
import json
import sqlite3

import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.accounting.ledger_schema import SCHEMA_VERSION
from dpsql.engine.errors import LedgerError

from tests.support import run_cli

QUERIES = ["SELECT COUNT(*) AS n FROM people",
           "SELECT state, AVG(income) AS a FROM people GROUP BY state",
           "SELECT SUM(income) AS s, COUNT(*) AS n FROM people",
           "SELECT MEDIAN(age) AS m FROM people"]


@pytest.fixture
def charged(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        for sql in QUERIES:
            db.query(sql, epsilon=0.5)
    return setup


def _verify(capsys, ledger) -> tuple[int, str]:
    code, out, err = run_cli(capsys, "ledger", "verify", "--ledger", str(ledger))
    assert len((out + err).strip().splitlines()) == 1, out + err
    return code, (out + err).strip()


def _edit(ledger, *statements: tuple[str, list]) -> None:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        for sql, args in statements:
            conn.execute(sql, args)
        conn.commit()


def test_a_ledger_written_by_the_engine_verifies_and_reports_its_head(capsys, charged):
    code, line = _verify(capsys, charged.ledger)
    assert code == 0 and f"{len(QUERIES)} records verified" in line and "head link" in line
    # a new charge: the head link moves
    with PrivateDatabase.connect(charged.db, charged.policy, charged.ledger, reuse=False) as db:
        db.query(QUERIES[0], epsilon=0.5)
    code, after = _verify(capsys, charged.ledger)
    assert code == 0 and f"{len(QUERIES) + 1} records" in after
    assert after.split()[-1] != line.split()[-1], "the head link moves with each charge"


def _sql_byte(conn):
    (sql,) = conn.execute("SELECT sql FROM charges WHERE id = 2").fetchone()
    return sql[:-1] + chr(ord(sql[-1]) ^ 1)


@pytest.mark.parametrize(("edit", "bad", "words"), [
    (lambda c: [("UPDATE charges SET sql = ? WHERE id = 2", [_sql_byte(c)])], 2, "link"),
    (lambda c: [("UPDATE charges SET epsilon_dp = epsilon_dp / 2 WHERE id = 3", [])], 3, "link"),
    (lambda c: [("UPDATE charges SET time = '2020-01-01' WHERE id = 1", [])], 1, "link"),
    (lambda c: [("UPDATE answers SET answer = replace(answer, '\"rows\"', '\"rowz\"') "
                 "WHERE id = 2", [])], 2, "link"),
    (lambda c: [("DELETE FROM charges WHERE id = 2", []), ("DELETE FROM links WHERE id = 2", [])],
     3, "link"),
    (lambda c: [("DELETE FROM charges WHERE id = 2", [])], 2, "deleted"),
    (lambda c: [("UPDATE charges SET sql = (SELECT sql FROM charges WHERE id = 3) WHERE id = 2",
                 []), ("UPDATE charges SET sql = ? WHERE id = 3",
                       [c.execute("SELECT sql FROM charges WHERE id = 2").fetchone()[0]])],
     2, "link"),
], ids=["sql byte", "epsilon_dp lowered", "time", "answer", "middle row deleted",
        "charge row deleted", "rows swapped"])
def test_each_edit_is_found_naming_the_first_bad_record(capsys, charged, edit, bad, words):
    with contextlib.closing(sqlite3.connect(charged.ledger)) as conn:
        statements = edit(conn)
    _edit(charged.ledger, *statements)
    code, line = _verify(capsys, charged.ledger)
    assert code == 2 and f"record {bad}:" in line and words in line, line


def test_a_resealed_lower_spend_is_found_by_its_costs(capsys, charged):
    """An edit that keeps the chain (as the key holder could) is still checked against the
    record's own aggregates."""
    from dpsql.engine.accounting import chain

    with contextlib.closing(sqlite3.connect(charged.ledger, isolation_level=None)) as conn:
        conn.execute("UPDATE charges SET epsilon_dp = epsilon_dp / 2 WHERE id = 3")
        conn.execute("DROP TABLE links")
        chain.prepare(conn, charged.ledger)
    code, line = _verify(capsys, charged.ledger)
    assert code == 2 and "record 3:" in line and "sum of its aggregates" in line, line


def test_opening_a_ledger_whose_last_record_was_edited_is_refused(charged):
    _edit(charged.ledger, ("UPDATE charges SET epsilon_dp = 0 WHERE id = ?", [len(QUERIES)]))
    with pytest.raises(LedgerError, match=f"record {len(QUERIES)}: its link does not match"):
        PrivateDatabase.connect(charged.db, charged.policy, charged.ledger)


def test_an_old_ledger_is_chained_once_when_opened(capsys, charged):
    _edit(charged.ledger, ("DROP TABLE links", []))
    code, line = _verify(capsys, charged.ledger)
    assert code == 2 and "no chain" in line
    with PrivateDatabase.connect(charged.db, charged.policy, charged.ledger, reuse=False) as db:
        db.query(QUERIES[0], epsilon=0.5)
    code, line = _verify(capsys, charged.ledger)
    assert code == 0 and f"{len(QUERIES) + 1} records verified" in line
    with contextlib.closing(sqlite3.connect(charged.ledger)) as conn:
        answer = json.loads(conn.execute("SELECT answer FROM answers WHERE id = 1").fetchone()[0])
    assert answer["epsilon"] == 0.5


def test_a_kept_head_finds_deleted_last_records_and_a_rewritten_chain(capsys, charged):
    from dpsql.engine.accounting import chain

    code, line = _verify(capsys, charged.ledger)
    kept = line.split()[-1]
    assert code == 0 and kept.startswith(f"{len(QUERIES)}:")
    code, _, err = run_cli(capsys, "ledger", "verify", "--ledger", str(charged.ledger),
                           "--kept", "4:xyz")
    assert code == 2 and "--kept" in err and "N:HEAD" in err
    assert run_cli(capsys, "ledger", "verify", "--ledger", str(charged.ledger),
                   "--kept", kept)[0] == 0
    with contextlib.closing(sqlite3.connect(charged.ledger, isolation_level=None)) as conn:
        conn.execute("UPDATE charges SET sql = 'SELECT 1' WHERE id = 1")
        conn.execute("DROP TABLE links")  # rewritten by someone holding the key
        chain.prepare(conn, charged.ledger)
    assert _verify(capsys, charged.ledger)[0] == 0, "a rewritten chain is valid on its own"
    code, out, _ = run_cli(capsys, "ledger", "verify", "--ledger", str(charged.ledger),
                           "--kept", kept)
    assert code == 2 and f"record {len(QUERIES)}:" in out and "rewritten" in out, out
    with contextlib.closing(sqlite3.connect(charged.ledger, isolation_level=None)) as conn:
        conn.execute("DELETE FROM charges WHERE id = ?", [len(QUERIES)])
        conn.execute("DELETE FROM links WHERE id = ?", [len(QUERIES)])
    assert _verify(capsys, charged.ledger)[0] == 0, "a shorter chain is valid on its own"
    code, out, _ = run_cli(capsys, "ledger", "verify", "--ledger", str(charged.ledger),
                           "--kept", kept)
    assert code == 2 and "last records were deleted" in out, out


def _as_version_5(ledger, *statements: tuple[str, list]) -> None:
    """The ledger as a dpsql of schema version 5 left it (links made by the release that
    chained it, version 5 still in its meta), with `statements` applied."""
    _edit(ledger, ("UPDATE meta SET value = '5' WHERE key = 'schema_version'", []), *statements)


def _version(ledger) -> str:
    with contextlib.closing(sqlite3.connect(ledger)) as conn:
        return conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]


def test_a_chained_version_5_ledger_migrates_in_place_keeping_its_links(capsys, charged):
    _, before = _verify(capsys, charged.ledger)
    _as_version_5(charged.ledger)
    with PrivateDatabase.connect(charged.db, charged.policy, charged.ledger) as db:
        assert db.budget().spent_dp > 0
    assert _version(charged.ledger) == SCHEMA_VERSION == "6"
    code, after = _verify(capsys, charged.ledger)
    assert code == 0 and after == before, "its links were kept, not remade"


def test_charges_an_older_release_appended_without_links_are_linked_by_the_migration(capsys,
                                                                                      charged):
    """A version 5 dpsql without the chain charged the ledger after it was chained: the
    migration checks the linked records and links the rest."""
    _as_version_5(charged.ledger, ("DELETE FROM links WHERE id >= 3", []))
    with PrivateDatabase.connect(charged.db, charged.policy, charged.ledger, reuse=False) as db:
        db.query(QUERIES[0], epsilon=0.5)
    code, line = _verify(capsys, charged.ledger)
    assert code == 0 and f"{len(QUERIES) + 1} records verified" in line, line


def test_a_version_5_ledger_with_an_edited_linked_record_is_refused(charged):
    _as_version_5(charged.ledger, ("DELETE FROM links WHERE id = 4", []),
                  ("UPDATE charges SET epsilon_dp = epsilon_dp / 2 WHERE id = 2", []))
    with pytest.raises(LedgerError, match="record 2: its link does not match"):
        PrivateDatabase.connect(charged.db, charged.policy, charged.ledger)
    assert _version(charged.ledger) == "5", "the refused migration changed nothing"


def test_a_release_of_schema_version_5_refuses_a_version_6_ledger(charged, monkeypatch):
    """A dpsql of version 5 opened only version 5 ledgers (and migrated 2 to 4): given a
    chained ledger it refuses rather than charge it without a link."""
    from dpsql.engine.accounting import ledger as ledger_module
    from dpsql.engine.accounting import ledger_schema

    monkeypatch.setattr(ledger_module, "SCHEMA_VERSION", "5")
    monkeypatch.delitem(ledger_schema.MIGRATIONS, "5")
    with pytest.raises(LedgerError, match="not a dpsql ledger of schema version 5 .*schema "
                                          "version 6"):
        PrivateDatabase.connect(charged.db, charged.policy, charged.ledger)
