"""Orders: a streaming table read from Kinesis, a typed one from Glue Schema Registry records, and a
flow that writes the large orders to another Kinesis stream through a pipeline sink.

`spark-pipelines run` runs every flow once through what the streams hold and stops; the next run
continues where this one committed (each streaming table's checkpoint lives under the pipeline's
`storage`, the source's batch-end records under `spark.kinesis.metadataPath`).
"""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pyspark_kinesis


def _tolerate_observed_metrics() -> None:
    """Works around a PySpark bug (4.1 to 4.3): after a run that completed, `spark-pipelines run` failed
    with `[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__...)` and exit code 1.
    A Python data source's workers send accumulator updates back, the Connect server forwards them as
    observed metrics, and the client's `execute_command_as_iterator` (which runs the pipeline) takes
    that response for an unknown one, though the client has already applied it. This keeps the
    client's method but lets those responses through; it changes nothing else, and nothing where a
    PySpark without the methods it relies on runs."""
    try:
        from pyspark.errors import PySparkValueError
        from pyspark.sql.connect.client.core import PlanObservedMetrics, SparkConnectClient
    except ImportError:  # (not over Spark Connect: nothing to mend)
        return
    original = SparkConnectClient.execute_command_as_iterator
    if getattr(original, "tolerates_observed_metrics", False) or not hasattr(
        SparkConnectClient, "_execute_and_fetch_as_iterator"
    ):
        return

    def execute_command_as_iterator(self, command, observations=None):
        request = self._execute_plan_request_with_metadata()
        self._set_command_in_plan(request.plan, command)
        for response in self._execute_and_fetch_as_iterator(request, observations or {}):
            if isinstance(response, dict):
                yield response
            elif not isinstance(response, PlanObservedMetrics):  # (PySpark's own error for the rest)
                raise PySparkValueError(
                    errorClass="UNKNOWN_RESPONSE", messageParameters={"response": str(response)}
                )

    execute_command_as_iterator.tolerates_observed_metrics = True
    SparkConnectClient.execute_command_as_iterator = execute_command_as_iterator


_tolerate_observed_metrics()
spark = SparkSession.active()
# Over Spark Connect (which spark-pipelines uses) this registers the source in the server's session.
# It returns the name to use: "kinesis", or "pyspark_kinesis" where a platform's own source already
# has "kinesis" (Databricks Runtime). "pyspark_kinesis" also works with no register() call at all,
# wherever the package is installed in the Python the Spark driver runs.
FORMAT = pyspark_kinesis.register(spark)


def conf(key: str) -> str:
    return spark.conf.get(f"spark.kinesis.{key}", "") or ""


def connection(stream: str) -> dict[str, str]:
    """The options every read and write here shares: where the stream is."""
    options = {"streamName": conf(stream), "region": conf("region") or "us-east-1"}
    if conf("endpointUrl"):
        options["endpointUrl"] = conf("endpointUrl")
    return options


def kinesis_stream(stream: str, **options: str):
    """A streaming read of one stream from its oldest record, with its own batch-end records."""
    metadata = f"{conf('metadataPath').rstrip('/')}/{conf(stream)}"
    return (
        spark.readStream.format(FORMAT)
        .options(**connection(stream), startingPosition="TRIM_HORIZON", metadataPath=metadata)
        .options(**options)
        .load()
    )


ORDER = "order_id STRING, customer STRING, amount DOUBLE"


@dp.table(comment="Order events from Kinesis, one row per record, with where each came from.")
def orders():
    return (
        kinesis_stream("ordersStream")
        .select(
            F.from_json(F.col("data").cast("string"), ORDER).alias("order"),
            "shardId",
            "sequenceNumber",
            "approximateArrivalTimestamp",
        )
        .select("order.*", "shardId", "sequenceNumber", "approximateArrivalTimestamp")
    )


dp.create_sink("large_orders_stream", format=FORMAT, options=connection("largeOrdersStream"))


@dp.append_flow(target="large_orders_stream")
def large_orders():
    """Orders of 100 or more, as JSON records keyed by customer (one customer's orders stay in order)."""
    return (
        spark.readStream.table("orders")
        .where("amount >= 100")
        .select(
            F.to_json(F.struct("order_id", "customer", "amount")).alias("data"),
            F.col("customer").alias("partitionKey"),
        )
    )


if conf("glueRegistry"):
    glue = {"schemaRegistryEndpointUrl": conf("glueEndpointUrl")} if conf("glueEndpointUrl") else {}

    @dp.table(comment="Glue Schema Registry (Avro) orders, the schema's fields as columns.")
    def typed_orders():
        return kinesis_stream(
            "typedOrdersStream",
            valueFormat="glue",
            schemaRegistryName=conf("glueRegistry"),
            schemaName=conf("glueSchema"),
            valueColumns="flatten",  # the record's fields as top-level columns
            onDecodeError="column",  # an undecodable record is kept, with the reason in valueError
            **glue,
        ).drop("streamArn")
