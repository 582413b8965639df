"""The scalar whitelist is one table (engine/sql/scalars.py): every function a refusal lists is
accepted by binding and by the gate, the gate knows how DuckDB binds every entry, and what
the table leaves out is refused with the table's own list."""

from __future__ import annotations

import re

import pytest
from dpsql.engine import PrivateDatabase, QueryRefused
from dpsql.engine.sql.harden import BOUND_AS, harden
from dpsql.engine.sql.scalars import RELEASED_SCALARS, SCALAR_FUNCTIONS, SCALARS, scalar_of
from sqlglot import exp

# One use of each listed function, on the people table (tests/support.py).
EXAMPLES = {
    "ABS": "ABS(age - 50) < 10",
    "ROUND": "ROUND(income, 1) > 3",
    "FLOOR": "FLOOR(income) = 3",
    "CEIL": "CEIL(income / 7) > 2",
    "SQRT": "SQRT(age - 50) < 3",
    "LOWER": "LOWER(note) = 'row'",
    "UPPER": "UPPER(state) = 'CA'",
    "TRIM": "TRIM(note) = 'row'",
    "LENGTH": "LENGTH(note) > 1",
    "SUBSTRING": "SUBSTRING(note, 1, 2) = 'ro'",
    "COALESCE": "COALESCE(income, 0) > 1",
    "LEAST": "LEAST(age, 30) = 30",
    "GREATEST": "GREATEST(income, 5.5) > 6",
    "CAST": "CAST(age AS DOUBLE) > 2",
    "CASE": "CASE WHEN sick THEN age ELSE 0 END > 3",
    "EXTRACT": "EXTRACT(year FROM DATE '2024-03-05') = 2024",
    "DATE_TRUNC": "DATE_TRUNC('month', DATE '2024-03-05') = DATE '2024-03-01'",
}


def _listed(message: str) -> list[str]:
    found = re.search(r"(?:allowed|whitelist): ([A-Z_, ]+)[;)]", message)
    assert found is not None, message
    return found.group(1).split(", ")


def test_every_function_has_an_example():
    assert set(EXAMPLES) == {s.name for s in SCALARS if s.function}


def test_gate_knows_how_duckdb_binds_every_entry():
    assert set(BOUND_AS) == {s.name for s in SCALARS + RELEASED_SCALARS}


# One use of each function allowed on released values only, in SELECT after noise.
RELEASED_EXAMPLES = {"POWER": "POWER(AVG(age), 2)", "PI": "PI() * AVG(age)", "LN": "LN(AVG(age))",
                     "EXP": "EXP(AVG(age) / 100)", "LOG10": "LOG10(AVG(age))",
                     "COS": "COS(AVG(age))", "SIN": "SIN(AVG(age))"}


@pytest.mark.parametrize("name", sorted(RELEASED_EXAMPLES))
def test_every_released_only_function_is_accepted_after_noise_and_refused_on_rows(setup, name):
    assert set(RELEASED_EXAMPLES) == {s.name for s in RELEASED_SCALARS}
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.explain(f"SELECT state, {RELEASED_EXAMPLES[name]} FROM people GROUP BY state", epsilon=1.0)
        row_level = RELEASED_EXAMPLES[name].replace("AVG(age)", "age")
        with pytest.raises(QueryRefused) as info:
            db.explain(f"SELECT COUNT(*) FROM people WHERE {row_level} > 1", epsilon=1.0)
    assert ", ".join(_listed(str(info.value))) == SCALAR_FUNCTIONS


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_listed_function_is_accepted_by_binding_and_gate(setup, name):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        db.explain(f"SELECT COUNT(*) FROM people WHERE {EXAMPLES[name]}", epsilon=1.0)


@pytest.mark.parametrize("call", ["IF(sick, 1, 0) = 1", "EXP(income) > 1", "my_udf(age) = 1"])
def test_what_the_table_leaves_out_is_refused_with_its_list(setup, call):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(QueryRefused) as info:
            db.explain(f"SELECT COUNT(*) FROM people WHERE {call}", epsilon=1.0)
    assert ", ".join(_listed(str(info.value))) == SCALAR_FUNCTIONS


def test_if_outside_case_is_refused_in_post_processing_too(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(QueryRefused, match=r"function IF\(\) \(allowed: "):
            db.explain("SELECT state, IF(COUNT(*) > 3, 1, 0) FROM people GROUP BY state", epsilon=1.0)


def test_hardening_follows_the_table():
    """Operands of the scalars DuckDB makes total only on DOUBLE are TRY_CAST to DOUBLE."""
    for scalar in SCALARS:
        if "double" not in BOUND_AS[scalar.name]:
            continue
        for kind in scalar.nodes:
            node = kind(this=exp.column("x"), expression=exp.Literal.number(2)) \
                if "expression" in scalar.nodes[kind] else kind(this=exp.column("x"))
            assert scalar_of(node) is scalar
            hardened = harden(node)
            assert "TRY_CAST(x AS DOUBLE)" in hardened.sql("duckdb"), (scalar.name, kind)
