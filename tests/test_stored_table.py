"""An answer rebuilt from its stored JSON (a reused answer, `history`, the service's client) is
built without pandas when its columns are of the kinds a frame infers plainly, and holds exactly
what the frame pandas builds of the same rows holds: the same rows, floats and DataFrame."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest
from dpsql.engine.answer_table import Table

CASES = [
    ([["CA", 3, 1.5, True], ["NY", -2, 2.0, False]], ["k", "n", "x", "b"]),
    ([["CA", None, 1], ["TX", 2.5, 2]], ["k", "x", "n"]),  # a missing number: a float column
    ([[1, 2.0], [3, 4.5]], ["a", "b"]),  # integers beside floats
    ([[None, "a"], [None, "b"]], ["gone", "k"]),  # a column of nothing but NULL
    ([["a", None], ["b", 1]], ["k", "mixed"]),
    ([[True, 1], [None, 2]], ["flag", "n"]),  # a missing boolean
    ([["x"], [None]], ["text"]),  # text with a missing value
    ([[2 ** 63 - 1], [-(2 ** 63)]], ["big"]),
    ([[2 ** 60, 0.5]], ["huge", "f"]),
    ([[float("nan"), float("inf")]], ["nan", "inf"]),
    ([["2024-01-01", 3]], ["day", "n"]),
    ([], ["k", "n"]),
]


def _through_pandas(rows: list[list], columns: list[str], numbers: bool) -> Table:
    return Table.of_frame(pd.DataFrame(rows, columns=columns, dtype=float if numbers else None))


@pytest.mark.parametrize("rows, columns", CASES)
def test_a_stored_answer_is_the_frame_pandas_builds_of_it(rows, columns):
    built, expected = Table.of_stored(rows, columns), _through_pandas(rows, columns, False)
    assert built.columns == expected.columns and len(built) == len(expected)
    assert _same(built.rows(), expected.rows()) and _same(built.object_rows(), expected.object_rows())
    pd.testing.assert_frame_equal(built.frame(), expected.frame())


@pytest.mark.parametrize("rows", [[[1.5, None], [None, 2]], [[None, None]], [[0.0, 3]], []])
def test_stored_half_widths_are_read_as_floats(rows):
    columns = ["a", "b"]
    built, expected = Table.of_stored(rows, columns, numbers=True), _through_pandas(rows, columns, True)
    assert _same(built.floats(), expected.floats())
    pd.testing.assert_frame_equal(built.frame(), expected.frame())


def test_plain_columns_need_no_pandas():
    """Rebuilding an answer of text keys and numbers imports no pandas."""
    code = ("import sys; from dpsql.engine.result import QueryResult; "
            "from dpsql.engine.answer_table import Table; "
            "t = Table.of_stored([['CA', 3, 1.5], ['NY', None, 2.0]], ['k', 'n', 'x']); "
            "t.rows(); Table.of_stored([[1.0, None]], ['a', 'b'], numbers=True).floats(); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _same(a: list[list], b: list[list]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(type(u) is type(v) and (u == v or (isinstance(u, float) and
                                 math.isnan(u) and math.isnan(v))) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True))
