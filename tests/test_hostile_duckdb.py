"""The data connection itself is locked: even SQL that got past the validator cannot read or
write files, load extensions, attach databases or change settings."""

from __future__ import annotations

import duckdb
import pytest
from dpsql.engine.backends import duckdb_execute as execute
from dpsql.engine.policy_yaml import parse_policy

from tests.support import BASE_POLICY

ATTACKS = [
    "SELECT * FROM read_csv('{csv}')",
    "SELECT * FROM read_csv_auto('{csv}')",
    "SELECT * FROM '{csv}'",
    "SELECT content FROM read_text('{csv}')",
    "SELECT * FROM glob('{dir}/*')",
    "COPY (SELECT 1) TO '{dir}/out.csv'",
    "ATTACH '{dir}/other.duckdb' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET enable_external_access",
    "SELECT * FROM read_parquet('https://example.com/x.parquet')",
]


@pytest.fixture(params=["duckdb", "csv"])
def conn(request, people_db, tmp_path):
    """The data connection as the engine opens it, from a DuckDB file and from a CSV file."""
    policy = parse_policy(BASE_POLICY)
    if request.param == "duckdb":
        path = people_db
    else:
        path = tmp_path / "people.csv"
        with duckdb.connect(str(people_db), read_only=True) as source:
            source.execute(f"COPY people TO '{path}' (HEADER)")
    connection = execute.open_data(path, policy)
    yield connection
    connection.close()


@pytest.fixture
def secret_csv(tmp_path):
    path = tmp_path / "secret.csv"
    path.write_text("a,b\n1,2\n")
    return path


@pytest.mark.parametrize("attack", ATTACKS)
def test_locked_connection_refuses(conn, attack, secret_csv, tmp_path):
    sql = attack.format(csv=secret_csv, dir=tmp_path)
    with pytest.raises(duckdb.Error):
        conn.execute(sql).fetchall()
    assert not (tmp_path / "out.csv").exists()
    with pytest.raises(execute.DataFailure):
        execute.run(conn, sql, 0)


def test_settings_stay_locked(conn):
    settings = dict(conn.execute(
        "SELECT name, value FROM duckdb_settings() WHERE name IN "
        "('enable_external_access', 'lock_configuration', 'autoinstall_known_extensions', "
        "'autoload_known_extensions')").fetchall())
    assert settings == {"enable_external_access": "false", "lock_configuration": "true",
                        "autoinstall_known_extensions": "false",
                        "autoload_known_extensions": "false"}


def test_data_file_is_read_only(people_db):
    connection = execute.open_data(people_db, parse_policy(BASE_POLICY))
    try:
        for sql in ("DELETE FROM people", "CREATE TABLE t (x INTEGER)", "DROP TABLE people"):
            with pytest.raises(duckdb.Error):
                connection.execute(sql)
    finally:
        connection.close()
