"""An answer held without pandas (engine/answer_table.py) prints as the same answer held as a
DataFrame: its CSV is byte for byte what pandas' `to_csv` writes, its cells, intervals and JSON
rows the frame's, over many random tables of every column type a direct answer holds."""

from __future__ import annotations

import datetime
import math
import random

import pytest
from dpsql.engine.answer_table import Table
from dpsql.engine.commands_output import _frame_csv, answer_csv
from dpsql.engine.result import BudgetStatus, QueryResult

FLOATS = [0.0, -0.0, 0.1, 1e16, 1.5e16, 1e-5, 123456789.123, 1e308, 5e-324, 2.5, -3.75, 1 / 3,
          1e15, 9007199254740993.0, 123.0, 36.43837362866835]
TEXT = ["a", "=1+2", "-x", "b,c", 'say "hi"', "", "line\nbreak", "\x1b[31m", "@sum", "+1"]
NAMES = ["n", "x", "=a", "a,b", 'q"', "n_ci95", "k", "s t"]


def _column(kind: str, rows: int, rng: random.Random) -> list:
    if kind == "BIGINT":
        return [rng.choice([0, -5, 7, 2**62, 2**63 - 1, -(2**63)]) for _ in range(rows)]
    if kind == "DOUBLE":
        return [rng.choice(FLOATS) * rng.choice([1, -1]) for _ in range(rows)]
    if kind == "BOOLEAN":
        return [rng.random() < 0.5 for _ in range(rows)]
    if kind == "VARCHAR":
        return [rng.choice(TEXT) for _ in range(rows)]
    return [datetime.date(2020, rng.randint(1, 12), rng.randint(1, 28)) for _ in range(rows)]


def _result(rng: random.Random) -> QueryResult:
    rows = rng.randint(0, 4)
    kinds: dict[str, str] = {}
    for kind in rng.sample(["BIGINT", "DOUBLE", "BOOLEAN", "VARCHAR", "DATE"], rng.randint(1, 4)):
        kinds.setdefault(rng.choice(NAMES) + rng.choice(["", "2"]), kind)
    table = Table.of_columns({name: _column(kind, rows, rng) for name, kind in kinds.items()},
                             kinds, rows)
    noisy = [kind in ("BIGINT", "DOUBLE") and rng.random() < 0.8 for kind in kinds.values()]
    widths = {name: [rng.choice([math.nan, 1.5, 0.1, 36.43837362866835, 2e16]) if is_noisy
                     else math.nan for _ in range(rows)]
              for name, is_noisy in zip(kinds, noisy, strict=True)}
    ci95 = Table.of_columns(widths, dict.fromkeys(kinds, "DOUBLE"), rows)
    possible = tuple(((rng.choice([0.0, -math.inf]), rng.choice([math.inf, 100.0]))
                      if is_noisy else None) for is_noisy in noisy)
    budget = BudgetStatus(total=1.0, spent_ip=0.5, spent_dp=0.5, remaining=0.5,
                          remaining_dp=0.5, largest_epsilon=0.5, mode="group")
    return QueryResult(table=table, ci95_table=ci95, simultaneous_table=ci95,
                       selection_adjusted=True, sql="SELECT 1", epsilon=1.0, epsilon_dp=1.0,
                       mode="group", k=1, eta=0.0, aggregates=(), budget=budget, level_before=0.0,
                       level_after=0.5, cost=0.5, possible=possible)


@pytest.mark.parametrize("seed", range(2))
def test_an_answer_without_pandas_prints_as_its_frame_does(seed):
    rng = random.Random(seed)
    for _ in range(60):
        result = _result(rng)
        held = QueryResult(**{**result.__dict__, "table": Table.of_frame(result.table.frame()),
                              "ci95_table": Table.of_frame(result.ci95_table.frame()),
                              "simultaneous_table": Table.of_frame(result.ci95_table.frame())})
        assert answer_csv(result) == _frame_csv(result)
        assert answer_csv(held) == _frame_csv(held) == answer_csv(result)
        assert result.cells(result.ci95_table) == held.cells(held.ci95)
        assert result.to_dict() == held.to_dict()
        assert result.table._frame is not None  # the frame was built, for the comparison
