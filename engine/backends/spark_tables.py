"""The data's tables on Spark: each source as a DataFrame of the backend's session, checked against
the policy (private, public and parent tables) and read as the declared types, as on DuckDB.

A public table whose rows the policy names in a `data:` file is read by DuckDB with the declared
types (exactly as the DuckDB engine loads it) and handed to Spark as Arrow; its key must be
unique, checked on Spark when the data is opened, with the DuckDB engine's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, PolicyError
from ..policy import ColumnSpec, Policy, PublicTableSpec, TableSpec
from ..sql_types import NUMBER_TYPES, SqlType
from .spark_files import folder_tables, is_csv, read_csv

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A source is a DataFrame, a Parquet or CSV file or a Parquet folder (a Path, or a str ending in
# .parquet or .csv or naming an existing path), or the name of a catalog table; a folder holding
# a file named after each table stands for the mapping of their names to them (spark_files.py).
Source = Any

# Spark type name -> (policy families it can hold, the DuckDB type the gate binds it as).
TYPES: dict[str, tuple[frozenset[SqlType], str]] = {
    "tinyint": (frozenset(NUMBER_TYPES), "TINYINT"),
    "smallint": (frozenset(NUMBER_TYPES), "SMALLINT"),
    "int": (frozenset(NUMBER_TYPES), "INTEGER"),
    "bigint": (frozenset(NUMBER_TYPES), "BIGINT"),
    "float": (frozenset({SqlType.FLOAT}), "FLOAT"),
    "double": (frozenset({SqlType.FLOAT}), "DOUBLE"),
    "decimal": (frozenset({SqlType.FLOAT}), "DECIMAL"),
    "string": (frozenset({SqlType.STR}), "VARCHAR"),
    "boolean": (frozenset({SqlType.BOOL}), "BOOLEAN"),
    "date": (frozenset({SqlType.DATE}), "DATE"),
    "timestamp_ntz": (frozenset({SqlType.TIMESTAMP}), "TIMESTAMP"),
    "timestamp": (frozenset(), "TIMESTAMP"),
    "binary": (frozenset(), "BLOB"),
}
# The Spark type each policy type is read as, whatever the source stores (as on DuckDB,
# engine/backends/duckdb_schema.py DECLARED_TYPES), so a verdict follows the policy, not the file.
_DECLARED = {SqlType.INT: "bigint", SqlType.FLOAT: "double", SqlType.STR: "string",
             SqlType.BOOL: "boolean", SqlType.DATE: "date", SqlType.TIMESTAMP: "timestamp_ntz"}


def needed(policy: Policy) -> list[str]:
    """The tables the Spark engine needs a source for: private, parent, and public ones whose
    rows are not in a `data:` file of their own."""
    return sorted({*policy.tables, *policy.parent_tables,
                   *(n for n, t in policy.public_tables.items() if t.data is None)})


def sources(source: Source | Mapping[str, Source], policy: Policy) -> dict[str, Source]:
    """Each needed table's source: a mapping names them, and so does a folder holding a file
    named after each table; a single source is the only one."""
    names = needed(policy)
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        found = folder_tables(Path(source), names)
        if found is not None:
            return dict(found)
    if isinstance(source, Mapping):
        missing = sorted(set(names) - {str(k).lower() for k in source})
        if missing:
            raise InputError(f"no Spark source for policy table(s) {', '.join(missing)} "
                             f"(given: {', '.join(sorted(map(str, source))) or 'none'})")
        return {str(k).lower(): v for k, v in source.items() if str(k).lower() in names}
    if len(names) == 1:
        return {names[0]: source}
    raise InputError(f"the policy has {len(names)} tables ({', '.join(names)}): give the Spark "
                     "engine a folder holding one Parquet or CSV file per table, named after it "
                     f"({names[0]}.parquet, ...), or a mapping of table name to DataFrame, "
                     "Parquet or CSV path or catalog table")


def frame(own: SparkSession, user: SparkSession, source: Source, name: str) -> DataFrame:
    """The source as a DataFrame of the backend's own session."""
    from pyspark.sql import DataFrame

    if isinstance(source, DataFrame):
        # The rows stay in the JVM: the frame's plan is adopted by the other session.
        jdf = own._jsparkSession.createDataFrame(source._jdf.rdd(), source._jdf.schema())
        return DataFrame(jdf, own)
    text = str(source)
    try:
        if is_csv(text):
            if not Path(text).is_file():
                raise InputError(f"data file not found: {text} (expected a CSV file with a header row)")
            return read_csv(own, text)
        if isinstance(source, Path) or text.lower().endswith((".parquet", ".pq")) or Path(text).exists():
            if not Path(text).exists():
                raise InputError(f"data file not found: {text} (expected a Parquet file or folder)")
            return own.read.parquet(text)
        if own.catalog.tableExists(text):
            return own.table(text)
        if user.catalog.tableExists(text):
            return frame(own, user, user.table(text), name)
    except InputError:
        raise
    except Exception:
        raise InputError(f"cannot read the Spark source of table {name}: {text} (expected a "
                         "DataFrame, a Parquet or CSV file, a Parquet folder, or a catalog "
                         "table)") from None
    raise InputError(f"no Spark table or Parquet path {text!r} for policy table {name}")


def public_file(own: SparkSession, public: PublicTableSpec) -> DataFrame:
    """A public table's `data:` file read by DuckDB with the declared types, as the DuckDB
    engine loads it (the file is public: DuckDB's message about it is shown)."""
    import duckdb

    from .duckdb_schema import DECLARED_TYPES, duckdb_identifier

    where = f"tables.{public.name}.data"
    assert public.data is not None
    if not public.data.is_file():
        raise PolicyError(f"{where}: file not found: {public.data}")
    casts = ", ".join(f"CAST({duckdb_identifier(c.name)} AS {DECLARED_TYPES[c.type]}) AS "
                      f"{duckdb_identifier(c.name)}" for c in public.columns.values())
    if public.data.suffix.lower() in (".parquet", ".pq"):
        reader = "read_parquet(?)"
    else:
        types = ", ".join(f"'{c.name}': '{DECLARED_TYPES[c.type]}'" for c in public.columns.values())
        reader = f"read_csv_auto(?, types = {{{types}}})"
    try:
        with duckdb.connect() as side:
            rows = side.sql(f"SELECT * REPLACE ({casts}) FROM {reader}",
                            params=[str(public.data)]).to_arrow_table()
    except duckdb.Error as exc:
        raise PolicyError(f"{where}: cannot load {public.data}: {str(exc).splitlines()[0]}") from None
    return own.createDataFrame(rows)


def check_private(table: TableSpec, data: DataFrame) -> None:
    """A private table's unit (unless derived through its chain) and policy columns are in the
    data with types of the declared families."""
    types = spark_types(data)
    if table.privacy_unit is not None and not table.chain:  # a chain's: checked by check_chains
        if table.privacy_unit not in types:
            raise PolicyError(f"tables.{table.name}.privacy_unit: no column {table.privacy_unit!r} "
                              "in the data")
        if family(types[table.privacy_unit]) not in TYPES:
            raise PolicyError(f"tables.{table.name}.privacy_unit: the data column is "
                              f"{types[table.privacy_unit]}, not one of {', '.join(TYPES)}")
    check_columns(table.name, table.columns, data)


def check_columns(name: str, columns: Mapping[str, ColumnSpec], data: DataFrame) -> None:
    """Every declared column of table `name` is in the data with a type of its family; a
    timestamp must be Spark's TIMESTAMP_NTZ (without time zone), as DuckDB's must be TIMESTAMP."""
    types = spark_types(data)
    for col in columns.values():
        path = f"tables.{name}.columns.{col.name}"
        if col.link_only and col.name not in types:  # a chain's key: check_chains names it
            continue
        if col.name not in types:
            raise PolicyError(f"{path}: no such column in the data")
        found = family(types[col.name])
        if col.type == SqlType.TIMESTAMP and found == "timestamp":
            raise PolicyError(f"{path}.type: the data column is Spark's timestamp (with the "
                              "session's time zone); a timestamp column must be timestamp_ntz "
                              "(without time zone): EXTRACT and date_trunc of a time zone's "
                              "timestamps depend on the session, so store them as UTC "
                              "timestamp_ntz")
        if col.type not in TYPES.get(found, (frozenset(), ""))[0]:
            raise PolicyError(f"{path}.type: the policy says {col.type} but the data column is "
                              f"{types[col.name]}")


def as_declared(columns: Mapping[str, ColumnSpec], data: DataFrame) -> DataFrame:
    """`data` with each policy column cast to its declared type (a widening of its family)."""
    from pyspark.sql import functions as F

    declared = {col.name: _DECLARED[col.type] for col in columns.values() if col.type in _DECLARED}
    return data.select(*[F.col(f"`{f.name}`").cast(declared[f.name.lower()]).alias(f.name)
                         if f.name.lower() in declared else F.col(f"`{f.name}`")
                         for f in data.schema.fields])


def unique_key_refusal(public: PublicTableSpec, repeated: int) -> PolicyError | None:
    """The error opening the data raises when a public table's key repeats (`repeated` values),
    word for word the DuckDB engine's (engine/backends/duckdb_schema.py)."""
    if not repeated:
        return None
    return PolicyError(f"tables.{public.name}.key: {public.key} is not unique in the data "
                       f"({repeated} value(s) repeat); a public table's key must be unique, "
                       "so that each private row joins at most one of its rows", repeated=repeated)


def spark_types(data: DataFrame) -> dict[str, str]:
    """Lower-cased column name -> Spark type name."""
    return {field.name.lower(): field.dataType.simpleString() for field in data.schema.fields}


def family(spark_type: str) -> str:
    """A Spark type's name without its parameters: decimal(10,2) -> decimal."""
    return spark_type.split("(")[0]


def duckdb_type(spark_type: str) -> str:
    """The DuckDB type the gate binds a Spark column as (a decimal keeps its precision)."""
    kind = family(spark_type)
    if kind == "decimal":
        return spark_type.upper()
    return TYPES.get(kind, (frozenset(), "VARCHAR"))[1]
