"""The aggregate registry: a new aggregate is one module plus one registration line, and every
part of the engine (binding, sensitivity, rewrite, gate, noise, intervals, messages) follows it."""

from __future__ import annotations

import math

import pytest
from dpsql.engine import PrivateDatabase, QueryRefused, aggregates
from dpsql.engine.aggregates import Binder, Measured, Operand
from dpsql.engine.aggregates.sum import bounded_numeric
from dpsql.engine.policy import TableSpec
from sqlglot import exp


class ClampedMax(Measured):
    """MAX of values clamped to [lo, hi]: one individual moves each of at most 2m groups by at
    most hi - lo (a new aggregate written the way docs/architecture.md says)."""

    name = "MAX"
    usage = "MAX(col)"
    function = "MAX"
    bound = frozenset({"max"})

    def matches(self, node: exp.AggFunc) -> bool:
        return isinstance(node, exp.Max)

    def bind(self, node: exp.AggFunc, binder: Binder) -> exp.Expression:
        return binder.measurement(self, bounded_numeric(node, binder))

    def integer(self, operand: Operand | None) -> bool:
        return operand is not None and operand.type == "int"

    def sensitivity(self, operand: Operand | None, rows_per_unit: int, grouped: bool) -> float:
        assert operand is not None
        lo, hi = operand.bounds
        return (2 * rows_per_unit if grouped else 1) * (hi - lo)

    def sql(self, operand: Operand | None, table: TableSpec) -> exp.Expr:
        assert operand is not None
        lo, hi = (exp.Literal.number(b) for b in operand.bounds)
        value = operand.value
        return exp.Max(this=exp.Greatest(this=exp.Least(this=value, expressions=[hi], ignore_nulls=True),
                                         expressions=[lo], ignore_nulls=True))


def test_an_unregistered_aggregate_is_refused_with_the_registry_list(setup):
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        with pytest.raises(QueryRefused) as info:
            db.explain("SELECT MODE(age) FROM people", epsilon=1.0)
    assert str(info.value).endswith(f"supported aggregates are {aggregates.supported()}")
    assert "MODE" not in aggregates.supported()


def test_a_new_aggregate_is_one_module_and_one_registration_line(setup, monkeypatch):
    # In place of the registered MAX (a quantile of a noisy histogram).
    registered = tuple(a for a in aggregates.AGGREGATES if a.name != "MAX")
    monkeypatch.setattr(aggregates, "AGGREGATES", registered + (ClampedMax(),))
    sql = "SELECT state, MAX(age) AS oldest FROM people GROUP BY state"
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        explained = db.explain(sql, epsilon=1.0)
        (info,) = explained.aggregates
        assert (info.column, info.function, info.mechanism) == ("oldest", "MAX(age)", "discrete_laplace")
        assert info.sensitivity == 2 * 2 * 100  # 2m groups, each moved by at most hi - lo
        assert "MAX(" in explained.rewritten_sql
        result = db.query(sql, epsilon=1.0)
    assert list(result.df.columns) == ["state", "oldest"] and len(result.df) == 4
    assert all(math.isfinite(w) and w > 0 for w in result.ci95["oldest"])
    assert "MAX(col)" in aggregates.supported()


def test_every_registered_aggregate_is_reached_and_listed():
    names = [a.name for a in aggregates.AGGREGATES]
    assert names == ["COUNT", "COUNT(DISTINCT unit)", "SUM DISTINCT", "AVG DISTINCT", "SUM", "AVG",
                     "VAR_POP", "VAR_SAMP", "STDDEV_POP", "STDDEV_SAMP", "MEDIAN", "QUANTILE_CONT",
                     "MIN", "MAX"]
    assert aggregates.supported() == \
        "COUNT(*), COUNT(expr), COUNT(DISTINCT <privacy unit>), COUNT(DISTINCT expr), " \
        "SUM(DISTINCT expr), AVG(DISTINCT expr), SUM(expr), AVG(expr), " \
        "VAR_POP(expr), VAR_SAMP(expr), STDDEV_POP(expr), STDDEV_SAMP(expr), MEDIAN(expr), " \
        "QUANTILE_CONT(expr, q), MIN(expr) (the 0 quantile of a noisy histogram), " \
        "MAX(expr) (the 1 quantile of a noisy histogram)"
    for sql, name in (("COUNT(*)", "COUNT"), ("COUNT(DISTINCT person_id)", "COUNT(DISTINCT unit)"),
                      ("COUNT(DISTINCT age)", "COUNT(DISTINCT unit)"),
                      ("SUM(DISTINCT age)", "SUM DISTINCT"), ("AVG(DISTINCT age)", "AVG DISTINCT"),
                      ("SUM(age)", "SUM"), ("AVG(age)", "AVG"), ("VAR_POP(age)", "VAR_POP"),
                      ("VARIANCE(age)", "VAR_SAMP"), ("VAR_SAMP(age)", "VAR_SAMP"),
                      ("STDDEV_POP(age)", "STDDEV_POP"), ("STDDEV(age)", "STDDEV_SAMP"),
                      ("STDDEV_SAMP(age)", "STDDEV_SAMP"), ("MEDIAN(age)", "MEDIAN"),
                      ("QUANTILE_CONT(age, 0.9)", "QUANTILE_CONT"),
                      ("PERCENTILE_CONT(age, 0.9)", "QUANTILE_CONT"), ("MIN(age)", "MIN"),
                      ("MAX(age)", "MAX")):
        node = exp.maybe_parse(sql, dialect="duckdb")
        assert aggregates.aggregate_of(node).name == name
