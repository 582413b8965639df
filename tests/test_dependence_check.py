"""k checked, not trusted: the policy names each table's dependence_group column and
`dpsql dependence check` measures the groups in the data against k."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import yaml
from dpsql.engine.errors import PolicyError
from dpsql.engine.policy_yaml import load_policy

from tests.support import BASE_POLICY, run_cli, write_policy


def households(path: Path, sizes: list[int], rows_per_unit: int = 1) -> Path:
    """A people table: household h has sizes[h] units, each unit rows_per_unit rows."""
    person, household = [], []
    unit = 0
    for h, size in enumerate(sizes):
        for _ in range(size):
            person += [unit] * rows_per_unit
            household += [h] * rows_per_unit
            unit += 1
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE people AS SELECT unnest($1) AS person_id, unnest($2) AS "
                     "household_id, 30 AS age, 10.0 AS income, 'CA' AS state, false AS sick, "
                     "'x' AS note", [person, household])
    return path


def grouped_policy(path: Path, k: int, group: object = "household_id") -> Path:
    """BASE_POLICY with k and the people table's dependence_group."""
    tables = yaml.safe_load(yaml.safe_dump(BASE_POLICY["tables"]))
    tables["people"]["dependence_group"] = group
    return write_policy(path, {"dependence": {"k": k, "eta": 0.5}, "tables": tables})


def test_policy_reads_the_group_column(tmp_path: Path) -> None:
    policy = load_policy(grouped_policy(tmp_path / "p.yaml", 3, "Household_ID"))
    assert policy.tables["people"].dependence_group == "household_id"
    assert load_policy(write_policy(tmp_path / "q.yaml")).tables["people"].dependence_group is None


@pytest.mark.parametrize("bad", [3, "", "  ", ["household_id"], True])
def test_policy_refuses_a_bad_group_column(tmp_path: Path, bad: object) -> None:
    with pytest.raises(PolicyError, match=r"^tables\.people\.dependence_group: expected a column name"):
        load_policy(grouped_policy(tmp_path / "p.yaml", 3, bad))


def test_groups_within_k_pass(tmp_path: Path, capsys) -> None:
    db = households(tmp_path / "d.duckdb", [1, 2, 3, 3])
    code, out, err = run_cli(capsys, "dependence", "check", "--db", str(db), "--policy",
                             str(grouped_policy(tmp_path / "p.yaml", 3)), "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == [{"table": "people", "group_column": "household_id", "k": 3,
                                "groups": 4, "largest": 3, "over_k": 0, "valid": True}]


def test_groups_over_k_make_the_policy_invalid(tmp_path: Path, capsys) -> None:
    db = households(tmp_path / "d.duckdb", [1, 5, 4, 2, 4])
    code, out, err = run_cli(capsys, "dependence", "check", "--db", str(db), "--policy",
                             str(grouped_policy(tmp_path / "p.yaml", 3)))
    assert code == 2
    assert "largest" in out and "NO" in out  # the table is printed before the refusal
    assert err.strip() == ("error: policy not valid for this data: 3 group(s) of table people have "
                           "more than k = 3 units (largest 5); raise dependence.k or fix the groups")


def test_units_not_rows_are_counted(tmp_path: Path, capsys) -> None:
    db = households(tmp_path / "d.duckdb", [2, 3], rows_per_unit=2)
    code, out, _ = run_cli(capsys, "dependence", "check", "--db", str(db), "--policy",
                           str(grouped_policy(tmp_path / "p.yaml", 3)), "--format", "json")
    assert code == 0 and json.loads(out)[0]["largest"] == 3


def test_missing_group_column_is_a_clear_error(tmp_path: Path, capsys) -> None:
    db = households(tmp_path / "d.duckdb", [2])
    policy = grouped_policy(tmp_path / "p.yaml", 3, "family")
    code, out, err = run_cli(capsys, "dependence", "check", "--db", str(db), "--policy", str(policy))
    assert (code, out) == (2, "")
    assert err.strip() == "error: tables.people.dependence_group: no column 'family' in the data"
    code, _, err = run_cli(capsys, "dependence", "check", "--db", str(db), "--policy",
                           str(write_policy(tmp_path / "q.yaml")))
    assert code == 2 and "no table names a dependence_group column" in err


def test_help_says_the_output_is_for_the_owner(capsys) -> None:
    code, out, _ = run_cli(capsys, "dependence", "check", "--help")
    assert code == 0 and "OWNER-SIDE" in out and "never show it to analysts" in " ".join(out.split())
