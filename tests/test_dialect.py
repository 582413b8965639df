"""The spellings peers' users write (docs/theory.md §22): each is answered exactly as its
canonical spelling is (the same plan, so the same sensitivity, charge and answer), or refused
with one line naming what is accepted when peers give it different meanings."""

from __future__ import annotations

import dataclasses

import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.sql.bind import build_plan
from dpsql.engine.sql.parse import parse_select

from tests.support import BASE_POLICY, create_ledger, write_policy

POLICY = parse_policy(BASE_POLICY)


def _plan(sql: str):
    """The plan of `sql` without its text, so two spellings' plans compare equal."""
    return dataclasses.replace(build_plan(parse_select(sql), POLICY, sql), sql="")


def _refusal(sql: str) -> str:
    with pytest.raises(QueryRefused) as info:
        build_plan(parse_select(sql), POLICY, sql)
    return str(info.value)


@pytest.mark.parametrize("written, canonical", [
    ("SELECT VARIANCE(age) AS v FROM people", "SELECT VAR_SAMP(age) AS v FROM people"),
    ("SELECT STDDEV(age) AS v FROM people", "SELECT STDDEV_SAMP(age) AS v FROM people"),
    ("SELECT state, variance(income) AS v FROM people GROUP BY state",
     "SELECT state, VAR_SAMP(income) AS v FROM people GROUP BY state"),
])
def test_variance_spellings_are_the_canonical_aggregate(written, canonical):
    assert _plan(written) == _plan(canonical)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT VAR(age) FROM people", "VAR(age) refused in SELECT: VAR is the sample variance in SQL "
     "Server but the population variance in SmartNoise SQL; write VAR_SAMP"),
    ("SELECT std(age) FROM people", "STD(age) refused in SELECT: STD is the population deviation"),
    ("SELECT state, COUNT(*) FROM people GROUP BY state HAVING STD(age) > 1", "refused in HAVING: STD is"),
])
def test_spellings_peers_read_differently_are_refused_naming_both(sql, fragment):
    assert fragment in _refusal(sql)


@pytest.mark.parametrize("written, canonical", [
    ("SELECT TOP 2 state, COUNT(*) FROM people GROUP BY state ORDER BY 2 DESC",
     "SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY 2 DESC LIMIT 2"),
    ("select top (3) state, AVG(age) AS a FROM people GROUP BY state",
     "SELECT state, AVG(age) AS a FROM people GROUP BY state LIMIT 3"),
    ("SELECT TOP 0 COUNT(*) FROM people", "SELECT COUNT(*) FROM people LIMIT 0"),
])
def test_top_is_limit(written, canonical):
    assert _plan(written) == _plan(canonical)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT TOP 5 PERCENT COUNT(*) FROM people", "TOP n PERCENT refused"),
    ("SELECT TOP 5 WITH TIES state, COUNT(*) FROM people GROUP BY state", "TOP n WITH TIES refused"),
    ("SELECT TOP 2 COUNT(*) FROM people LIMIT 3", "TOP and LIMIT both given"),
    ("SELECT TOP 1.5 COUNT(*) FROM people", "LIMIT 1.5 refused: expected a whole number"),
    ("SELECT top FROM people", "unknown column 'top'"),
])
def test_top_refusals(sql, fragment):
    assert fragment in _refusal(sql)


def test_top_releases_only_n_rows_and_charges_as_limit(people_db, tmp_path):
    """TOP keeps the first n released rows (post-processing): the charge is the full query's."""
    policy = write_policy(tmp_path / "policy.yaml")
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(people_db, policy, ledger) as db:
        top = db.query("SELECT TOP 2 state, COUNT(*) AS n FROM people GROUP BY state "
                       "ORDER BY state", epsilon=1.0)
        limit = db.query("SELECT state, COUNT(*) AS n FROM people GROUP BY state "
                         "ORDER BY state LIMIT 2", epsilon=1.0)
    assert list(top.df["state"]) == list(limit.df["state"]) == ["CA", "NY"]
    assert (top.epsilon, top.epsilon_dp) == (limit.epsilon, limit.epsilon_dp)
