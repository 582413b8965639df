"""Messages that name what the user wrote and what is accepted, and refusals that spend
nothing: literals outside a public domain, interruptions, options from the environment."""

from __future__ import annotations

import io
import json

import duckdb
import pytest
from dpsql.engine import InputError, PrivateDatabase, QueryInterrupted, QueryRefused

from tests.support import cli_paths, run_cli


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT COUNT(*) FROM people WHERE state IN ('ca', 'Texas')",
     "'ca' refused: state has the public domain [CA, NY, TX, WA], which does not hold 'ca', so "
     "the comparison is true for no row; did you mean 'CA'?"),
    ("SELECT COUNT(*) FROM people WHERE state = 'Texas'", "did you mean 'TX'?"),
    ("SELECT COUNT(*) FROM people WHERE state <> 'texas'", "true for every row; did you mean 'TX'?"),
    ("SELECT COUNT(*) FILTER (WHERE state = 'wa') FROM people", "did you mean 'WA'?"),
])
def test_a_literal_outside_a_public_domain_is_refused_before_spending(setup, capsys, sql, fragment):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(QueryRefused) as info:
            db.query(sql, epsilon=1)
        assert fragment in str(info.value) and "nothing was charged" in str(info.value)
        assert db.budget().spent_dp == 0
        assert db.query("SELECT COUNT(*) FROM people WHERE state IN ('CA', 'TX')", epsilon=1)
    code, _, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", sql)
    assert code == 2 and fragment in err


@pytest.mark.parametrize("sql, message", [
    ("SELECT COUNT(*) FROM people WHERE age IN ()", "age IN () refused: the list is empty"),
    ("SELECT COUNT(*) FROM people WHERE on",
     "could not parse the SQL: WHERE needs a condition, e.g. WHERE age > 30 (at line 1, column 36)"),
    ("SELECT SUM(age) FROM people WHERE age = 'abc'",
     "cannot compare or combine number and text values in age = 'abc'"),
    ("SELECT COUNT(*) FROM people WHERE age LIKE 'a'",
     "expected text but got a whole number (int) in age LIKE 'a'"),
    ("SELEC COUNT(*) FROM people",
     "it starts with 'SELEC', which begins no SQL statement; did you mean SELECT?"),
    ("DELETE FROM people", "DELETE statement refused: only SELECT is supported"),
    ("SELECT COUNT(*) FROM people p JOIN (SELECT * FROM people) q ON p.person_id = q.person_id",
     "JOIN to a subquery refused: join a table by its name"),
])
def test_refusals_name_what_was_written_not_internals(setup, sql, message):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(QueryRefused) as info:
            db.query(sql, epsilon=1)
    assert message in str(info.value)
    for internal in ("contains()", "Required keyword", "float", "<class", "outside FROM and WITH"):
        assert internal not in str(info.value)


def test_output_names_keep_the_case_they_were_written_in(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query("SELECT State, COUNT(DISTINCT Person_ID) FROM people GROUP BY State",
                          epsilon=1)
    assert list(result.df.columns) == ["State", "COUNT(DISTINCT Person_ID)"]


def test_options_name_what_the_command_line_gave(setup, capsys, tmp_path):
    code, _, err = run_cli(capsys, "query", *cli_paths(setup), "SELECT COUNT(*) FROM people")
    assert code == 2 and "missing option --epsilon" in err and "None" not in err
    code, _, err = run_cli(capsys, "query", "--db", str(setup.db), "--policy", str(setup.policy),
                           "--ledger", str(setup.db), "--epsilon", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and f"--ledger {setup.db} is a DuckDB database, not a dpsql ledger" in err
    assert "corrupted" not in err
    csv_file = tmp_path / "People-2024.csv"
    duckdb.connect(str(setup.db), read_only=True).execute(
        f"COPY people TO '{csv_file}' (HEADER)").close()
    code, _, err = run_cli(capsys, "query", "--db", str(csv_file), "--policy", str(setup.policy),
                           "--ledger", str(setup.ledger), "--epsilon", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and "named after the file ('people-2024' for People-2024.csv)" in err
    assert "(people.csv)" in err
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(InputError) as info:
            db.query("SELECT COUNT(*) FROM people")
    assert "neither was given" in str(info.value) and "None" not in str(info.value)


def test_sql_from_stdin_and_paths_from_the_environment(setup, capsys, monkeypatch):
    monkeypatch.setenv("DPSQL_DB", str(setup.db))
    monkeypatch.setenv("DPSQL_POLICY", str(setup.policy))
    monkeypatch.setenv("DPSQL_LEDGER", str(setup.ledger))
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT COUNT(*) AS n\nFROM people\n"))
    code, out, err = run_cli(capsys, "query", "--epsilon", "1", "--format", "json", "-")
    assert code == 0, err
    assert json.loads(out)["columns"] == ["n"]
    code, out, err = run_cli(capsys, "history", "--format", "json")
    assert code == 0 and "FROM people" in out


def test_an_interrupted_query_charges_nothing_and_is_no_budget_error(setup, capsys, monkeypatch):
    """Ctrl-C while DuckDB runs arrives from DuckDB as RuntimeError('Query interrupted'), and
    in Python code as KeyboardInterrupt: either is QueryInterrupted (a KeyboardInterrupt, not
    a RuntimeError), nothing is charged, and the command exits 130 saying so."""
    from dpsql.engine.backends.duckdb import DuckDBBackend

    for raised in (RuntimeError("Query interrupted"), KeyboardInterrupt()):
        def interrupted(self, sql, keys, raised=raised):
            raise raised
        monkeypatch.setattr(DuckDBBackend, "run", interrupted)
        with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
            with pytest.raises(QueryInterrupted) as info:
                db.query("SELECT COUNT(*) FROM people", epsilon=1)
            assert isinstance(info.value, KeyboardInterrupt)
            assert not isinstance(info.value, (RuntimeError, ValueError))
            assert str(info.value) == "interrupted; nothing was charged"
            assert db.budget().spent_dp == 0 and db.history() == ()
        code, _, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                               "SELECT COUNT(*) FROM people")
        assert code == 130 and err.strip() == "error: interrupted; nothing was charged"
