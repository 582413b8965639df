"""Fixtures: a fresh database, policy and ledger (created for the policy) per test; under
pytest-xdist, the longest test files first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import create_ledger, make_people, write_policy

# The test files that take longest (pytest --durations=0), longest first. Under pytest-xdist
# (pyproject's addopts: --dist loadfile --no-loadscope-reorder) the workers take files in
# collection order, so these start first and no long file is left for the end on one worker.
LONGEST_FILES = ("test_differential_fuzz.py", "test_hostile_corpus.py", "test_spark_conformance.py",
                 "test_joins.py", "test_dates.py", "test_dependence_eta.py", "test_model_household.py",
                 "test_service.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, move LONGEST_FILES' tests to the front (each file's tests stay in
    order, and every worker sorts alike); a run without xdist keeps pytest's order."""
    if hasattr(config, "workerinput"):
        rank = {name: i for i, name in enumerate(LONGEST_FILES)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
