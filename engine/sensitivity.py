"""L1 sensitivity of each noisy measurement under 'change one individual' (docs/theory.md §8)."""

from __future__ import annotations

from .aggregates import SUM
from .plan import Measurement, QueryPlan


def sensitivity(measurement: Measurement, plan: QueryPlan) -> float | int:
    """How far one individual's record, at most `plan.rows_per_unit` rows read (the table's
    `max_rows_per_unit`, or m1 · m2 joined on the unit, or a two-level query's rows per unit,
    one for a SUM of a per-unit COUNT or SUM, §29), can move the measurement, summed over all
    groups; each aggregate gives its own rule (engine/aggregates/)."""
    rows = plan.rows_per_unit if plan.inner is None else \
        plan.inner.rows_for(measurement.kind is SUM, measurement.operand)
    return measurement.kind.sensitivity(measurement.operand, rows, bool(plan.group_by))
