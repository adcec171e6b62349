"""The record layout every blob holds: the columns of Spark's Kafka source, and its Parquet encoding."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

# Same names and types as Spark's Kafka source (`spark.read.format("kafka")`), so
# `spark.read.parquet(<destination>)` gives back the source's records.
KAFKA_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
    ]
)


def conform(table: pa.Table) -> pa.Table:
    """Cast a table with the Kafka-source columns to exactly KAFKA_SCHEMA (order, types)."""
    missing = [name for name in KAFKA_SCHEMA.names if name not in table.column_names]
    if missing:
        raise ValueError(f"record table lacks columns {missing}")
    table = table.select(KAFKA_SCHEMA.names)
    if table.schema.equals(KAFKA_SCHEMA, check_metadata=False):
        return table.replace_schema_metadata(None)
    return table.cast(KAFKA_SCHEMA)


def empty_records() -> pa.Table:
    return KAFKA_SCHEMA.empty_table()


def record_bytes(table: pa.Table) -> int:
    """Payload size used for flush.max-bytes and the bytes metric: Arrow buffer bytes of the rows."""
    return int(table.nbytes)


def parquet_writer(where: str | pa.NativeFile, compression: str, compression_level: int | None) -> pq.ParquetWriter:
    """A Parquet writer of KAFKA_SCHEMA rows with the blob encoding every destination file uses."""
    return pq.ParquetWriter(
        where,
        KAFKA_SCHEMA,
        compression=None if compression == "none" else compression,
        compression_level=compression_level,
        # Offsets and timestamps compress well as deltas; dictionary on binary payloads rarely pays.
        use_dictionary=["topic"],
        write_statistics=["partition", "offset", "timestamp"],  # engines skip files by these (table statistics)
    )


def encode_parquet(table: pa.Table, compression: str, compression_level: int | None) -> memoryview:
    """One whole table as the bytes of one blob file."""
    sink = pa.BufferOutputStream()
    with parquet_writer(sink, compression, compression_level) as writer:
        writer.write_table(conform(table))
    # A view over Arrow's buffer: a 100 MB file is not copied again before it is written.
    return memoryview(sink.getvalue())
