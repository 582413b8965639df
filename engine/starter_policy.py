"""`dpsql init`: a starter policy written from a data file's schema alone.

Each table and column is listed with the policy type of its stored type; everything that must
come from public knowledge (bounds, domains, the privacy unit, the dependence model and the
budget) is left as a marked blank the owner fills in. Nothing of the data's values is written:
bounds taken from the data would themselves disclose it (a maximum is one person's value). A
DuckDB or Parquet file's types come from its catalog; a CSV's are what DuckDB's reader infers.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from .errors import InputError
from .sql_types import NUMBER_TYPES, TIME_TYPES, SqlType

# A stored DuckDB type (without parameters) -> the policy type it is read as.
_POLICY_TYPES = {
    **dict.fromkeys(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                     "UINTEGER", "UBIGINT", "UHUGEINT"), SqlType.INT),
    **dict.fromkeys(("FLOAT", "DOUBLE", "DECIMAL"), SqlType.FLOAT),
    "VARCHAR": SqlType.STR, "BOOLEAN": SqlType.BOOL, "DATE": SqlType.DATE,
    "TIMESTAMP": SqlType.TIMESTAMP,
}
_BLANK = "null  # FILL IN from public knowledge, never from the data's values"
_HEADER = """\
# A starter policy written by `dpsql init` from the schema of {source} alone: every column's
# type is the one it is stored as, and NOTHING of its values is written here. Fill in each blank marked
# FILL IN from public knowledge (a census, a form's allowed answers, the law), never from the
# data itself: a bound or a domain read from the data would disclose it (a maximum is one
# person's value). Remove the columns analysts must not read. The file does not load until the
# budget and the dependence model are filled in. See README.md, "The policy file".
budget:
  epsilon: {blank}
dependence:
  k: {blank}
  eta: {blank}
tables:
"""


def starter_policy(path: str | Path) -> str:
    """The starter policy (YAML text with comments) for the data file at `path`."""
    tables = _schema(Path(path))
    lines = [_HEADER.format(source=Path(path).name, blank=_BLANK)]
    for table, columns in tables.items():
        lines.append(f"  {_key(table)}:\n")
        lines.append("    # privacy_unit: COLUMN   # FILL IN when one individual may have several rows\n")
        lines.append("    # max_rows_per_unit: 1   # then: how many of their rows a query may read\n")
        lines.append("    columns:\n")
        for column, stored in columns:
            kind = _POLICY_TYPES.get(stored.split("(")[0].upper())
            if kind is None:
                lines.append(f"      # {_key(column)}: stored as {stored}, which no policy type "
                             "reads; left out\n")
                continue
            lines.append(f"      {_key(column)}:\n        type: {kind}\n")
            if kind in NUMBER_TYPES or kind in TIME_TYPES:
                lines.append(f"        lower: {_BLANK}\n        upper: {_BLANK}\n")
            if kind == SqlType.STR:
                lines.append(f"        domain: {_BLANK} (the public list of values, for GROUP BY)\n")
    return "".join(lines)


def _schema(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Table -> (column, stored type) of a DuckDB, CSV or Parquet file: the catalog only."""
    if not path.is_file():
        raise InputError(f"data file not found: {path} (expected a DuckDB, CSV or Parquet file)")
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".parquet", ".pq"):
            reader = "read_parquet" if suffix in (".parquet", ".pq") else "read_csv_auto"
            with duckdb.connect(":memory:") as conn:
                rows = conn.execute(f"DESCRIBE SELECT * FROM {reader}(?)", [str(path)]).fetchall()
            return {path.stem.lower(): [(str(r[0]), str(r[1])) for r in rows]}
        with duckdb.connect(str(path), read_only=True) as conn:
            rows = conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall()
    except duckdb.Error as exc:
        raise InputError(f"cannot read the schema of {path}: {str(exc).splitlines()[0]}") from None
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, stored in rows:
        tables.setdefault(str(table), []).append((str(column), str(stored)))
    if not tables:
        raise InputError(f"{path} holds no table")
    return tables


def _key(name: str) -> str:
    """A YAML mapping key for a table or column name (quoted unless plainly safe)."""
    plain = name.replace("_", "").isalnum() and not name[:1].isdigit()
    return name if plain else '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
