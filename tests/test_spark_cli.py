"""`dpsql query --engine spark` over a policy with several tables: `--db` a folder holding one
Parquet or CSV file per table, named after it. A TPC-H-shaped join tree along a chain gives, before
noise, the same answer from the command line on Spark as on DuckDB; a folder missing a table is
refused in one line, charging nothing."""

from __future__ import annotations

import json
import math

import duckdb
import pytest
import yaml
from dpsql.engine.policy_yaml import parse_policy

from tests.support import charge_count, create_ledger, run_cli
from tests.test_join_tree import POLICY, Q5_JOIN, base_units, make_db

pytest.importorskip("pyspark")

from dpsql.engine.backends.spark_tables import needed  # noqa: E402

CSV_TABLES = ("nation", "region", "supplier")  # the others as Parquet (lineitem as a folder)


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The join tree tests' data, a hostile customer over every bound (6 orders of 6 lines) and
    lines whose order is NULL or dangling, as a DuckDB file and as a folder of one file per table;
    the policy with a time limit a cold JVM on a loaded machine meets."""
    root = tmp_path_factory.mktemp("spark_cli")
    units = base_units()
    units[77] = ([(77_000 + j, 1994, 900.0, [((j + i) % 8, (j * 3 + i) % 10, 80.0 + i, 40 + i)
                                             for i in range(6)]) for j in range(6)], [])
    db = make_db(root / "shop.duckdb", units, [(None, 1, 2, 10.0, 3), (55_555, 2, 3, 20.0, 4)])
    folder = root / "tables"
    folder.mkdir()
    with duckdb.connect(str(db), read_only=True) as conn:
        for name in needed(parse_policy(POLICY)):
            if name in CSV_TABLES:
                conn.execute(f"COPY {name} TO '{folder / name}.csv' (HEADER)")
            elif name == "lineitem":  # a Parquet folder of two files, as Spark writes one
                (folder / name).mkdir()
                conn.execute(f"COPY (SELECT * FROM {name} WHERE l_partkey < 5) TO "
                             f"'{folder / name / 'part-0.parquet'}' (FORMAT parquet)")
                conn.execute(f"COPY (SELECT * FROM {name} WHERE l_partkey >= 5) TO "
                             f"'{folder / name / 'part-1.parquet'}' (FORMAT parquet)")
            else:
                conn.execute(f"COPY {name} TO '{folder / name}.parquet' (FORMAT parquet)")
    policy = root / "policy.yaml"
    policy.write_text(yaml.safe_dump({**POLICY, "limits": {"time_seconds": 600}}))
    return db, folder, policy


def _answer(capsys, ledger, engine: str, db, policy) -> list[list]:
    """The CLI's rows for Q5 on `engine`, charged to `ledger` (whose secret key picks the rows a
    unit over its bound keeps: the same ledger, the same rows on both engines)."""
    charged = charge_count(ledger)
    code, out, err = run_cli(capsys, "query", "--engine", engine, "--db", str(db), "--policy",
                             str(policy), "--ledger", str(ledger), "--epsilon", "1", "--format",
                             "json", "--no-reuse", Q5_JOIN)
    assert code == 0, err
    assert charge_count(ledger) == charged + 1
    return json.loads(out)["rows"]


def test_a_chain_join_from_the_command_line_gives_duckdbs_exact_answer_on_spark(
        spark, shop, tmp_path, capsys, monkeypatch):
    """Q5's six tables from a folder of Parquet and CSV files, every private table bounded per
    customer through its chain: with the noise taken away, the released rows are DuckDB's."""
    from dpsql.engine import noise

    monkeypatch.setattr(noise, "release", lambda mechanism, exact: list(exact))
    db, folder, policy = shop
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    duck = _answer(capsys, ledger, "duckdb", db, policy)
    on_spark = _answer(capsys, ledger, "spark", folder, policy)
    assert duck and any(row[2] > 0 for row in duck)  # rows were joined
    # ORDER BY revenue leaves groups of equal revenue in either order: compare by nation.
    by_nation = {row[0]: row for row in duck}
    assert sorted(row[0] for row in on_spark) == sorted(by_nation)
    for mine in on_spark:
        theirs = by_nation[mine[0]]
        assert mine[2] == theirs[2], (on_spark, duck)
        assert math.isclose(mine[1], theirs[1], rel_tol=1e-9), (on_spark, duck)


def test_a_folder_missing_a_table_is_refused_in_one_line(spark, shop, tmp_path, capsys):
    db, folder, policy = shop
    partial = tmp_path / "partial"
    partial.mkdir()
    for entry in folder.iterdir():
        if entry.name != "region.csv":
            (partial / entry.name).symlink_to(entry)
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    code, out, err = run_cli(capsys, "query", "--engine", "spark", "--db", str(partial), "--policy",
                             str(policy), "--ledger", str(ledger), "--epsilon", "1",
                             "SELECT COUNT(*) FROM lineitem")
    assert code == 2 and out == ""
    assert f"the folder {partial} holds no file for policy table(s) region" in err
    assert len(err.strip().splitlines()) == 1
    assert charge_count(ledger) == 0
