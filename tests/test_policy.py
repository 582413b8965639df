"""Policy validation: every malformed or contradictory policy names the field path."""

from __future__ import annotations

import copy

import pytest
from dpsql.engine import PolicyError
from dpsql.engine.policy_yaml import load_policy, parse_policy

from tests.support import BASE_POLICY


def _with(path: str, value):
    policy = copy.deepcopy(BASE_POLICY)
    *parents, last = path.split(".")
    node = policy
    for key in parents:
        node = node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return policy


_DELETE = object()


def test_base_policy_loads_with_lowercased_names():
    policy = parse_policy(BASE_POLICY)
    table = policy.tables["people"]
    assert table.privacy_unit == "person_id" and table.max_rows_per_unit == 2
    assert table.columns["state"].group_values == ("CA", "NY", "TX", "WA")
    assert table.columns["sick"].group_values == (False, True)
    assert table.columns["income"].bounded and not table.columns["note"].bounded


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("budget.epsilon", 0, "budget.epsilon: expected a number > 0"),
        ("budget.epsilon", "lots", "budget.epsilon: expected a finite number"),
        ("budget.epsilon", float("inf"), "budget.epsilon: expected a finite number"),
        ("budget", _DELETE, "budget: required field is missing"),
        ("dependence.k", 0, "dependence.k: expected an integer >= 1"),
        ("dependence.k", 2.5, "dependence.k: expected an integer >= 1"),
        ("dependence.eta", 1.5, "dependence.eta: expected a number in [0, 1]"),
        ("dependence.mode", "magic", "dependence.mode: expected one of"),
        ("dependence.colour", "red", "dependence.colour: unknown field"),
        ("tables", {}, "tables: expected at least one table"),
        ("tables.people.max_rows_per_unit", 0, "tables.people.max_rows_per_unit: expected an integer >= 1"),
        ("tables.people.columns.income.upper", "high", "tables.people.columns.income.upper: expected a finite"),
        ("tables.people.columns.income.upper", -1, "tables.people.columns.income: lower (0.0) is greater"),
        ("tables.people.columns.income.lower", _DELETE, "columns.income: give both lower and upper"),
        ("tables.people.columns.age.upper", 10.5, "tables.people.columns.age.upper: expected an integer bound"),
        ("tables.people.columns.age.type", "datetime", "tables.people.columns.age.type: expected one of"),
        ("tables.people.columns.state.domain", [], "tables.people.columns.state.domain: expected a non-empty"),
        ("tables.people.columns.state.domain", ["CA", "CA"], "values must be distinct"),
        ("tables.people.columns.state.lower", 1, "lower/upper bounds are only allowed"),
        ("tables.people.columns.sick.domain", [1], "a public domain is only allowed on int or str"),
        ("tables.people.columns.person_id", {"type": "int"}, "the privacy unit may not be listed"),
    ],
)
def test_bad_policy_names_the_field(path, value, message):
    with pytest.raises(PolicyError) as info:
        parse_policy(_with(path, value))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_independent_mode_contradicts_dependent_records():
    policy = _with("dependence", {"k": 3, "eta": 0.2, "mode": "independent"})
    with pytest.raises(PolicyError, match="dependence.mode: 'independent' contradicts"):
        parse_policy(policy)


def test_rows_per_unit_without_a_unit_is_contradictory():
    policy = _with("tables.people.privacy_unit", _DELETE)
    with pytest.raises(PolicyError, match="max_rows_per_unit: without a privacy_unit"):
        parse_policy(policy)


def test_unreadable_and_missing_policy_files(tmp_path):
    with pytest.raises(PolicyError, match="policy file not found"):
        load_policy(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("budget: [unclosed\n")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(PolicyError, match="expected a mapping"):
        load_policy(scalar)
