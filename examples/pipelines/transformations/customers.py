"""Customers: the change records "Kinesis Data Streams for DynamoDB" puts into a stream, as a change-log
table and (PySpark 4.2+, with a table format that supports MERGE) a table kept equal to the DynamoDB
table: SCD type 1, one row per key, the latest image; a REMOVE deletes the row.

Each record is JSON: `eventName` (INSERT, MODIFY or REMOVE), `dynamodb.Keys`, `dynamodb.NewImage`
(absent on REMOVE), `dynamodb.OldImage` and `dynamodb.ApproximateCreationDateTime`, values in
DynamoDB's typed form ({"S": "..."}, {"N": "12"}). Kinesis may hold a change twice; the auto CDC flow
orders a key's changes by their creation time, so a repeated change leaves the table as it was.

`create_auto_cdc_flow` needs a target that supports row-level operations (MERGE): Delta Lake on
Databricks or with delta-spark, Iceberg, ... Set `spark.kinesis.cdcTableFormat` (for instance "delta") to
build the `customers` table; with it empty only the change log is built (open-source Spark's own
formats, parquet among them, refuse MERGE: AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE).
"""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pyspark_kinesis

spark = SparkSession.active()
FORMAT = pyspark_kinesis.register(spark)

IMAGE = "id STRUCT<S: STRING>, name STRUCT<S: STRING>, city STRUCT<S: STRING>, visits STRUCT<N: STRING>"
CHANGE = (
    f"eventName STRING, dynamodb STRUCT<ApproximateCreationDateTime: BIGINT,"
    f" Keys: STRUCT<id: STRUCT<S: STRING>>, NewImage: STRUCT<{IMAGE}>, OldImage: STRUCT<{IMAGE}>>"
)


def conf(key: str) -> str:
    return spark.conf.get(f"spark.kinesis.{key}", "") or ""


@dp.table(comment="The change records, one row per change, in the order each key's changes came.")
def customer_changes():
    stream = conf("customerChangesStream")
    options = {
        "streamName": stream,
        "region": conf("region") or "us-east-1",
        "startingPosition": "TRIM_HORIZON",
        "metadataPath": f"{conf('metadataPath').rstrip('/')}/{stream}",
    }
    if conf("endpointUrl"):
        options["endpointUrl"] = conf("endpointUrl")
    change = F.from_json(F.col("data").cast("string"), CHANGE).alias("c")
    image = "c.dynamodb.NewImage"
    return (
        spark.readStream.format(FORMAT)
        .options(**options)
        .load()
        .select(change)
        .select(
            F.col("c.dynamodb.Keys.id.S").alias("id"),
            F.col(f"{image}.name.S").alias("name"),
            F.col(f"{image}.city.S").alias("city"),
            F.col(f"{image}.visits.N").cast("int").alias("visits"),
            F.col("c.eventName").alias("eventName"),
            F.col("c.dynamodb.ApproximateCreationDateTime").alias("changedAt"),
        )
    )


if conf("cdcTableFormat") and hasattr(dp, "create_auto_cdc_flow"):  # PySpark 4.2+
    dp.create_streaming_table(
        "customers",
        comment="The DynamoDB table's current rows (SCD type 1).",
        format=conf("cdcTableFormat"),
    )
    dp.create_auto_cdc_flow(
        target="customers",
        source="customer_changes",
        keys=["id"],
        sequence_by="changedAt",
        apply_as_deletes=F.expr("eventName = 'REMOVE'"),
        except_column_list=["eventName", "changedAt"],
        stored_as_scd_type=1,
    )
