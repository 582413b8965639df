"""What a `dpsql query` process loads: SciPy (the workload's intervals and the Gaussian model's
normal tails), plotting, the workload's code, the report builder and the service client are
imported by the calls that use them, never with the command line or a query; pandas and pyarrow
only where an answer goes through a DataFrame (the post-processing query, `QueryResult.df`), not
for an aggregate answered directly and printed (issue 26: the process's start-up is most of a
prepared query's cost). Each check is a new interpreter, so
modules an earlier test loaded here do not hide a regression."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import create_ledger, make_people, write_policy

NOT_AT_IMPORT = ("scipy", "matplotlib", "pandas", "pyarrow", "dpsql.calibration.audit",
                 "dpsql.engine.workload_run", "dpsql.engine.workload", "dpsql.engine.workload_result",
                 "dpsql.engine.report.build", "dpsql.engine.service.client")
"""Not loaded by importing the command line, the engine's database or the calibration layer."""

NOT_FOR_A_QUERY = ("scipy", "matplotlib", "pandas", "pyarrow", "dpsql.engine.workload_run",
                   "dpsql.engine.workload", "dpsql.engine.report.build", "dpsql.calibration.audit",
                   "dpsql.calibration.information", "dpsql.calibration.model_exact",
                   "dpsql.calibration.model_maps", "dpsql.calibration.model_series",
                   "sqlglot.optimizer.qualify", "sqlglot.optimizer.merge_subqueries")
"""Not loaded by answering an aggregate query (without a declared model, post-processing
expressions, ordering or a CTE) and printing it: the exact audit, the declared models' maps and
sqlglot's optimizer (which merges CTEs and subqueries) are loaded by the calls that use them."""

PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
{body}
"""


def _modules(body: str, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `body` in a new interpreter; its output and the modules loaded when it exits."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(body=body), *args],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done, json.loads(done.stderr.strip().splitlines()[-1])


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules for p in prefixes if m == p or m.startswith(p + ".")]


def test_importing_the_command_line_and_the_engine_loads_no_scipy_or_workload_code():
    _, modules = _modules("import dpsql.engine.commands, dpsql.engine.database, dpsql.calibration")
    assert "dpsql.engine.database" in modules and "dpsql.engine.commands_owner" in modules
    assert _loaded(modules, NOT_AT_IMPORT) == []


@pytest.mark.parametrize("output", ["table", "json", "csv"])
def test_a_query_and_its_printed_answer_load_no_scipy_pandas_or_workload_code(tmp_path, output):
    policy = write_policy(tmp_path / "policy.yaml")
    data = make_people(tmp_path / "people.duckdb")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    done, modules = _modules(
        "from dpsql.engine.cli import main; main(sys.argv[1:])", "query",
        "SELECT state, COUNT(*) AS n, AVG(income) AS mean FROM people GROUP BY state",
        "--epsilon", "1", "--format", output, "--db", str(data), "--policy", str(policy),
        "--ledger", str(ledger))
    assert "mean" in done.stdout  # answered and printed
    assert "opendp" in modules  # the probe sees what a query uses
    assert _loaded(modules, NOT_FOR_A_QUERY) == []


def test_the_probe_sees_pandas_where_the_answer_needs_the_post_processing_query(tmp_path):
    """The guard can fail: an ORDER BY on a noisy value runs the post-processing query on a
    frame, and the probe finds pandas there."""
    policy = write_policy(tmp_path / "policy.yaml")
    done, modules = _modules(
        "from dpsql.engine.cli import main; main(sys.argv[1:])", "query",
        "SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n", "--epsilon", "1",
        "--format", "json", "--db", str(make_people(tmp_path / "people.duckdb")), "--policy",
        str(policy), "--ledger", str(create_ledger(tmp_path / "ledger.sqlite", policy)))
    assert '"n"' in done.stdout
    assert "pandas" in modules


def test_the_probe_sees_a_cte_load_the_optimizer_that_merges_it(tmp_path):
    """The guard can fail: a query with a CTE is flattened by sqlglot's optimizer, and the probe
    finds it loaded there."""
    policy = write_policy(tmp_path / "policy.yaml")
    done, modules = _modules(
        "from dpsql.engine.cli import main; main(sys.argv[1:])", "query",
        "WITH t AS (SELECT state FROM people) SELECT state, COUNT(*) AS n FROM t GROUP BY state",
        "--epsilon", "1", "--format", "json", "--db", str(make_people(tmp_path / "people.duckdb")),
        "--policy", str(policy), "--ledger", str(create_ledger(tmp_path / "ledger.sqlite", policy)))
    assert '"n"' in done.stdout
    assert "sqlglot.optimizer.qualify" in modules


def test_the_probe_sees_a_workload_load_its_code(tmp_path):
    """The guard can fail: the same probe, on the calls that do need them, finds them."""
    _, modules = _modules("from dpsql.engine.workload_intervals import sum_halfwidth; "
                          "from dpsql.engine.noise import NoiseKind; "
                          "sum_halfwidth(NoiseKind.LAPLACE, 1.0, 3, 0.05)")
    assert "scipy" in modules and "scipy.integrate" in modules


def test_a_direct_answer_opens_no_post_processing_duckdb_and_an_ordered_one_does(tmp_path):
    """An aggregate answered directly runs no post-processing SQL, so neither its gate nor the
    post-processing DuckDB is opened (each is an in-memory DuckDB a one-shot process would pay
    for); a query ordered by a noisy value needs both, and gets them."""
    from dpsql.engine.database import PrivateDatabase

    policy = write_policy(tmp_path / "policy.yaml")
    with PrivateDatabase.connect(make_people(tmp_path / "people.duckdb"), policy,
                                 create_ledger(tmp_path / "ledger.sqlite", policy)) as db:
        direct = db.query("SELECT state, COUNT(*) AS n, AVG(income) AS mean FROM people "
                          "GROUP BY state", epsilon=1.0)
        shown = direct.to_dict()
        assert shown["columns"] == ["state", "n", "mean"] and len(shown["rows"]) == 4
        assert db._preparer._post_gates == {} and db._post._conn is None
        ordered = db.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n",
                           epsilon=1.0)
        assert len(ordered.to_dict()["rows"]) == 4
        assert len(db._preparer._post_gates) == 1 and db._post._conn is not None


def test_the_command_line_freezes_what_importing_the_engine_built_and_a_callers_list_does_not(
        tmp_path):
    """`dpsql` on its own command line imports the engine with the garbage collector paused and
    freezes what the import built (no later collection walks it again); a caller's argument
    list, as tests pass in their own process, leaves the collector as it was."""
    policy = write_policy(tmp_path / "policy.yaml")
    paths = ["--db", str(make_people(tmp_path / "people.duckdb")), "--policy", str(policy),
             "--ledger", str(create_ledger(tmp_path / "ledger.sqlite", policy))]
    report = ("import gc; atexit.register(lambda: print('frozen', gc.get_freeze_count(), "
              "gc.isenabled(), file=sys.stderr)); from dpsql.engine.cli import main; ")
    for call, frozen in (("main()", True), ("main(sys.argv[1:])", False)):
        done, _ = _modules(report + call, "query", "SELECT COUNT(*) AS n FROM people",
                           "--epsilon", "1", "--format", "json", *paths)
        assert '"n"' in done.stdout
        count, enabled = done.stderr.strip().splitlines()[-2].split()[1:]
        assert (int(count) > 1000) is frozen and enabled == "True"
