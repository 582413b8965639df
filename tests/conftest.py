"""Fixtures: a fresh database, policy and ledger path per test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import make_people, write_policy


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
    return Setup(people_db, write_policy(tmp_path / "policy.yaml"), tmp_path / "ledger.sqlite")
