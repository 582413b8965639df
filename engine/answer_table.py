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
