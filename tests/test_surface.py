"""What people see: 80-column output that wraps between words, one number format everywhere,
untrusted text shown harmlessly (terminal escapes, CSV formulas), exceptions a Python caller
can catch as builtins with their numbers, and Jupyter tables."""

from __future__ import annotations

import csv
import io
import pickle
import re
import tempfile
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pytest
from dpsql.engine import (
    BudgetExhausted,
    DpsqlError,
    EngineHalted,
    InputError,
    LedgerError,
    PolicyError,
    PrivateDatabase,
    QueryInterrupted,
    QueryRefused,
)
from dpsql.engine.accounting.ledger import Charge, Ledger
from dpsql.engine.commands import exit_code
from dpsql.engine.commands_output import print_explanation, print_result
from dpsql.engine.display import number, visible
from dpsql.engine.report.build import build_report
from dpsql.engine.report.render import render_markdown, render_table
from dpsql.engine.result import AnswerCost

from tests.support import charge_count, cli_paths, create_ledger, record_charge, run_cli, write_policy
from tests.test_report import DEPENDENT, RECORD, write_ledger

TOUR_SQL = ("SELECT state, COUNT(*) AS n, AVG(income) FROM people WHERE age >= 18 GROUP BY state "
            "ORDER BY n DESC")
WIDE_SQL = ("SELECT sick, COUNT(*) AS number_of_people, SUM(income) AS total_income, AVG(income) "
            "AS mean_income, AVG(age) AS mean_age FROM people WHERE age BETWEEN 18 AND 65 GROUP BY sick")
ESC = "\x1b[2J\x1b]0;pwned\x07"
BOX = "│┃─━┏┓┗┛┡┩╇┯┷┳┻╋┣┫└┘┌┐├┤┼╭╮╰╯"




def _words(text: str) -> Counter:
    """The words of a terminal rendering, ignoring table borders and layout whitespace."""
    return Counter(re.sub(f"[{BOX}]", " ", text).split())


def _render(monkeypatch, capsys, columns: int, printer, value) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    printer(value)
    return capsys.readouterr().out


def _assert_fits_80_without_split_words(wide: str, narrow: str) -> None:
    too_long = [line for line in narrow.splitlines() if len(line) > 80]
    assert not too_long, f"lines over 80 columns: {too_long}"
    assert _words(narrow) == _words(wide), "a word was split or lost when wrapping at 80 columns"


# --- 80 columns -------------------------------------------------------------------------------

@pytest.mark.parametrize("sql", [TOUR_SQL, WIDE_SQL])
def test_query_output_fits_80_columns_and_wraps_between_words(monkeypatch, capsys, setup, sql):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query(sql, epsilon=0.5)
        explanation = db.explain(sql, epsilon=0.5)
    for printer, value in ((print_result, result), (print_explanation, explanation)):
        wide = _render(monkeypatch, capsys, 400, printer, value)
        narrow = _render(monkeypatch, capsys, 80, printer, value)
        _assert_fits_80_without_split_words(wide, narrow)


def test_cli_at_80_columns(monkeypatch, capsys, setup):
    monkeypatch.setenv("COLUMNS", "80")
    for command in ("query", "explain"):
        code, out, _ = run_cli(capsys, command, *cli_paths(setup), "--epsilon", "0.5", TOUR_SQL)
        assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    code, out, _ = run_cli(capsys, "report", "--ledger", str(setup.ledger))
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80


def test_report_table_fits_80_columns_and_wraps_between_words():
    # The report shows the ledger's path, one word: kept short (pytest's tmp_path under a
    # parallel worker is over 80 characters, which no table can wrap without splitting it).
    with tempfile.TemporaryDirectory(prefix="dpsql-") as short:
        path = write_ledger(Path(short) / "ledger.sqlite", [("alice", 0.5, "auto"), ("bob", 0.4, "tight")])
        book = Ledger(path, DEPENDENT)
        record_charge(book, Charge("mallory", WIDE_SQL, AnswerCost(0.2, 0.1, "theorem2", 10, 0.001),
                                   (RECORD,)))
        book.close()
        report = build_report(path)
    _assert_fits_80_without_split_words(render_table(report, width=400), render_table(report, width=80))


# --- one number format ------------------------------------------------------------------------

def test_explain_and_report_format_numbers_as_query_does(monkeypatch, capsys, setup):
    monkeypatch.setenv("COLUMNS", "200")
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        explanation = db.explain("SELECT SUM(income) FROM people", epsilon=0.7)
        result = db.query("SELECT SUM(income) FROM people", epsilon=0.7)
    print_explanation(explanation)
    shown = capsys.readouterr().out
    sens, scale = explanation.aggregates[0].sensitivity, explanation.aggregates[0].scale
    assert f"sensitivity {number(sens)}" in shown and f"scale {number(scale)}" in shown
    assert f"epsilon_dp {number(explanation.epsilon_dp)}" in shown
    print_result(result)
    assert f"epsilon_dp {number(result.epsilon_dp)}" in capsys.readouterr().out
    text = render_table(build_report(setup.ledger), width=200)
    assert f" {number(scale)} " in text and f" {number(sens)} " in text
    assert f"{explanation.aggregates[0].scale:.4g}" not in text  # the old format is gone


def test_number_format():
    assert [number(v) for v in (12513, 12513.0, 46.2049, 0.39318, 2_033_696_404.9, 1e-7, -3.5)] == \
        ["12,513", "12,513", "46.20", "0.393", "2,033,696,405", "1e-07", "-3.50"]
    assert [number(v) for v in (np.int64(12513), np.float64(1234.5), np.float32(0.5), np.bool_(True))] == \
        ["12,513", "1,234", "0.5", "True"]


# --- untrusted text ---------------------------------------------------------------------------

def test_visible_escapes_control_and_format_characters():
    assert visible("a\x1b[31mb\rc\u202ed\x00e\nf\tg") == "a\\x1b[31mb\\x0dc\\u202ed\\x00e\nf\tg"
    assert visible("ordinary ± ε text") == "ordinary ± ε text"


def test_query_table_shows_escape_codes_visibly(capsys, setup):
    sql = f"SELECT COUNT(*) AS \"n{ESC}\" FROM people WHERE note <> '{ESC}'"
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", sql)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "\\x07" in out


def test_aliases_are_never_read_as_rich_markup(capsys, setup):
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                          'SELECT COUNT(*) AS "[/x]", COUNT(*) AS "[bold]b[/bold]" FROM people')
    assert code == 0, err
    assert "[/x]" in out and "[bold]b[/bold]" in out


def test_errors_show_escape_codes_visibly(capsys, setup):
    sql = f"SELECT COUNT(*) FROM people GROUP BY lower(note || '{ESC}')"
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1", sql)
    assert code == 2 and out == ""
    assert "\x1b" not in err and "\\x1b[2J" in err and err.count("\n") == 1


def test_report_shows_escape_codes_visibly(tmp_path, capsys):
    path = write_ledger(tmp_path / "ledger.sqlite", [])
    book = Ledger(path, DEPENDENT)
    record_charge(book, Charge(f"eve{ESC}", f"SELECT COUNT(*) AS n FROM people -- {ESC}\u202eevil",
                               AnswerCost(0.2, 0.1, "tight", 10, 0.001), (RECORD,)))
    book.close()
    for fmt in ("table", "markdown", "html"):
        code, out, _ = run_cli(capsys, "report", "--ledger", str(path), "--format", fmt)
        assert code == 0 and "\x1b" not in out and "\u202e" not in out and "\x07" not in out, fmt
        assert "\\x1b[2J" in out and "\\u202e" in out, fmt
    assert "\\x1b" in render_markdown(build_report(path))


@pytest.fixture
def formula_setup(tmp_path):
    """A table whose public domain holds text that spreadsheets would run as formulas."""
    keys = ["=1+2", "+SUM(A1)", "-2", "@cmd", "\tTAB", "plain"]
    path = tmp_path / "formula.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE people AS SELECT k AS tag, 10 AS age FROM unnest(?) t(k)", [keys * 5])
    policy = write_policy(tmp_path / "policy.yaml", {"tables": {"people": {"columns": {
        "tag": {"type": "str", "domain": keys}, "age": {"type": "int", "lower": 0, "upper": 100}}}}})
    return path, policy, create_ledger(tmp_path / "ledger.sqlite", policy), keys


def test_csv_neutralises_formulas_in_text_and_keeps_numbers(capsys, formula_setup):
    db, policy, ledger, keys = formula_setup
    sql = 'SELECT tag, COUNT(*) - 1000000 AS "=HYPERLINK(1)", COUNT(*) AS "@n" FROM people GROUP BY tag'
    code, out, err = run_cli(capsys, "query", "--db", str(db), "--policy", str(policy), "--ledger",
                          str(ledger), "--epsilon", "1", "--format", "csv", sql)
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    # Arithmetic on a noisy value has its interval too.
    assert rows[0] == ["tag", "'=HYPERLINK(1)", "'@n", "'=HYPERLINK(1)_ci95", "'=HYPERLINK(1)_ci95_low",
                       "'=HYPERLINK(1)_ci95_high", "'@n_ci95", "'@n_ci95_low", "'@n_ci95_high"]
    assert sorted(row[0] for row in rows[1:]) == sorted(
        ("'" + k if k[0] in "=+-@\t" else k) for k in keys)
    for row in rows[1:]:
        assert float(row[1]) < -990_000 and row[1].startswith("-")  # numbers stay numbers
        float(row[2])
        # The interval is cut to what the statistic can be (a count is at least 0, so this
        # column at least -1,000,000); the noisy value itself may lie below that.
        assert -1_000_000 <= float(row[4]) <= float(row[5])


# --- exceptions -------------------------------------------------------------------------------

def test_refusals_are_builtin_exceptions_with_attributes():
    assert all(issubclass(cls, ValueError) for cls in (QueryRefused, InputError, PolicyError))
    assert issubclass(BudgetExhausted, RuntimeError) and issubclass(LedgerError, RuntimeError)
    over = BudgetExhausted("over", asked=1.0, cost=1.0, largest_epsilon=0.0)
    assert [exit_code(e) for e in (over, QueryRefused("no"), EngineHalted(), QueryInterrupted(),
                                   ValueError("a bug"))] == [3, 2, 4, 130, 1]
    error = PolicyError("bad  yaml\nhere", line=3, column=7)
    assert (str(error), error.line, error.column) == ("bad yaml here", 3, 7)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is PolicyError and (str(copy), copy.line, copy.column) == ("bad yaml here", 3, 7)
    with pytest.raises(TypeError, match="shadow"):
        DpsqlError("x", args=1)


def test_a_refused_query_is_caught_as_a_value_error(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(ValueError, match="unknown column"):
            db.query("SELECT SUM(nope) FROM people", epsilon=1)
        with pytest.raises(ValueError, match="epsilon"):
            db.query("SELECT COUNT(*) FROM people", epsilon=-1)


def test_budget_exhausted_is_a_runtime_error(tmp_path, setup):
    policy = write_policy(tmp_path / "small.yaml", {"budget": {"epsilon": 1.0}})
    with PrivateDatabase.connect(setup.db, policy, setup.ledger, reuse=False) as db:
        db.query("SELECT COUNT(*) FROM people", epsilon=0.9)
        with pytest.raises(RuntimeError):
            db.query("SELECT COUNT(*) FROM people", epsilon=0.9)


# --- Jupyter ----------------------------------------------------------------------------------

def test_results_explanations_and_reports_show_as_html_tables(setup):
    sql = 'SELECT state, COUNT(*) AS "<b>n</b>" FROM people GROUP BY state'
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        result = db.query(sql, epsilon=1)
        explanation = db.explain(sql, epsilon=1)
        report = db.report()
    page = result._repr_html_()
    assert page.count("<tr>") == 1 + len(result.df) and "&lt;b&gt;n&lt;/b&gt;" in page
    assert "<b>" not in page
    for value, ci in zip(result.df.iloc[:, 1], result.ci95.iloc[:, 1], strict=True):
        assert f"<td>{number(value)} ± {number(ci)}</td>" in page
    page = explanation._repr_html_()
    assert "<table>" in page and f"±{number(explanation.aggregates[0].ci95_halfwidth)}" in page
    assert "<b>" not in page
    page = report._repr_html_()
    assert page.count("<table") >= 2 and "&lt;b&gt;n&lt;/b&gt;" in page and "<b>" not in page


# --- clear errors -----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "line", "column", "problem"), [
    ("budget: {epsilon: 1\ndependence: {k: 1}\n", 2, 11, "expected ',' or '}', but got ':'"),
    ("budget:\n  epsilon: 1\n tables: x\n", 3, 2, "expected <block end>"),
    ("tables: 'open\n", 2, 1, "found unexpected end of stream (while scanning a quoted scalar)"),
])
def test_yaml_errors_keep_line_column_and_problem(capsys, setup, tmp_path, text, line, column, problem):
    broken = tmp_path / "broken.yaml"
    broken.write_text(text)
    code, out, err = run_cli(capsys, "query", "--db", str(setup.db), "--policy", str(broken), "--ledger",
                          str(setup.ledger), "--epsilon", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"is not valid YAML at line {line}, column {column}: " in err and problem in err
    assert charge_count(setup.ledger) == 0
    with pytest.raises(PolicyError) as info:
        PrivateDatabase.connect(setup.db, broken, setup.ledger)
    assert (info.value.line, info.value.column) == (line, column) and problem in info.value.problem


def test_a_data_column_missing_from_the_policy_says_so(tmp_path):
    data = tmp_path / "people.csv"
    data.write_text("age,ssn\n30,123\n40,456\n")
    policy = write_policy(tmp_path / "policy.yaml", {"tables": {"people": {"columns": {
        "age": {"type": "int", "lower": 0, "upper": 100}}}}})
    with PrivateDatabase.connect(data, policy, tmp_path / "ledger.sqlite", create=True) as db:
        with pytest.raises(QueryRefused) as info:
            db.query("SELECT SUM(SSN) FROM people", epsilon=1)
        assert str(info.value) == ("column 'SSN' exists in table people but is not in the policy; "
                                   "policy columns: age")
        with pytest.raises(QueryRefused, match="unknown column 'nope' in table people"):
            db.explain("SELECT COUNT(*) FROM people WHERE nope = 1", epsilon=1)
        assert db.budget().spent_dp == 0


def test_a_csv_that_does_not_load_says_nothing_about_its_rows(capsys, tmp_path):
    """DuckDB's load error names the line (and value) of a bad row: a detail about the data
    with no noise. The message is fixed instead."""
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    rows = [f"{i},CA,{'x37' if i == 25000 else 37},1.5,true,r" for i in range(30000)]
    data = tmp_path / "people.csv"
    data.write_text("person_id,state,age,income,sick,note\n" + "\n".join(rows) + "\n")
    code, out, err = run_cli(capsys, "explain", "--db", str(data), "--policy", str(policy),
                             "--ledger", str(ledger), "--epsilon", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "withheld" in err and "25" not in err.replace(str(tmp_path), "") and "x37" not in err


def test_csv_columns_take_the_policy_types_not_types_inferred_from_values(tmp_path):
    """An income column whose values happen to be whole numbers is still DOUBLE, as declared."""
    data = tmp_path / "people.csv"
    data.write_text("person_id,state,age,income,sick,note\n1,CA,30,100,true,r\n2,NY,40,200,false,r\n")
    policy = write_policy(tmp_path / "policy.yaml")
    with PrivateDatabase.connect(data, policy, tmp_path / "l.sqlite", create=True) as db:
        types = dict(db._backend.conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns").fetchall())
    assert (types["income"], types["age"], types["sick"]) == ("DOUBLE", "BIGINT", "BOOLEAN")
