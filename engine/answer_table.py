"""An answer's cells as Python values, without pandas: what the command line prints and the
ledger stores. The DataFrame the Python API shows (`QueryResult.df`) is built from it on first
use, with the dtypes the answer had as a frame, so a query printed by `dpsql` imports no pandas."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Values = Sequence[Any] | np.ndarray
"""A column's values: a list (or other sequence) of Python values, or a numpy array."""

_NUMPY = {"BOOLEAN": np.bool_, "BIGINT": np.int64, "DOUBLE": np.float64}
"""The numpy dtype of each DuckDB type a directly built column holds; VARCHAR, DATE and
TIMESTAMP columns hold Python objects."""


class Table:
    """Named columns of an answer: either Python values by column with each column's DuckDB
    type (`of_columns`, built without pandas) or a DataFrame (`of_frame`, an answer that went
    through pandas); both give the same rows, object rows and floats the frame would."""

    def __init__(self, columns: Mapping[str, list] | None, kinds: Mapping[str, str] | None,
                 rows: int, frame: pd.DataFrame | None) -> None:
        self._columns = columns
        self._kinds = kinds
        self._rows = rows
        self._frame = frame

    @classmethod
    def of_columns(cls, columns: Mapping[str, Values], kinds: Mapping[str, str],
                   rows: int) -> Table:
        """Columns of `rows` values, each of a DuckDB type (BOOLEAN, BIGINT, DOUBLE, VARCHAR
        without NULL, DATE, TIMESTAMP), held as the Python values a frame of them gives."""
        held = {name: (np.asarray(values, dtype=_NUMPY[kinds[name]]).tolist()
                       if kinds[name] in _NUMPY else list(values))
                for name, values in columns.items()}
        return cls(held, dict(kinds), rows, None)

    @classmethod
    def of_stored(cls, rows: list[list], columns: list[str], numbers: bool = False) -> Table:
        """Rows as an answer's JSON stores them, as the frame pandas builds of them holds them:
        built without pandas when each column's values are all booleans, all integers, numbers
        of which some are floats or missing, or all text (the BOOLEAN, BIGINT, DOUBLE and
        VARCHAR a frame infers), else through pandas. `numbers`: every cell read as a float."""
        values = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
        kinds = {name: ("DOUBLE" if all(v is None or _number(v) for v in column) else None)
                 if numbers else _stored_kind(column) for name, column in values.items()}
        if rows and all(kind is not None for kind in kinds.values()):
            return cls.of_columns(values, kinds, len(rows))  # type: ignore[arg-type]
        import pandas as pd  # other columns: their types are read as pandas reads them

        return cls.of_frame(pd.DataFrame(rows, columns=columns, dtype=float if numbers else None))

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> Table:
        """A frame as it is (its values read through pandas)."""
        return cls(None, None, len(frame), frame)

    @property
    def columns(self) -> list[str]:
        if self._columns is not None:
            return list(self._columns)
        return list(self.frame().columns)

    @property
    def kinds(self) -> dict[str, str] | None:
        """Each column's DuckDB type, for a table built from columns (None for a frame)."""
        return None if self._kinds is None else dict(self._kinds)

    def __len__(self) -> int:
        return self._rows

    def rows(self) -> list[list]:
        """Rows as lists of the values iterating the frame's columns gives (Python scalars
        from numpy columns, an extension column's own values)."""
        if self._columns is None:
            return value_rows(self.frame())
        return [list(row) for row in zip(*self._columns.values(), strict=True)] \
            if self._columns else [[] for _ in range(self._rows)]

    def object_rows(self) -> list[list]:
        """Rows as `DataFrame.to_numpy(dtype=object)` gives them (the stored JSON's rows)."""
        if self._columns is None:
            return self.frame().to_numpy(dtype=object).tolist()
        return self.rows()

    def floats(self) -> list[list[float]]:
        """Rows as floats (NaN for a missing value), as `to_numpy(dtype=float)` gives them."""
        if self._columns is None:
            return self.frame().to_numpy(dtype=float).tolist()
        return [[math.nan if v is None else float(v) for v in row] for row in self.rows()]

    def frame(self) -> pd.DataFrame:
        """The answer as a DataFrame (pandas imported here, on first use)."""
        if self._frame is None:
            import pandas as pd

            assert self._columns is not None and self._kinds is not None
            dtypes = frame_dtypes()
            self._frame = pd.DataFrame(
                {name: pd.Series(values, dtype=dtypes[self._kinds[name]])
                 for name, values in self._columns.items()}, index=range(self._rows))
        return self._frame


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _stored_kind(column: list) -> str | None:
    """The DuckDB type whose column holds what pandas infers from these JSON values, or None
    when it infers something else (all missing, text with a missing value, mixed kinds)."""
    if all(type(v) is bool for v in column):
        return "BOOLEAN"
    if all(type(v) is int and _INT64[0] <= v <= _INT64[1] for v in column):
        return "BIGINT"
    if all(v is None or _number(v) for v in column) and any(v is not None for v in column) \
            and all(type(v) is not int or abs(v) <= 2 ** 53 for v in column):
        return "DOUBLE"
    if all(type(v) is str for v in column):
        return "VARCHAR"
    return None


def value_rows(frame: pd.DataFrame) -> list[list]:
    """A frame's rows as lists of the values iterating its columns gives (Python scalars from
    numpy columns, an extension column's own values): one conversion when every column is a
    numpy number, bool or object column, since pandas' row tuples cost a millisecond a call."""
    if all(isinstance(kind, np.dtype) and kind.kind in "biufcO" for kind in frame.dtypes):
        return frame.to_numpy(dtype=object).tolist()
    return [list(row) for row in frame.itertuples(index=False, name=None)]


@functools.cache
def frame_dtypes() -> dict[str, Any]:
    """The pandas dtype DuckDB's `fetchdf` gives each column type here (it depends on the
    pandas version: text is `object` in pandas 2 and a string dtype in pandas 3); dates and
    times are Python objects."""
    import duckdb

    with duckdb.connect(":memory:") as conn:
        frame = conn.execute("SELECT true AS \"BOOLEAN\", 1::BIGINT AS \"BIGINT\", "
                             "1.5::DOUBLE AS \"DOUBLE\", 'a'::VARCHAR AS \"VARCHAR\"").fetchdf()
    return {**{name: frame[name].dtype for name in frame.columns}, "DATE": object,
            "TIMESTAMP": object}


class NoisyCells:
    """The noisy measurements of an answer by name, `rows` values each, as numpy arrays: what
    an aggregate's half-widths read (`len` and `[name]`, as of a frame) without a DataFrame."""

    def __init__(self, noisy: Mapping[str, Values], rows: int) -> None:
        self._noisy = noisy
        self._rows = rows

    @property
    def columns(self) -> list[str]:
        return list(self._noisy)

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, name: str) -> np.ndarray:
        return np.asarray(self._noisy[name])
