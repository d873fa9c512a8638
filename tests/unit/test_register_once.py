"""`pyspark_kinesis.register` registers once per session: Spark warns "replaced a previously registered
data source" for every further call, and a Declarative Pipelines project whose definitions files each
call it (one process, one session) logged it for each file."""

from __future__ import annotations

from types import SimpleNamespace

import pyspark_kinesis


class Session:
    """What `register` touches of a SparkSession: `dataSource.register`."""

    def __init__(self) -> None:
        self.registered: list[str] = []
        self.dataSource = SimpleNamespace(register=lambda source: self.registered.append(source.name()))


def test_a_second_call_with_the_same_session_registers_nothing_and_names_the_same_format():
    spark = Session()
    assert pyspark_kinesis.register(spark) == pyspark_kinesis.register(spark) == "kinesis"  # type: ignore[arg-type]
    assert spark.registered == ["kinesis"]


def test_another_session_or_another_name_is_registered():
    first, second = Session(), Session()
    pyspark_kinesis.register(first)  # type: ignore[arg-type]
    pyspark_kinesis.register(second)  # type: ignore[arg-type]
    assert pyspark_kinesis.register(first, "kinesis_two") == "kinesis_two"  # type: ignore[arg-type]
    assert first.registered == ["kinesis", "kinesis_two"] and second.registered == ["kinesis"]
