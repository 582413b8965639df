"""L1 sensitivity of each noisy measurement under 'change one individual' (docs/theory.md §8)."""

from __future__ import annotations

from .plan import Measurement, QueryPlan


def sensitivity(measurement: Measurement, plan: QueryPlan) -> float | int:
    """How far one individual's record can move the measurement, summed over all groups.

    With at most m rows per unit: a COUNT moves by m (2m across groups, when the unit's rows
    move between groups); a SUM of values clamped to [lo, hi] by m·(max(hi,0) − min(lo,0))
    (2m·max(|lo|, |hi|) across groups); COUNT(DISTINCT unit) by 1 (2m across groups).
    """
    m = plan.table.max_rows_per_unit
    grouped = bool(plan.group_by)
    if measurement.kind == "count":
        return 2 * m if grouped else m
    if measurement.kind == "count_distinct":
        return 2 * m if grouped else 1
    lo, hi = measurement.summed.bounds
    if grouped:
        return 2 * m * max(abs(lo), abs(hi))
    return m * (max(hi, 0) - min(lo, 0))
