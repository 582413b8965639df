"""Two connections to one data file in one process: DuckDB shares one instance of a file
within a process, and the bounded copies live in its catalog, so a connection under a second
policy would replace the first's copies and the first's queries would read rows bounded by the
other policy's bound. The second is refused until the first is closed; under one policy the
copies are the same rows, and both connections answer."""

from __future__ import annotations

import duckdb
import pytest
import yaml
from dpsql.engine import PrivateDatabase
from dpsql.engine.errors import InputError

from tests.support import charge_count

UNITS, ROWS, BOUND, LOOSE = 10, 1000, 3, 50


@pytest.fixture
def data(tmp_path):
    """10 units of 100 rows each, and two policies over it: at most 3 and at most 50 rows per unit."""
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE people AS SELECT i % {UNITS} AS person_id, (i % 111) - 5 AS age "
                     f"FROM range({ROWS}) t(i)")
    policies = []
    for bound in (BOUND, LOOSE):
        policy = tmp_path / f"bound{bound}.yaml"
        policy.write_text(yaml.safe_dump({
            "tables": {"people": {"privacy_unit": "person_id", "max_rows_per_unit": bound,
                                  "columns": {"age": {"type": "int", "lower": 0, "upper": 100}}}},
            "budget": {"epsilon": 1000.0}, "dependence": {"k": 1, "eta": 0.0}}))
        policies.append(policy)
    return path, policies


def _count(db: PrivateDatabase) -> float:
    return float(db.query("SELECT COUNT(*) AS n FROM people", epsilon=50.0).df.iloc[0, 0])


def test_a_second_policy_on_an_open_file_is_refused_and_the_first_keeps_its_bound(data, tmp_path):
    path, (tight, loose) = data
    with PrivateDatabase.connect(path, tight, tmp_path / "a.sqlite", create=True,
                                 reuse=False) as first:
        assert abs(_count(first) - UNITS * BOUND) < 3  # noise scale 3/50
        with pytest.raises(InputError) as refused:
            PrivateDatabase.connect(path, loose, tmp_path / "b.sqlite", create=True)
        assert "already open in this process under a policy with other bounds" in str(refused.value)
        assert refused.value.path == str(path)
        assert "\n" not in str(refused.value)
        # The first connection still reads rows bounded by its own policy, and was charged
        # only for its own answers.
        assert abs(_count(first) - UNITS * BOUND) < 3
        assert charge_count(tmp_path / "a.sqlite") == 2
    with PrivateDatabase.connect(path, loose, tmp_path / "b.sqlite", create=True,
                                 reuse=False) as second:
        assert abs(_count(second) - UNITS * LOOSE) < 3  # the file is free once the first closed


def test_one_policy_may_open_a_file_twice(data, tmp_path):
    path, (tight, _) = data
    with PrivateDatabase.connect(path, tight, tmp_path / "a.sqlite", create=True,
                                 reuse=False) as first, \
            PrivateDatabase.connect(path, tight, tmp_path / "b.sqlite", create=True,
                                    reuse=False) as second:
        for db in (first, second, first):
            assert abs(_count(db) - UNITS * BOUND) < 3


def test_row_level_policies_with_other_bounds_are_refused_too(data, tmp_path):
    """A table without a privacy unit is read through a copy of its own that clamps to the
    policy's bounds, in the same catalog: a second policy with other bounds would replace it,
    and the first connection's SUM would read values clamped to the other's."""
    path, _ = data
    policies = []
    for upper in (10, 100):
        policy = tmp_path / f"upper{upper}.yaml"
        policy.write_text(yaml.safe_dump({
            "tables": {"people": {"columns": {"age": {"type": "int", "lower": 0, "upper": upper}}}},
            "budget": {"epsilon": 1000.0}, "dependence": {"k": 1, "eta": 0.0}}))
        policies.append(policy)

    def total(db: PrivateDatabase) -> float:
        return float(db.query("SELECT SUM(age) AS s FROM people", epsilon=50.0).df.iloc[0, 0])

    with PrivateDatabase.connect(path, policies[0], tmp_path / "a.sqlite", create=True,
                                 reuse=False) as first:
        assert total(first) <= ROWS * 10 + 10  # every value clamped to at most 10
        with pytest.raises(InputError) as refused:
            PrivateDatabase.connect(path, policies[1], tmp_path / "b.sqlite", create=True)
        assert refused.value.path == str(path)
        assert total(first) <= ROWS * 10 + 10
