"""The Spark schema of a history row, built from storage.history's field list,
so the job and the writer cannot disagree (docs/history.md)."""

from __future__ import annotations

from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from shoal.storage.history import EVENTS, EVENTS_V1, FIELDS, SCHEMA_VERSION, SUPPORTED_VERSIONS

CORRUPT = "_corrupt_record"
_TYPES: dict[str, DataType] = {
    "int": IntegerType(),
    "long": LongType(),
    "string": StringType(),
    "map": MapType(StringType(), StringType()),
}


def history_schema(with_corrupt: bool = True) -> StructType:
    """The row schema; `with_corrupt` adds the column where Spark's JSON
    reader puts lines it cannot parse (they are counted, then dropped)."""
    fields = [StructField(name, _TYPES[kind], True) for name, kind in FIELDS]
    if with_corrupt:
        fields.append(StructField(CORRUPT, StringType(), True))
    return StructType(fields)


__all__ = [
    "CORRUPT",
    "EVENTS",
    "EVENTS_V1",
    "SCHEMA_VERSION",
    "SUPPORTED_VERSIONS",
    "history_schema",
]
