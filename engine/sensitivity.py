"""L1 sensitivity of each noisy measurement under 'change one individual' (docs/theory.md §8)."""

from __future__ import annotations

from .plan import Measurement, QueryPlan


def sensitivity(measurement: Measurement, plan: QueryPlan) -> float | int:
    """How far one individual's record, at most `max_rows_per_unit` rows of the plan's table,
    can move the measurement, summed over all groups; each aggregate gives its own rule
    (engine/aggregates/)."""
    return measurement.kind.sensitivity(measurement.operand, plan.table.max_rows_per_unit,
                                        bool(plan.group_by))
