"""A command line query starts a new Python process each time, so what it imports is part of
its cost: a local `dpsql query --format json` must not load libraries only other commands use
(the HTTP client, rich, OpenDP's extras, plotting, the service, Spark)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import create_ledger, make_people, write_policy

NOT_FOR_A_QUERY = ("httpx", "rich", "opendp.extras", "matplotlib", "fastapi", "uvicorn", "pyspark",
                   "dpsql.engine.dependence_report", "dpsql.engine.report.render")

PROBE = """
import atexit, json, sys
from dpsql.engine.cli import main
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
main(sys.argv[1:])
"""


def _loaded(names: list[str], prefix: str) -> list[str]:
    return [name for name in names if name == prefix or name.startswith(prefix + ".")]


def test_a_json_query_process_loads_only_what_it_uses(tmp_path):
    policy = write_policy(tmp_path / "policy.yaml")
    data = make_people(tmp_path / "people.duckdb")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "query", "SELECT AVG(income) AS mean FROM people",
         "--epsilon", "1", "--format", "json", "--db", str(data), "--policy", str(policy),
         "--ledger", str(ledger)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "mean" in json.loads(done.stdout)["columns"]
    modules = json.loads(done.stderr.strip().splitlines()[-1])
    assert "duckdb" in modules and "opendp" in modules  # the probe does see what a query uses
    for prefix in NOT_FOR_A_QUERY:
        assert not _loaded(modules, prefix), f"{prefix} loaded by a query: {_loaded(modules, prefix)}"


HEAVY = ("numpy", "pandas", "duckdb", "opendp", "sqlglot", "scipy", "matplotlib", "fastapi",
         "uvicorn", "httpx", "rich", "pyspark", "yaml", "dpsql.engine.database",
         "dpsql.calibration")


def test_the_version_loads_nothing_of_the_engine():
    """`dpsql --version` answers from the entry point alone: no engine, no heavy library."""
    done = subprocess.run([sys.executable, "-c", PROBE, "--version"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "dpsql, version 0.1.0\n", done
    modules = json.loads(done.stderr.strip().splitlines()[-1])
    for prefix in HEAVY:
        assert not _loaded(modules, prefix), f"{prefix} loaded by --version: {_loaded(modules, prefix)}"
    # The packages' own start reads TYPE_CHECKING without importing typing (a few ms of the
    # 0.15 s target); nothing else this probe runs imports it.
    assert "typing" not in modules


def test_the_public_names_are_the_ones_they_stand_for():
    """The package and the engine import their public names on first use: each is there, and
    is the object of the module it comes from."""
    import dpsql.engine
    from dpsql.engine import database, errors, result

    import dpsql

    assert dpsql.PrivateDatabase is dpsql.engine.PrivateDatabase is database.PrivateDatabase
    assert dpsql.DpsqlError is errors.DpsqlError and dpsql.engine.HistoryEntry is result.HistoryEntry
    for module in (dpsql, dpsql.engine):
        assert all(getattr(module, name) is not None for name in module.__all__)
