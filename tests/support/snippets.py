"""The Python code blocks of README.md and docs/*.md, and what the suite does with each: run it (after
the setup it needs, with paths and the endpoint made local) or leave it out for a stated reason.

A block is known by its file and its first line. A block this module does not know fails the suite
(`test_doc_snippets.py`): a new snippet gets a setup here or a reason it cannot run on this machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Snippet:
    file: str  # relative to the repository
    line: int  # of the fence
    code: str

    @property
    def key(self) -> tuple[str, str]:
        """The file and the block's first line of more than a bracket."""
        return self.file, next(line.strip() for line in self.code.splitlines() if len(line.strip()) > 3)


def snippets() -> list[Snippet]:
    out = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            out.append(Snippet(str(path.relative_to(ROOT)), line, match.group(1)))
    return out


# What a block needs defined first (`spark`, `fmt`, `json` and `pyspark_kinesis` always are); the
# streams "orders" (3 shards), "orders-out" and "payments" exist on the local server.
STREAMING_DF = (
    "df = spark.readStream.format('rate').option('rowsPerSecond', 5).load()"
    ".selectExpr('CAST(value AS STRING) AS customer', 'value AS amount', 'CAST(value AS STRING) AS data',"
    " 'CAST(value AS STRING) AS partitionKey')\n"
)
STATIC_DF = (
    "df = spark.createDataFrame([('a', 'k1', 'orders'), ('b', 'k2', 'orders')], "
    "'data string, partitionKey string, target string')\n"
)
SOURCE_DF = (
    "source_df = spark.readStream.format('rate').option('rowsPerSecond', 5).load()"
    ".selectExpr('CAST(value AS STRING) AS payload', 'CAST(value AS STRING) AS partitionKey')\n"
)
SETUPS: dict[tuple[str, str], str] = {
    ("README.md", "import pyspark_kinesis"): "",
    ("docs/reading.md", "start = {"): "",
    ("docs/reading.md", "backfill = ("): "",
    ("docs/reading.md", "changes = ("): "",
    ("README.md", 'df.selectExpr("to_json(struct(*)) AS data", "customer AS partitionKey")'): STREAMING_DF,
    ("docs/assignment.md", "from pyspark_kinesis import assign"): "kinesis = local_client\n",
    ("docs/operations.md", "from pyspark_kinesis import metrics"): "query = started_query()\n",
    ("docs/sink.md", 'df.selectExpr("to_json(struct(*)) AS data", "customer AS partitionKey")'): STREAMING_DF,
    ("docs/sink.md", 'batch_df.selectExpr("data", "partitionKey")'): STATIC_DF.replace("df =", "batch_df ="),
    ("docs/sink.md", "from pyspark.sql import functions as F"): SOURCE_DF,
    # (S3 is a local moto server with the bucket made: AWS_ENDPOINT_URL_S3, doc_snippets_app.py)
    ("docs/deploy.md", "query = ("): "",
    # (its elided "4960..." are real sequence numbers of the shards it names: doc_snippets_app.localized)
    (
        "docs/reading.md",
        'until = {"orders": {"shardId-000000000001": "AT_SEQUENCE_NUMBER:4960...",   # n not included',
    ): "",
    # (CloudWatch is moto's server; node_exporter's folder one under the work folder)
    ("docs/operations.md", "from pyspark_kinesis.metrics import LagListener"): (
        "os.makedirs(work + '/node_exporter', exist_ok=True)\n"
    ),
}
# (the Glue Schema Registry is moto's server too: AWS_ENDPOINT_URL_GLUE, doc_snippets_app.py)
SETUPS[("docs/reading.md", "orders = (")] = (
    "import boto3\n"
    "_glue = boto3.client('glue')\n"
    "_glue.create_registry(RegistryName='shop')\n"
    "_glue.create_schema(RegistryId={'RegistryName': 'shop'}, SchemaName='orders', DataFormat='AVRO', "
    "Compatibility='BACKWARD', SchemaDefinition=json.dumps({'type': 'record', 'name': 'Order', 'fields': "
    "[{'name': 'id', 'type': 'long'}, {'name': 'amount', 'type': 'double'}]}))\n"
)
SETUPS[
    (
        "docs/sink.md",
        'df.selectExpr("struct(id, amount, currency) AS value", "cast(id AS string) AS partitionKey")',
    )
] = (
    "import boto3\n"
    "df = spark.createDataFrame([(1, 9.5, 'EUR'), (2, 3.0, 'USD')], 'id long, amount double, currency string')\n"
    "boto3.client('glue').create_registry(RegistryName='payments-registry')\n"
    "with open(work + '/payment.avsc', 'w') as _schema:\n"
    "    _schema.write(json.dumps({'type': 'record', 'name': 'Payment', 'fields': [{'name': 'id', 'type': "
    "'long'}, {'name': 'amount', 'type': 'double'}, {'name': 'currency', 'type': 'string'}]}))\n"
)
# Other accounts' streams, read and written through an assumed role: the local server keeps one account
# per access key id and moto's STS hands out keys of the default one, so the docs' account numbers are
# made that one (doc_snippets_app.localized); "orders" exists in eu-west-1 too.
SETUPS[("docs/reading.md", "streams = [")] = ""
SETUPS[("docs/sink.md", "streams = [")] = (
    "df = spark.createDataFrame([('a', 'k1', 'arn:aws:kinesis:us-east-1:000000000000:stream/orders'), "
    "('b', 'k2', 'arn:aws:kinesis:eu-west-1:000000000000:stream/orders')], "
    "'data string, partitionKey string, target string')\n"
)
# A table's stream: the table is made in moto's DynamoDB (AWS_ENDPOINT_URL_DYNAMODB, doc_snippets_app.py).
SETUPS[("docs/dynamodb.md", "changes = (")] = (
    "import boto3\n"
    "boto3.client('dynamodb').create_table(TableName='orders', "
    "KeySchema=[{'AttributeName': 'id', 'KeyType': 'HASH'}], "
    "AttributeDefinitions=[{'AttributeName': 'id', 'AttributeType': 'S'}], BillingMode='PAY_PER_REQUEST', "
    "StreamSpecification={'StreamEnabled': True, 'StreamViewType': 'NEW_AND_OLD_IMAGES'})\n"
)
# Blocks that cannot run here, and why (and what does test that path): none now.
LEFT_OUT: dict[tuple[str, str], str] = {}
