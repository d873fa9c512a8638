"""The format's name where another data source has "kinesis" (Databricks Runtime ships its own Kinesis
source): a JVM data source named "kinesis", built here with javac against PySpark's own jars, on the
classpath of a session in its own process (format_names_app.py). `register` falls back to a free name
and says so, a read, a streaming read and a write work under the name it returns, and a name asked
for explicitly that is taken is refused clearly. Without `register`, Spark registers the installed
package by itself (its `DefaultSource`) as "pyspark_kinesis", beside a JVM "kinesis" too."""

from __future__ import annotations

import pytest

import pyspark_kinesis
from tests.helpers import client, new_stream, put, read_all
from tests.support.jvm_kinesis import build_kinesis_named_jar, run_app, scenario

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


@pytest.fixture(scope="module")
def kinesis_named_jar(tmp_path_factory) -> str:
    return build_kinesis_named_jar(tmp_path_factory.mktemp("jar"))


@pytest.mark.slow  # (about a minute: its own Spark process; the default suite's Spark Connect test falls back too)
def test_beside_a_jvm_source_named_kinesis_register_falls_back_and_reads_and_writes(
    kinesalite, kinesis_named_jar, tmp_path
):
    cfg, expected = scenario(kinesalite.endpoint, tmp_path, jar=kinesis_named_jar)
    result = run_app(cfg)
    assert result["name"] == pyspark_kinesis.FALLBACK_FORMAT
    # Found by itself as "pyspark_kinesis", beside a JVM "kinesis"
    assert result["static"] == sorted(expected)
    assert "Another data source is registered as 'kinesis'" in result["log"]
    assert result["explicit"].startswith("error: NameTakenError: The format name 'kinesis' is another")
    assert result["batch"] == sorted(expected) and result["streamed"] == sorted(expected)
    written = client(kinesalite.endpoint)
    assert sorted(d.decode() for d in read_all(written, cfg["target"])) == sorted(expected)


def test_where_kinesis_is_free_register_takes_it_and_spark_found_the_package_by_itself(
    spark, kinesalite, tmp_path
):
    """In the suite's own session (no JVM "kinesis" there): `register` returns "kinesis" (again: the
    session fixture registered it first, and registering a name again replaces it), and the name Spark
    registered by itself, "pyspark_kinesis", reads the same records."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 30)
    assert pyspark_kinesis.register(spark) == "kinesis"
    assert pyspark_kinesis.register(spark, name="kinesis") == "kinesis"
    options = {"streamName": stream, "region": "us-east-1", "endpointUrl": kinesalite.endpoint}
    for fmt in ("kinesis", "pyspark_kinesis"):
        rows = spark.read.format(fmt).options(**options).load().select("data").collect()
        assert sorted(r["data"].decode() for r in rows) == sorted(expected), fmt
