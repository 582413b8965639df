"""Seeded bugs for the black-box audit (tests/blackbox.py): each a change to the engine that
breaks its privacy or its accounting, with the case on which the real engine's loss is at its
claimed epsilon (so a bug that raises the loss, or charges less, shows). `apply(name, mp)`
patches one in with a pytest MonkeyPatch; tests/blackbox_score.py and
tests/test_audit_blackbox.py run them."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from dpsql.engine import database, prepare, release
from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.aggregates import sum as sum_aggregate
from dpsql.engine.backends import bounding, chain_units, duckdb_execute
from dpsql.engine.plan import ExactAnswer
from dpsql.engine.policy import Policy, ScopedEta
from pytest import MonkeyPatch
from sqlglot import exp

from tests.blackbox import Case

TWO = (("CA", 50, 500.0, True),) * 2  # the target's two rows (the per-unit bound)
MOVED = (("NY", 50, 500.0, True),) * 2
COUNT = Case("SELECT COUNT(*) AS n FROM people", 2.0, (), TWO)
SUM = Case("SELECT SUM(age) AS s FROM people", 2.0, (), (("CA", 100, 500.0, True),) * 2)
CLAMP = Case("SELECT SUM(age) AS s FROM people", 2.0, (("CA", 0, 500.0, True),) * 2,
             (("CA", 100_000, 500.0, True),) * 2)
GROUPS = Case("SELECT state, COUNT(*) AS n FROM people GROUP BY state", 2.0, TWO, MOVED)
GROUP_SUMS = Case("SELECT state, SUM(age) AS s FROM people GROUP BY state", 2.0,
                  (("CA", 100, 500.0, True),) * 2, (("NY", 100, 500.0, True),) * 2)
FOUR = Case("SELECT COUNT(*) AS a, COUNT(age) AS b, COUNT(income) AS c, COUNT(sick) AS d "
            "FROM people", 2.0, (), TWO)
EMPTY = Case("SELECT COUNT(*) AS n FROM people WHERE income > 2000", 2.0, (),
             (("CA", 50, 5000.0, True),) * 2)
ABSENT = Case("SELECT state, COUNT(*) AS n FROM people WHERE income > 2000 GROUP BY state", 2.0,
              (), (("CA", 50, 5000.0, True),) * 2)
FOUR_ROWS = Case("SELECT COUNT(*) AS n FROM people", 2.0, (), (("CA", 50, 500.0, True),) * 4)
HOUSE = Case("SELECT COUNT(*) AS n FROM people", 2.0, (), TWO, household=True)


def _sensitivity(scale=1.0, kind=None, rows=None, grouped=None):
    real = prepare.sensitivity

    def wrong(m, plan):
        if kind is not None and m.kind.name != kind:
            return real(m, plan)
        value = m.kind.sensitivity(m.operand, plan.rows_per_unit if rows is None else rows,
                                   bool(plan.group_by) if grouped is None else grouped)
        return value * scale

    return lambda mp: mp.setattr(prepare, "sensitivity", wrong)


def _epsilon_times(factor):
    real = prepare.build_mechanism
    return lambda mp: mp.setattr(prepare, "build_mechanism",
                                 lambda m, sens, eps: real(m, sens, eps * factor))


def _no_split(mp):
    real = prepare.Preparer.mechanisms
    mp.setattr(prepare.Preparer, "mechanisms",
               lambda self, plan, eps: real(self, plan, eps * len(plan.measurements)))


def _no_clamp(mp):
    """Values summed as they are: neither the query's per-row clamp nor the clamped value a
    bounded copy stores (docs/theory.md §34) bounds them."""
    mp.setattr(sum_aggregate, "clamped", lambda operand: sum_aggregate.number(operand))
    mp.setattr(bounding, "clamp_of", lambda column, value: value)
    mp.setattr(duckdb_execute, "_COPY_SQL", {})  # statements rendered before the bug: not reused


def _clamp_after_sum(mp):
    def sql(self, operand, table):
        total = exp.Sum(this=sum_aggregate.number(operand))
        lo, hi = (exp.Literal.number(b * 10_000) for b in operand.bounds)
        return exp.Least(this=exp.Greatest(this=total, expressions=[lo]), expressions=[hi])

    mp.setattr(sum_aggregate.Sum, "sql", sql)


def _eta_zero(mp):
    mp.setattr(Policy, "eta_for", lambda self, columns: ScopedEta(0.0, None))


def _k_one(mp):
    real = prepare.DependenceModel
    mp.setattr(prepare, "DependenceModel", lambda k, eta: real(1, eta))


def _independent(mp):
    real = prepare.Preparer.calibrate
    mp.setattr(prepare.Preparer, "calibrate",
               lambda self, eps, mode, model: real(self, eps, mode, prepare.DependenceModel(1, 0.0)))


def _release(change):
    real = release.release_cells

    def wrong(mech, exact):
        return change(mech, exact, real(mech, exact))

    return lambda mp: mp.setattr(release, "release_cells", wrong)


def _zero_exact(mech, exact, noisy):
    return {c: [e if e == 0 else v for e, v in zip(exact[c], noisy[c], strict=True)] for c in noisy}


def _fixed_noise():
    drawn: dict = {}

    def change(mech, exact, noisy):
        name = mech.measurement.name
        for c in noisy:
            drawn.setdefault((name, c), [v - e for v, e in zip(noisy[c], exact[c], strict=True)])
        return {c: [e + d for e, d in zip(exact[c], drawn[(name, c)], strict=True)] for c in noisy}

    return change


def _first_group_only(mech, exact, noisy):
    return {c: noisy[c][:1] + list(exact[c][1:]) for c in noisy}


def _large_exact(mech, exact, noisy):
    """Counts over 50 released without noise, as if their noise did not matter: a decision
    on the data (the base population holds 49 rows, 51 with the target's two)."""
    return {c: [e if e > 50 else v for e, v in zip(exact[c], noisy[c], strict=True)] for c in noisy}


def _present_groups_only(mp):
    """Groups no row reached left out of the answer, as a GROUP BY on the data alone would:
    which groups appear then says whose rows are there."""
    real = database.release_answer

    def wrong(post, plan, post_sql, exact, mechanisms):
        kept = [i for i in range(len(exact.keys))
                if any(v[i] not in (0, None) for v in exact.values.values())]
        present = ExactAnswer([exact.keys[i] for i in kept],
                              {c: [v[i] for i in kept] for c, v in exact.values.items()})
        return real(post, plan, post_sql, present, mechanisms)

    mp.setattr(database, "release_answer", wrong)


def _rows_over_the_bound_kept(mp):
    """A unit's rows past max_rows_per_unit read anyway, while the sensitivity assumes the bound
    (in both modules that build a bounded copy's rows: a copy made by either keeps them all)."""
    real = bounding.kept_rows

    def every_row(table, *args):
        return real(dataclasses.replace(table, max_rows_per_unit=10**9), *args)

    for module in (duckdb_execute, chain_units):
        mp.setattr(module, "kept_rows", every_row)
    mp.setattr(duckdb_execute, "_COPY_SQL", {})  # statements rendered before the bug: not reused


def _charges(keep):
    real = Ledger.charge
    count = itertools.count()

    def charge(self, settle, analyst=None):
        if keep(next(count)):
            return real(self, settle, analyst)
        return 0, settle(self.state())[1]

    return lambda mp: mp.setattr(Ledger, "charge", charge)


def _half_charge(mp):
    real = Ledger.charge

    def charge(self, settle, analyst=None):
        def cheaper(*args):
            made, result = settle(*args)
            cost = dataclasses.replace(made.cost, epsilon_dp=made.cost.epsilon_dp / 2)
            return dataclasses.replace(made, cost=cost), result

        return real(self, cheaper, analyst)

    mp.setattr(Ledger, "charge", charge)


BUGS: dict[str, tuple[Callable[[MonkeyPatch], None], Case]] = {
    "halved sensitivity": (_sensitivity(0.5), COUNT),
    "SUM's sensitivity halved": (_sensitivity(0.5, "SUM"), SUM),
    "max_rows_per_unit ignored in the sensitivity": (_sensitivity(rows=1), COUNT),
    "GROUP BY COUNT's sensitivity as if ungrouped": (_sensitivity(grouped=False), GROUPS),
    "GROUP BY SUM's sensitivity as if ungrouped": (_sensitivity(grouped=False), GROUP_SUMS),
    "noise on the wrong scale (epsilon_dp doubled)": (_epsilon_times(2.0), SUM),
    "epsilon_dp not split between aggregates": (_no_split, FOUR),
    "per-row clamp dropped": (_no_clamp, CLAMP),
    "clamp after the sum": (_clamp_after_sum, CLAMP),
    "wrong eta (read as 0)": (_eta_zero, HOUSE),
    "wrong k (read as 1)": (_k_one, HOUSE),
    "calibrated as independent records": (_independent, HOUSE),
    "an exact zero released without noise": (_release(_zero_exact), EMPTY),
    "noise drawn once and reused": (_release(_fixed_noise()), COUNT),
    "only the first group noised": (_release(_first_group_only), GROUPS),
    "a data-dependent noise decision": (_release(_large_exact), COUNT),
    "charge skipped": (_charges(lambda i: False), COUNT),
    "charged half the stated epsilon_dp": (_half_charge, COUNT),
    "groups without rows left out": (_present_groups_only, ABSENT),
    "rows over the per-unit bound kept": (_rows_over_the_bound_kept, FOUR_ROWS),
}


def apply(name: str, mp: MonkeyPatch) -> Case:
    """Patch bug `name` into the engine (undone when `mp` is) and return its case."""
    patch, case = BUGS[name]
    if name == "noise drawn once and reused":  # a fresh cache for each run
        patch = _release(_fixed_noise())
    patch(mp)
    return case
