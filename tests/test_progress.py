"""Progress on long steps: a bar on a terminal, nothing in JSON or when output is not a terminal."""

from __future__ import annotations

import json
import sys

import duckdb
import pytest
from dpsql.engine import progress, progress_bar

from tests.support import run_cli, write_policy

ROWS = 300_000


def test_steps_nest_and_end_and_a_failing_probe_reads_as_unknown():
    assert progress.current() is None
    with progress.step("outer", lambda: 0.25):
        with progress.step("inner", lambda: 1 / 0):
            step = progress.current()
            assert step is not None and step.label == "inner" and step.fraction() is None
        step = progress.current()
        assert step is not None and step.label == "outer" and step.fraction() == 0.25
    assert progress.current() is None


@pytest.fixture
def big(tmp_path):
    """300,000 rows under a per-unit policy: bounding them takes long enough to be seen."""
    path = tmp_path / "big.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE people AS SELECT i // 3 AS person_id, i % 101 AS age, "
                     f"(i % 997)::DOUBLE AS income, 'CA' AS state, i % 5 = 0 AS sick, 'x' AS note "
                     f"FROM range({ROWS}) t(i)")
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = tmp_path / "ledger.sqlite"
    run_cli_args = ["--db", str(path), "--policy", str(policy), "--ledger", str(ledger)]
    return run_cli_args, ledger, policy


def test_a_long_step_draws_a_bar_on_a_terminal_and_nothing_in_json(big, capsys, monkeypatch):
    paths, ledger, policy = big
    code, _, _ = run_cli(capsys, "ledger", "init", "--ledger", str(ledger), "--policy", str(policy))
    assert code == 0
    monkeypatch.setattr(progress_bar, "SHOW_AFTER", 0.0)
    monkeypatch.setattr(progress_bar, "REFRESH", 0.005)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, err = run_cli(capsys, "query", "SELECT COUNT(*) AS n FROM people", "--epsilon", "1",
                             *paths)
    assert code == 0 and "bounding rows per person_id in people" in err
    assert "bounding" not in out
    code, out, err = run_cli(capsys, "query", "SELECT COUNT(*) AS n FROM people", "--epsilon", "1",
                             "--format", "json", "--no-reuse", *paths)  # bounds the table again
    assert code == 0 and err == "" and json.loads(out)["columns"] == ["n"]


def test_no_bar_when_standard_error_is_not_a_terminal(big, capsys, monkeypatch):
    paths, ledger, policy = big
    run_cli(capsys, "ledger", "init", "--ledger", str(ledger), "--policy", str(policy))
    monkeypatch.setattr(progress_bar, "SHOW_AFTER", 0.0)
    code, out, err = run_cli(capsys, "query", "SELECT COUNT(*) AS n FROM people", "--epsilon", "1",
                             *paths)
    assert code == 0 and err == "" and "n" in out
