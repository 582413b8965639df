"""A key set given as a public table's rows (docs/theory.md §32): GROUP BY columns of a joined
public table that list no values are released as the table's distinct rows, crossed with the
other keys' values; the exact answers are the SQL's, the key set, the SQL and every refusal
depend on the public table and the text only."""

from __future__ import annotations

import itertools

import duckdb
import pytest
from dpsql.engine import PrivateDatabase
from dpsql.engine.errors import QueryRefused
from dpsql.engine.rewrite import copies_to_bound
from dpsql.engine.sql import keys as keys_module
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.flatten import flatten
from dpsql.engine.sql.parse import parse_select
from dpsql.engine.sql.planning_limits import Deadline

from tests.library import GENRES, POLICY, TITLE_AUTHOR, checkout, library_files, reader, write_library
from tests.support import create_ledger

BY_TITLE_AUTHOR = ("SELECT c.title, c.author, COUNT(*) AS n, SUM(spent) AS s FROM checkouts k "
                   "JOIN catalogue c ON k.book_id = c.book_id GROUP BY c.title, c.author")
MIXED = ("SELECT c.title, k.genre, COUNT(*) AS n FROM checkouts k JOIN catalogue c "
         "ON k.book_id = c.book_id GROUP BY c.title, k.genre")
# Patron 0 has more rows than the bound; NULL patrons, unknown and NULL books, a NULL genre.
ROWS = [checkout(p, b, d, genre=g) for p, b, d, g in [
    (1, 1, 0, "Fiction"), (1, 3, 1, "History"), (2, 2, 2, "Fiction"), (2, 4, 3, "Science"),
    (3, 7, 4, "Science"), (3, 9, 5, "Fiction"), (None, 3, 6, "History"), (None, 1, 0, None),
    (4, None, 1, "Fiction"), (5, 5, 2, "History"), (5, 6, 3, "Fiction"), (5, 8, 4, "Fiction")]]


def _plan(sql: str, conn: duckdb.DuckDBPyConnection):
    return build_plan(flatten(parse_select(sql), POLICY), POLICY, sql, None, reader(conn))


@pytest.fixture
def conn():
    with duckdb.connect() as connection:
        write_library(connection, ROWS)
        yield connection


def test_the_keys_are_the_distinct_rows_of_the_public_table(conn):
    plan = _plan(BY_TITLE_AUTHOR, conn)
    assert plan.key_rows == TITLE_AUTHOR  # Dune/Herbert once; rows holding a NULL left out
    assert plan.group_count == 5
    assert [k.keys for k in plan.group_by] == [("Cosmos", "Dune", "Emma", "Maus"),
                                                ("Austen", "Herbert", "Sagan", "Spiegelman", "Tennant")]


def test_public_rows_cross_the_declared_values_of_the_other_keys(conn):
    plan = _plan(MIXED, conn)
    titles = ("Cosmos", "Dune", "Emma", "Maus", "Ulysses")  # a NULL author does not matter here
    assert plan.key_rows == tuple(itertools.product(titles, sorted(GENRES)))
    three = _plan("SELECT k.genre, c.title, c.author, COUNT(*) FROM checkouts k JOIN catalogue c "
                  "ON k.book_id = c.book_id GROUP BY k.genre, c.title, c.author", conn)
    assert three.key_rows == tuple(sorted((g, *row) for g in GENRES for row in TITLE_AUTHOR))


def test_a_column_with_a_domain_keeps_its_declared_values(conn):
    """A key set the policy already lists stays the cross product of its values; beside a
    column that lists none, the rows are kept to the values the domain lists."""
    alone = _plan("SELECT c.genre, COUNT(*) FROM checkouts k JOIN catalogue c ON k.book_id = "
                  "c.book_id GROUP BY c.genre", conn)
    assert alone.key_rows is None and alone.group_by[0].keys == tuple(GENRES)
    rows = _plan("SELECT c.title, c.genre, COUNT(*) FROM checkouts k JOIN catalogue c ON k.book_id = "
                 "c.book_id GROUP BY c.title, c.genre", conn)
    assert rows.key_rows == (("Cosmos", "Science"), ("Dune", "Fiction"), ("Emma", "Fiction"),
                             ("Emma", "History"), ("Ulysses", "Fiction"))  # Maus's Comics: no


def test_where_prunes_the_rows(conn):
    plan = _plan(BY_TITLE_AUTHOR.replace("GROUP BY", "WHERE c.title IN ('Emma', 'Dune') GROUP BY"), conn)
    assert plan.key_rows == (("Dune", "Herbert"), ("Emma", "Austen"), ("Emma", "Tennant"))
    with pytest.raises(QueryRefused, match="leaves none of its values possible"):
        _plan(BY_TITLE_AUTHOR.replace("GROUP BY", "WHERE c.title = 'Odyssey' GROUP BY"), conn)


def test_refused_beyond_the_key_limit_and_for_a_float_column(conn, monkeypatch):
    monkeypatch.setattr(keys_module, "MAX_GROUPS", 4)
    with pytest.raises(QueryRefused, match=r"GROUP BY catalogue.title, catalogue.author would produce "
                                           r"more than 4 groups \(the distinct rows of the public "
                                           r"table catalogue\); at most 4"):
        _plan(BY_TITLE_AUTHOR, conn)
    monkeypatch.undo()
    with pytest.raises(QueryRefused, match="a key read from the public table's rows is text, an int, "
                                           "a bool or a date, not a float"):
        _plan("SELECT c.price, COUNT(*) FROM checkouts k JOIN catalogue c ON k.book_id = c.book_id "
              "GROUP BY c.price", conn)
    with pytest.raises(QueryRefused, match="no public domain"):  # no reader: as before
        build_plan(parse_select(BY_TITLE_AUTHOR), POLICY, BY_TITLE_AUTHOR)


def _exact(db: PrivateDatabase, sql: str):
    plan, rewritten, *_ = db._preparer._plan(sql, Deadline(db.policy.limits))
    for table, columns in copies_to_bound(plan):
        db._backend.bound(table, db.ledger.hash_key, columns)
    return plan, rewritten, db._backend.run(rewritten, len(plan.group_by))


def test_answers_are_the_sql_grouped_by_the_rows_with_every_row_a_cell(tmp_path):
    rows = [r for r in ROWS if r[0] != 1]  # every unit within its bound: bounding keeps all
    db_path, policy = library_files(tmp_path, rows)
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    truths = {}
    with duckdb.connect(str(db_path), read_only=True) as raw:
        for sql, keys in ((BY_TITLE_AUTHOR, "c.title, c.author"), (MIXED, "c.title, k.genre")):
            truths[sql] = {tuple(r[:-1]): r[-1] for r in raw.execute(
                f"SELECT {keys}, COUNT(*) FROM checkouts k JOIN catalogue c ON k.book_id = c.book_id "
                f"GROUP BY {keys}").fetchall()}
    with PrivateDatabase.connect(db_path, policy, ledger) as db:
        for sql, truth in truths.items():
            plan, _, exact = _exact(db, sql)
            assert exact.keys == list(plan.key_rows)
            counts = dict(zip(exact.keys, exact.values[plan.measurements[0].name], strict=True))
            assert counts == {key: truth.get(key, 0) for key in plan.key_rows}
        answer = db.query(BY_TITLE_AUTHOR, epsilon=1.0)
        assert [tuple(r) for r in answer.df[["title", "author"]].itertuples(index=False)] == list(TITLE_AUTHOR)
        assert answer.ci95["n"].notna().all()


def test_the_rows_are_read_once_per_connection_and_the_plan_is_the_same_on_neighbours(tmp_path):
    """Neighbouring datasets (patron 1's rows replaced by many hostile ones) get the same key
    rows, SQL and explanation: only the public table decides them."""
    seen = []
    for index, mine in enumerate([[], [checkout(1, b, 6, 23, None, 50.0) for b in (9, 8, 5, 5, 1)]]):
        root = tmp_path / str(index)
        root.mkdir()
        db_path, policy = library_files(root, [r for r in ROWS if r[0] != 1] + mine)
        ledger = create_ledger(root / "ledger.sqlite", policy)
        with PrivateDatabase.connect(db_path, policy, ledger) as db:
            first = db._backend.public_rows("catalogue", ("title", "author"), 10)
            assert db._backend.public_rows("catalogue", ("title", "author"), 10) is first
            plan, rewritten, _ = _exact(db, BY_TITLE_AUTHOR)
            seen.append((plan.key_rows, rewritten, str(db.explain(MIXED, epsilon=1.0))))
    assert seen[0] == seen[1]
