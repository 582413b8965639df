"""L1 sensitivity of each noisy measurement under 'change one individual' (docs/theory.md §8)."""

from __future__ import annotations

from .plan import Measurement, QueryPlan


def sensitivity(measurement: Measurement, plan: QueryPlan) -> float | int:
    """How far one individual's record, at most `plan.rows_per_unit` rows read (the table's
    `max_rows_per_unit`, or m1 · m2 joined on the unit), can move the measurement, summed over
    all groups; each aggregate gives its own rule (engine/aggregates/)."""
    return measurement.kind.sensitivity(measurement.operand, plan.rows_per_unit,
                                        bool(plan.group_by))
