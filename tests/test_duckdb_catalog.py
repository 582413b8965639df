"""The data's schema is read once as a connection opens the data and kept for it
(engine/backends/duckdb_catalog.py): the kept catalog is what DuckDB reports once the data is
open, whatever type each column is stored as (the casting views included); it is the data's own
schema, never the engine's bookkeeping or the owner's prepared copies, which share the DuckDB
instance; it is read in two statements, whatever asks it afterwards; and a stored integer type
BIGINT always holds is not scanned for values it cannot."""

from __future__ import annotations

import copy

import duckdb
import pytest
import yaml
from dpsql.engine import PrivateDatabase
from dpsql.engine.backends import duckdb_execute
from dpsql.engine.backends.duckdb import DuckDBBackend
from dpsql.engine.backends.duckdb_catalog import catalog_of, read_catalog
from dpsql.engine.errors import PolicyError
from dpsql.engine.policy_yaml import load_policy

from tests import adversarial
from tests.support import BASE_POLICY, create_ledger, make_people, write_policy
from tests.test_physical_types import PHYSICAL, _rows, _schema


@pytest.mark.parametrize("types", PHYSICAL, ids=lambda types: "-".join(t.split("(")[0] for t in types))
def test_the_kept_catalog_is_what_duckdb_reports_once_the_data_is_open(tmp_path, types):
    policy = adversarial.write_policy(tmp_path / "policy.yaml")
    data = adversarial.write_dataset(tmp_path / "people.duckdb", _rows(), _schema(*types))
    with PrivateDatabase.connect(data, policy, create_ledger(tmp_path / "l.sqlite", policy)) as db:
        conn = db._backend.conn
        kept, now = catalog_of(conn), read_catalog(conn)
        assert kept is not now and kept.tables == now.tables
        # Queries, and a row-level table's own copy, read a table shadowed by a casting view
        # there: in the temporary catalog.
        assert kept.shadowed == now.shadowed
        assert kept.holder("people") == ("temp" if "people" in now.shadowed else kept.database)
        assert ("people" in now.shadowed) == (types != ("BIGINT", "BIGINT", "DOUBLE"))
        declared = {"age": "BIGINT", "level": "BIGINT", "income": "DOUBLE", "person_id": "VARCHAR"}
        assert {col: kept.columns("people")[col] for col in declared} == declared


def test_a_public_table_loaded_from_its_file_is_in_the_kept_catalog(tmp_path):
    """A public table whose `data:` names a CSV file is a temporary table of the connection,
    read with its declared types, and no casting view shadows it."""
    people = make_people(tmp_path / "people.duckdb")
    with duckdb.connect() as raw:
        raw.execute(f"COPY (SELECT * FROM (VALUES ('CA', 'West', 39), ('NY', 'East', 19)) "
                    f"t(state, region, population)) TO '{tmp_path / 'regions.csv'}' (HEADER)")
    section = copy.deepcopy(BASE_POLICY)
    section["tables"]["regions"] = {
        "public": True, "key": "state", "data": "regions.csv",
        "columns": {"state": {"type": "str"}, "region": {"type": "str"},
                    "population": {"type": "int"}}}
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(section, sort_keys=False))
    with PrivateDatabase.connect(people, policy, create_ledger(tmp_path / "l.sqlite", policy)) as db:
        conn = db._backend.conn
        kept = catalog_of(conn)
        assert kept.tables == read_catalog(conn).tables
        assert kept.columns("regions") == {"state": "VARCHAR", "region": "VARCHAR",
                                           "population": "BIGINT"}
        assert "regions" in kept.temporary and "people" not in kept.temporary


def test_the_catalog_is_the_datas_own_not_the_engines_copies_or_bookkeeping(tmp_path):
    """With the owner's prepared copy attached, the columns a query may name are the data's (not
    the copy's stored clamped values), and a policy naming a table the data lacks is told the
    data's tables (not the engine's own table of which policies hold the file)."""
    policy = write_policy(tmp_path / "policy.yaml")
    people = make_people(tmp_path / "people.duckdb")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(people, policy, ledger) as db:
        hash_key = db.ledger.hash_key
    DuckDBBackend.prepare_copies(people, load_policy(policy), ledger, hash_key)
    with PrivateDatabase.connect(people, policy, ledger) as db:
        assert db._backend.conn.execute(
            "SELECT count(*) FROM duckdb_databases() WHERE database_name LIKE 'dpsql_copy_%'"
        ).fetchall()[0][0] == 1  # the prepared copy is attached
        assert db._backend.data_columns() == {
            "people": frozenset({"person_id", "state", "age", "income", "sick", "note"})}
    renamed = copy.deepcopy(BASE_POLICY)
    renamed["tables"]["persons"] = renamed["tables"].pop("people")
    other = tmp_path / "renamed.yaml"
    other.write_text(yaml.safe_dump(renamed, sort_keys=False))
    with pytest.raises(PolicyError) as refused:
        PrivateDatabase.connect(people, other, create_ledger(tmp_path / "other.sqlite", other))
    assert str(refused.value) == "tables.persons: no such table in the data (found: people)"


@pytest.mark.parametrize("stored, scanned", [("INTEGER", False), ("UINTEGER", False),
                                             ("HUGEINT", True), ("UBIGINT", True)])
def test_only_a_stored_integer_type_bigint_may_not_hold_is_scanned_when_opened(
        tmp_path, monkeypatch, stored, scanned):
    """Reading INTEGER as BIGINT cannot fail, so opening does not count its values outside
    BIGINT (a scan of the column); HUGEINT and UBIGINT can hold such values, and are counted.
    Which statements run depends on the stored type, never on the values."""
    policy = adversarial.write_policy(tmp_path / "policy.yaml")
    data = adversarial.write_dataset(tmp_path / "people.duckdb", _rows(),
                                     _schema("BIGINT", stored, "DOUBLE"))
    executed = _record(monkeypatch)
    conn = duckdb_execute.open_data(data, load_policy(policy))
    try:
        assert catalog_of(conn).columns("people")["level"] == "BIGINT"
    finally:
        conn.close()
    assert any("TRY_CAST" in sql for sql in executed) is scanned, executed


def test_opening_the_data_reads_its_catalog_twice_whatever_asks_it(tmp_path, monkeypatch):
    """The schema check, the declared types, the prepared copies' fingerprints, the gate and the
    plan's column names all read the one catalog kept as the data was opened: two catalog
    statements for a backend, where each used to ask DuckDB again."""
    policy = write_policy(tmp_path / "policy.yaml")
    people = make_people(tmp_path / "people.duckdb")
    executed = _record(monkeypatch)
    backend = DuckDBBackend.open(people, load_policy(policy))
    try:
        assert set(backend.data_columns()) == {"people"}
    finally:
        backend.close()
    catalog = [sql for sql in executed
               if any(name in sql for name in ("duckdb_columns", "information_schema", "duckdb_tables",
                                               "current_database"))]
    assert len(catalog) == 2, catalog


def _record(monkeypatch) -> list[str]:
    """Every statement the connections the engine opens from now on run, in order."""
    statements: list[str] = []
    real = duckdb.connect
    monkeypatch.setattr(duckdb_execute.duckdb, "connect",
                        lambda *args, **kwargs: _Recorder(real(*args, **kwargs), statements))
    return statements


class _Recorder:
    """A DuckDB connection that records the SQL it is given."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, executed: list[str]) -> None:
        self._conn, self._executed = conn, executed

    def execute(self, sql, *args, **kwargs):
        self._executed.append(str(sql))
        return self._conn.execute(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._conn, name)
