"""Fixtures: a fresh database, policy and ledger (created for the policy) per test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import create_ledger, make_people, write_policy


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
