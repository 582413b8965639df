"""The SQL value types the engine reasons about, as one enum: what a policy column is declared as
and what type checking gives an expression (NULL included). A `StrEnum`, so a type reads, prints
and serialises as its name ("int", "date"), exactly as the policy and the ledger write it."""

from __future__ import annotations

import enum


class SqlType(enum.StrEnum):
    """A column's or an expression's type."""

    INT = "int"
    FLOAT = "float"
    STR = "str"
    BOOL = "bool"
    DATE = "date"
    TIMESTAMP = "timestamp"
    NULL = "null"  # only an expression's: the literal NULL, of no other type


TIME_TYPES = (SqlType.DATE, SqlType.TIMESTAMP)
NUMBER_TYPES = (SqlType.INT, SqlType.FLOAT)
