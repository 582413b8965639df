"""What an IP level means in information terms (Theorem 1)."""

from __future__ import annotations

import math

from .validation import require_nonnegative


def mutual_information_bound(level: float) -> tuple[float, float]:
    """(nats, bits) bound on I(X_i; Y) for a level-IP mechanism: I <= level nats (Theorem 1)."""
    nats = require_nonnegative("level", level)
    return nats, nats / math.log(2.0)
