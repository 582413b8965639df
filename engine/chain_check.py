"""Owner-side check of a declared chain's assumptions that the data can show (docs/theory.md §19).

A chain takes each row for one person at one time point inside the time column's declared
range, with the modelled column inside its public domain. `dpsql dependence check` counts the
rows breaking these; with a dependence_group column (the person) it also counts repeated
(person, time point) rows. Printed to the data owner only, like every dependence check.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from ..calibration.declared import DeclaredModel
from .backends.duckdb_schema import duckdb_identifier
from .policy import TableSpec


@dataclass(frozen=True)
class ChainCheck:
    """Rows of a chain's table that break its assumptions (computed from the data)."""

    table: str
    column: str
    time: str
    outside_times: int  # time NULL or outside first..last
    outside_values: int  # modelled column NULL or outside its public values
    repeated: int | None  # extra rows of one (person, time point); None without a person column

    @property
    def valid(self) -> bool:
        """True when every row is one person's one time point inside the declared ranges."""
        return self.outside_times == 0 and self.outside_values == 0 and not self.repeated


def check_chain(conn: duckdb.DuckDBPyConnection, model: DeclaredModel,
                table: TableSpec) -> ChainCheck:
    """Count the rows of `model`'s table that break its assumptions."""
    name, time = duckdb_identifier(model.table), duckdb_identifier(model.time or "")
    column = duckdb_identifier(model.column)
    values = ", ".join("?" for _ in model.values)
    row = conn.execute(
        f"SELECT COUNT(*) FILTER (WHERE {time} IS NULL OR {time} < ? OR {time} > ?), "
        f"COUNT(*) FILTER (WHERE {column} IS NULL OR {column} NOT IN ({values})) FROM {name}",
        [model.first, model.last, *model.values]).fetchone()
    assert row is not None  # an aggregate without GROUP BY returns one row
    repeated = None
    if table.dependence_group is not None:
        person = duckdb_identifier(table.dependence_group)
        (extra,) = conn.execute(f"SELECT COUNT(*) - COUNT(DISTINCT ({person}, {time})) FROM "
                                f"{name}").fetchone() or (0,)
        repeated = int(extra)
    return ChainCheck(model.table, model.column, model.time or "", int(row[0]), int(row[1]),
                      repeated)
