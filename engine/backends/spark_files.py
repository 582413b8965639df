"""The files a path names for the Spark engine: a folder holding one Parquet or CSV file (or
Parquet folder) per policy table, named after it, as `--db` gives the command line what a
mapping of table names gives the Python API; and a CSV file read as Spark reads one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".tsv")
_SUFFIXES = PARQUET_SUFFIXES + CSV_SUFFIXES


def folder_tables(folder: Path, names: list[str]) -> dict[str, Path] | None:
    """Each policy table's file in `folder` (`<table>.parquet`, `.pq`, `.csv`, `.tsv`, or a
    Parquet folder `<table>/` or `<table>.parquet/`; names compared case-insensitively), or None
    when no entry is named after a table: then the folder is one table's Parquet folder."""
    found: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        name = entry.name.lower()
        suffix = next((s for s in _SUFFIXES if name.endswith(s)), "")
        if not suffix and not entry.is_dir():
            continue
        table = name.removesuffix(suffix)
        if table in names:
            found.setdefault(table, []).append(entry)
    if not found:
        return None
    twice = sorted(t for t, entries in found.items() if len(entries) > 1)
    if twice:
        entries = ", ".join(e.name for e in found[twice[0]])
        raise InputError(f"the folder {folder} holds more than one file for table {twice[0]} "
                         f"({entries}); keep one per table")
    missing = [name for name in names if name not in found]
    if missing:
        raise InputError(f"the folder {folder} holds no file for policy table(s) "
                         f"{', '.join(missing)}: it needs one per table, named after it "
                         f"({missing[0]}.parquet, {missing[0]}.csv or a Parquet folder "
                         f"{missing[0]}/), for each of {', '.join(names)}")
    return {table: entries[0] for table, entries in found.items()}


def is_csv(path: str) -> bool:
    return path.lower().endswith(CSV_SUFFIXES)


def read_csv(own: SparkSession, path: str) -> DataFrame:
    """A CSV (or tab-separated) file with a header row, its types inferred by Spark (whole
    numbers, decimals, dates, booleans, text); timestamps are read as written, without time zone
    (`timestamp_ntz`, as DuckDB reads a CSV's timestamps; the session's zone is UTC)."""
    from pyspark.sql import functions as F

    sep = "\t" if path.lower().endswith(".tsv") else ","
    data = own.read.csv(path, header=True, inferSchema=True, sep=sep)
    return data.select(*[F.col(f"`{f.name}`").cast("timestamp_ntz").alias(f.name)
                         if f.dataType.simpleString() == "timestamp" else F.col(f"`{f.name}`")
                         for f in data.schema.fields])
