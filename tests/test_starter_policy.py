"""`dpsql init --db FILE` writes a starter policy from the schema alone: the types filled in,
everything that must come from public knowledge left as marked blanks, nothing of the values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml
from dpsql.engine.errors import PolicyError
from dpsql.engine.policy_yaml import parse_policy


def _dpsql(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpsql", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _database(path: Path, seed: int) -> Path:
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE people (person_id BIGINT, age TINYINT, income DECIMAL(10, 2), "
                     "state VARCHAR, sick BOOLEAN, visit DATE, seen TIMESTAMP, blob BLOB)")
        conn.execute(f"INSERT INTO people SELECT i, (i * {seed}) % 100, i * {seed} / 7, 'S' || i % 5, "
                     "i % 2 = 0, DATE '2024-01-01' + CAST(i AS INTEGER), "
                     "TIMESTAMP '2024-01-01' + to_hours(i), 'x' FROM range(50) t(i)")
    return path


def test_the_starter_policy_depends_on_the_schema_only(tmp_path):
    first = _dpsql("init", "--db", str(_database(tmp_path / "a.duckdb", 3)), cwd=tmp_path)
    second = _dpsql("init", "--db", str(_database(tmp_path / "b.duckdb", 11)), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.replace("a.duckdb", "b.duckdb") == second.stdout  # other values, same text
    spec = yaml.safe_load(first.stdout)
    columns = spec["tables"]["people"]["columns"]
    assert {name: c["type"] for name, c in columns.items()} == {
        "person_id": "int", "age": "int", "income": "float", "state": "str", "sick": "bool",
        "visit": "date", "seen": "timestamp"}
    assert "blob: stored as BLOB, which no policy type reads; left out" in first.stdout
    assert columns["age"]["lower"] is None and columns["state"]["domain"] is None
    assert first.stdout.count("FILL IN") >= 12


def test_it_does_not_load_until_the_owner_fills_it_in(tmp_path):
    out = tmp_path / "policy.yaml"
    proc = _dpsql("init", "--db", str(_database(tmp_path / "a.duckdb", 3)), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0 and "fill in every FILL IN" in proc.stderr
    spec = yaml.safe_load(out.read_text())
    with pytest.raises(PolicyError, match=r"^budget\.epsilon"):
        parse_policy(spec)
    spec["budget"]["epsilon"] = 2.0
    spec["dependence"] = {"k": 1, "eta": 0.0}
    policy = parse_policy(spec)
    assert policy.tables["people"].columns["age"].type == "int"
    again = _dpsql("init", "--db", str(tmp_path / "a.duckdb"), "-o", str(out), cwd=tmp_path)
    assert again.returncode == 2 and "never overwrites a policy" in again.stderr


def test_csv_and_missing_files(tmp_path):
    csv = tmp_path / "visits.csv"
    csv.write_text("visitor,day,spent\nv1,2024-01-02,3.5\nv2,2024-01-03,4\n")
    proc = _dpsql("init", "--db", str(csv), cwd=tmp_path)
    columns = yaml.safe_load(proc.stdout)["tables"]["visits"]["columns"]
    assert {n: c["type"] for n, c in columns.items()} == {"visitor": "str", "day": "date", "spent": "float"}
    missing = _dpsql("init", "--db", str(tmp_path / "nope.duckdb"), cwd=tmp_path)
    assert missing.returncode == 2 and "data file not found" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
