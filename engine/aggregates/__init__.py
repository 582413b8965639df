"""The aggregate registry: every aggregate the analyst may write, one module each.

A new aggregate is one module here (an `Aggregate`, or a `Measured` one if it is a noisy
measurement itself) plus its line in AGGREGATES; binding, sensitivity, the rewrite, noise,
intervals, the gate and refusal messages all read the registry when they run.
"""

from sqlglot import exp

from .avg import AVG
from .base import Accuracy, Aggregate, Binder, Measured, Operand
from .count import COUNT
from .count_distinct import COUNT_DISTINCT_UNIT
from .distinct import AVG_DISTINCT, SUM_DISTINCT
from .quantile import MAX, MEDIAN, MIN, QUANTILE_CONT, Histogram
from .sum import SUM
from .variance import STDDEV_POP, STDDEV_SAMP, VAR_POP, VAR_SAMP

AGGREGATES: tuple[Aggregate, ...] = (COUNT, COUNT_DISTINCT_UNIT, SUM_DISTINCT, AVG_DISTINCT, SUM, AVG,
                                     VAR_POP, VAR_SAMP,
                                     STDDEV_POP, STDDEV_SAMP, MEDIAN, QUANTILE_CONT, MIN, MAX)


def aggregate_of(node: exp.AggFunc) -> Aggregate | None:
    """The registered aggregate that binds the sqlglot aggregate call `node`, or None."""
    return next((a for a in AGGREGATES if a.matches(node)), None)


def measured() -> tuple[Measured, ...]:
    """The registered aggregates that are noisy measurements themselves."""
    return tuple(a for a in AGGREGATES if isinstance(a, Measured))


def supported() -> str:
    """The registered aggregates as refusals list them."""
    return ", ".join(a.usage for a in AGGREGATES)


__all__ = ["AGGREGATES", "AVG", "AVG_DISTINCT", "COUNT", "SUM_DISTINCT",
           "COUNT_DISTINCT_UNIT", "MAX", "MEDIAN", "MIN", "QUANTILE_CONT",
           "STDDEV_POP", "STDDEV_SAMP", "SUM", "VAR_POP", "VAR_SAMP", "Accuracy", "Aggregate", "Binder",
           "Histogram", "Measured", "Operand",
           "aggregate_of", "measured", "supported"]
