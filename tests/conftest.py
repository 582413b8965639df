"""Fixtures: a fresh database, policy and ledger (created for the policy) per test; under
pytest-xdist, the longest test files first and the Spark test files on one worker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import create_ledger, make_people, write_policy

# Every test that starts the in-process Spark session lives in a file named test_spark_*.py:
# under xdist these files are one unit of work, so one worker starts the JVM (about 20 s of both
# cores, and as long again for Spark's first queries), not each worker that draws one of them.
SPARK_FILES = "test_spark_*.py"

# The units of work that take longest (pytest --durations=0, summed by file), longest first.
# Under pytest-xdist (pyproject's addopts: --dist loadfile --no-loadscope-reorder) the workers
# take units in collection order, so these start first and no long unit is left for the end
# on one worker (a unit is not split: test_readme.py is one 60 s test).
LONGEST_FILES = (SPARK_FILES, "test_hostile_corpus.py", "test_attacks.py", "test_readme.py",
                 "test_sensitivity.py", "test_differential_fuzz.py", "test_joins.py",
                 "test_typecheck.py", "test_quantile.py", "test_oracle.py", "test_audit_blackbox.py",
                 "test_spending.py", "test_rewrite_bounding.py", "test_service.py", "test_workload.py",
                 "test_join_forms.py")


def _unit(path: Path) -> str:
    """The unit of work a test file belongs to: the Spark files are one, any other file its own."""
    return SPARK_FILES if path.match(SPARK_FILES) else path.name


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pyproject's --dist loadfile, with the Spark files as one file."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkOnOneWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return f"tests/{SPARK_FILES}" if _unit(Path(file)) == SPARK_FILES else file

    return SparkOnOneWorker(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, move LONGEST_FILES' tests to the front (each unit's tests stay in
    order, and every worker sorts alike); a run without xdist keeps pytest's order."""
    if hasattr(config, "workerinput"):
        rank = {name: i for i, name in enumerate(LONGEST_FILES)}
        items.sort(key=lambda item: rank.get(_unit(item.path), len(rank)))


@dataclass(frozen=True)
class Setup:
    db: Path
    policy: Path
    ledger: Path


@pytest.fixture(scope="session")
def people_db(tmp_path_factory) -> Path:
    return make_people(tmp_path_factory.mktemp("data") / "people.duckdb")


@pytest.fixture
def setup(people_db, tmp_path) -> Setup:
    policy = write_policy(tmp_path / "policy.yaml")
    return Setup(people_db, policy, create_ledger(tmp_path / "ledger.sqlite", policy))


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test (skipped where pyspark is not installed)."""
    pytest.importorskip("pyspark")
    from dpsql.engine.backends.spark_session import local_session

    session = local_session()
    yield session
    session.stop()
