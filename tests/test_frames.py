"""Start from what the user already holds: `PrivateDatabase.connect` takes a pandas or Polars
DataFrame, an Arrow table or a DuckDB relation, copies it into a locked-down DuckDB of the
engine's own, and answers exactly as it does from the same rows in a file."""

from __future__ import annotations

import duckdb
import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.errors import InputError, PolicyError

from tests.support import create_ledger, write_policy

QUERY = "SELECT state, COUNT(*) AS n, SUM(income) AS s FROM people GROUP BY state ORDER BY state"


def _frames(people_db):
    """The test people table as each kind of in-memory table a user holds."""
    pytest.importorskip("pyarrow")
    polars = pytest.importorskip("polars")
    source = duckdb.connect(str(people_db), read_only=True)
    relation = source.table("people")
    arrow = relation.to_arrow_table()
    return source, {"pandas": relation.df(), "polars": polars.from_arrow(arrow), "arrow": arrow,
                    "relation": relation}


def test_every_kind_of_frame_gives_the_file_s_explanation_and_shapes(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml")
    with PrivateDatabase.connect(people_db, policy, ledger=create_ledger(tmp_path / "file.sqlite",
                                                                         policy)) as db:
        expected = db.explain(QUERY, epsilon=1.0)
        exact_rows = len(db.query(QUERY, epsilon=1.0).df)
    source, frames = _frames(people_db)
    for kind, frame in frames.items():
        ledger = create_ledger(tmp_path / f"{kind}.sqlite", policy)
        with PrivateDatabase.connect(frame, policy, ledger=ledger) as db:
            explained = db.explain(QUERY, epsilon=1.0)
            assert explained.rewritten_sql == expected.rewritten_sql, kind
            assert explained.aggregates == expected.aggregates, kind
            result = db.query(QUERY, epsilon=1.0)
            assert len(result.df) == exact_rows, kind
            assert db.budget().spent_ip > 0, kind
    source.close()


def test_the_copy_is_the_engine_s_own(people_db, tmp_path):
    """Changing the caller's frame after connecting changes nothing the engine reads, and the
    engine's connection cannot read files (it is locked down like a file's)."""
    pandas = pytest.importorskip("pandas")
    policy = write_policy(tmp_path / "policy.yaml")
    with duckdb.connect(str(people_db), read_only=True) as source:
        frame = source.table("people").df()
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with PrivateDatabase.connect({"people": frame}, policy, ledger=ledger) as db:
        total = float(frame["income"].sum())
        frame["income"] = 0.0
        conn = db._backend.conn
        assert conn.execute("SELECT sum(income) FROM people").fetchall()[0][0] == pytest.approx(total)
        with pytest.raises(duckdb.Error):
            conn.execute("SELECT * FROM read_csv_auto('/etc/passwd')").fetchall()
    assert isinstance(frame, pandas.DataFrame)


def test_frames_are_checked_like_files(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "l.sqlite", policy)
    with duckdb.connect(str(people_db), read_only=True) as source:
        frame = source.table("people").df()
    with pytest.raises(PolicyError, match=r"^tables\.people\.columns\.age: no such column"):
        PrivateDatabase.connect(frame.drop(columns=["age"]), policy, ledger=ledger)
    with pytest.raises(InputError, match="the tables given must be the policy's: people "
                                         r"\(unknown: visits; missing: people\)"):
        PrivateDatabase.connect({"visits": frame}, policy, ledger=ledger)
    with pytest.raises(InputError, match="expected a DuckDB, CSV or Parquet file path, a pandas "
                                         "or Polars DataFrame, an Arrow table or a DuckDB relation, "
                                         "got list"):
        PrivateDatabase.connect([1, 2, 3], policy, ledger=ledger)
