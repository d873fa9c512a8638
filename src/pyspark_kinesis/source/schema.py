"""The rows the source produces, as a Spark schema and the identical Arrow schema.

`read()` yields Arrow record batches; Spark rejects them unless their schema equals the declared one
exactly, so both are defined side by side here. `streamArn` tells apart streams of one name in
different regions or accounts when a source reads several.
"""

from __future__ import annotations

import pyarrow as pa

# The Kinesis columns, in the rows' order (`kinesisColumns` keeps some of them, in this order).
KINESIS_COLUMNS = (
    "data",
    "streamName",
    "shardId",
    "partitionKey",
    "sequenceNumber",
    "subSequenceNumber",
    "approximateArrivalTimestamp",
    "streamArn",
)

SPARK_SCHEMA = (
    "data BINARY, streamName STRING, shardId STRING, partitionKey STRING, sequenceNumber STRING, "
    "subSequenceNumber BIGINT, approximateArrivalTimestamp TIMESTAMP, streamArn STRING"
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("data", pa.binary()),
        pa.field("streamName", pa.string()),
        pa.field("shardId", pa.string()),
        pa.field("partitionKey", pa.string()),
        pa.field("sequenceNumber", pa.string()),
        pa.field("subSequenceNumber", pa.int64()),
        pa.field("approximateArrivalTimestamp", pa.timestamp("us", tz="UTC")),
        pa.field("streamArn", pa.string()),
    ]
)
