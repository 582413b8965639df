"""The dpsql command line: formats, exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import cli_paths, run_cli

ROOT = Path(__file__).resolve().parents[1]




def test_query_json(capsys, setup):
    code, out, _ = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "0.5", "--format", "json",
                        "SELECT state, COUNT(*) AS n FROM people GROUP BY state")
    assert code == 0
    payload = json.loads(out)
    assert payload["columns"] == ["state", "n"] and len(payload["rows"]) == 4
    assert payload["epsilon"] == 0.5 and payload["budget"]["spent_dp"] == pytest.approx(0.5)


def test_query_table_and_csv(capsys, setup):
    code, out, _ = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "0.5",
                           "SELECT COUNT(*) FROM people")
    assert code == 0 and "±" in out and "largest epsilon this query can still ask" in " ".join(out.split())
    code, out, _ = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "0.5", "--format", "csv",
                        "SELECT sick, AVG(age) FROM people GROUP BY sick")
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0] == "sick,AVG(age),AVG(age)_ci95,AVG(age)_ci95_low,AVG(age)_ci95_high"


def test_explain_spends_nothing(capsys, setup):
    code, out, _ = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "0.5", "--format", "json",
                        "SELECT SUM(age) FROM people")
    payload = json.loads(out)
    assert code == 0 and payload["budget"]["spent_dp"] == 0
    assert payload["aggregates"][0]["sensitivity"] == 200  # m (hi - lo) = 2 * 100
    code, out, _ = run_cli(capsys, "explain", *cli_paths(setup), "--epsilon", "0.5",
                           "SELECT SUM(age) FROM people")
    assert code == 0 and "rewritten SQL" in out and "expected 95% error" in out
    code, out, _ = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "0.5", "--format", "json",
                        "SELECT COUNT(*) FROM people")
    assert json.loads(out)["budget"]["spent_dp"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--epsilon", "0"], "epsilon must be a finite number > 0"),
        (["--epsilon", "nan"], "epsilon must be a finite number > 0"),
        (["--epsilon", "-inf"], "epsilon must be a finite number > 0"),
        (["--epsilon", "abc"], "'abc' is not a valid float"),
        (["--epsilon", "1", "--mode", "best"], "'best' is not one of"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, setup, args, fragment):
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), *args, "SELECT COUNT(*) FROM people")
    assert code == 2 and out == ""
    assert fragment in err and err.count("\n") == 1


def test_bad_policy_and_missing_data(capsys, setup, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("budget: {epsilon: -1}\ndependence: {k: 1, eta: 0}\ntables: {}\n")
    code, _, err = run_cli(capsys, "query", "--db", str(setup.db), "--policy", str(bad), "--ledger",
                        str(setup.ledger), "--epsilon", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and "budget.epsilon" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, "query", "--db", str(tmp_path / "x.duckdb"), "--policy", str(setup.policy),
                        "--ledger", str(setup.ledger), "--epsilon", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and "data file not found" in err


def test_budget_exhaustion_exits_3(capsys, setup, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text(Path(setup.policy).read_text().replace("epsilon: 1000.0", "epsilon: 0.5"))
    args = ["query", "--db", str(setup.db), "--policy", str(policy), "--ledger", str(setup.ledger),
            "--epsilon", "0.4", "--no-reuse", "SELECT COUNT(*) FROM people"]  # charged twice
    assert run_cli(capsys, *args)[0] == 0
    code, out, err = run_cli(capsys, *args)
    assert code == 3 and out == "" and "over budget" in err


def test_calibrate_json_reproduces_the_headline(capsys):
    code, out, _ = run_cli(capsys, "calibrate", "--epsilon", "1", "--k", "10", "--eta", "0.001",
                        "--format", "json")
    payload = json.loads(out)
    modes = {m["mode"]: m for m in payload["modes"]}
    assert code == 0 and set(modes) == {"independent", "group", "theorem2", "tight", "auto"}
    assert modes["group"]["epsilon_dp"] == pytest.approx(0.1)
    assert modes["theorem2"]["epsilon_dp"] == pytest.approx(0.307, abs=1e-3)
    assert modes["tight"]["epsilon_dp"] == pytest.approx(0.665, abs=1e-3)
    assert not modes["independent"]["applies"]
    assert "tight" in modes["auto"]["justification"]
    code, _, err = run_cli(capsys, "calibrate", "--epsilon", "1", "--k", "0", "--eta", "0.1")
    assert code == 2 and "k" in err


def test_installed_entry_point_runs_as_a_process(setup):
    proc = subprocess.run(
        [sys.executable, "-m", "dpsql", "query", *cli_paths(setup), "--epsilon", "1", "--format", "json",
         "SELECT COUNT(*) FROM people; DROP TABLE people"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: 2 statements given; send one SELECT statement per query"


def test_explain_refuses_csv_before_touching_the_data(capsys, tmp_path, setup):
    code, out, err = run_cli(capsys, "explain", "--db", str(tmp_path / "missing.duckdb"), "--policy",
                          str(setup.policy), "--ledger", str(setup.ledger), "--epsilon", "1",
                          "--format", "csv", "SELECT COUNT(*) FROM people")
    assert code == 2 and out == "" and "'csv' is not one of 'table', 'json'" in err


def test_explain_help_offers_only_the_formats_it_accepts(capsys):
    code, out, _ = run_cli(capsys, "explain", "--help")
    assert code == 0 and "[table|json]" in out and "csv" not in out


def test_a_bug_is_one_fixed_line_with_exit_1_never_a_traceback(capsys, setup, monkeypatch):
    """An unexpected exception could quote data in its message or traceback."""
    from dpsql.engine import database

    def broken(*args, **kwargs):
        raise KeyError("secret value 37")

    monkeypatch.setattr(database.PrivateDatabase, "query", broken)
    code, out, err = run_cli(capsys, "query", *cli_paths(setup), "--epsilon", "1",
                             "SELECT COUNT(*) FROM people")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "internal error" in err and "37" not in err and "Traceback" not in err


def test_the_command_line_starts_without_matplotlib():
    """Importing matplotlib took most of a second that every command paid; only a plotted
    report needs it."""
    import subprocess
    import sys

    probe = "import sys, dpsql.engine.cli; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
