"""The Kinesis sink against real local servers: batch and streaming writes, partial failures
injected by a proxy, per-key order with preserveOrder, bad rows, and a sink -> source round trip.
What landed in Kinesis is read back with plain boto3, not through this project's source."""

from __future__ import annotations

import base64

import pytest

from pyspark_kinesis.errors import SinkWriteError
from pyspark_kinesis.sink.options import parse_sink_options
from pyspark_kinesis.sink.producing import Entry, Producer
from tests.helpers import assert_exactly_once, assert_key_order, client, new_stream
from tests.integration.streaming_util import Collector, reader, run_available_now, wait_for
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]


def read_back(endpoint: str, stream: str, region: str = "us-east-1") -> list[dict]:
    """What landed in Kinesis, read with plain boto3 (not through this project's source): every record of
    every shard, shard by shard in sequence order, as dicts with data, partitionKey, shardId, sequenceNumber."""
    kin = client(endpoint, region)
    out = []
    for shard in kin.list_shards(StreamName=stream)["Shards"]:
        iterator = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _call in range(1000):  # bounded: a test stream holds a few thousand records
            response = kin.get_records(ShardIterator=iterator, Limit=10_000)
            out += [
                {
                    "data": r["Data"],
                    "partitionKey": r["PartitionKey"],
                    "shardId": shard["ShardId"],
                    "sequenceNumber": r["SequenceNumber"],
                }
                for r in response["Records"]
            ]
            iterator = response.get("NextShardIterator")
            if iterator is None or not response["Records"]:
                break
    return out


def independent_deaggregate(record: dict) -> list[tuple[str, str]]:
    """A Kinesis record as aws-kinesis-agg reads it: (partition key, payload) of each user record."""
    from aws_kinesis_agg.deaggregator import iter_deaggregate_records

    boto3_record = {
        "SequenceNumber": record["sequenceNumber"],
        "PartitionKey": record["partitionKey"],
        "ApproximateArrivalTimestamp": 0,
        "Data": record["data"],
    }
    users = iter_deaggregate_records([boto3_record], data_format="Boto3")
    return [(u["kinesis"]["partitionKey"], base64.b64decode(u["kinesis"]["data"]).decode()) for u in users]


def write(df, endpoint: str, stream: str | None, **options) -> None:
    w = (
        df.write.format("kinesis")
        .option("region", "us-east-1")
        .option("endpointUrl", endpoint)
        .mode("append")
    )
    if stream:
        w = w.option("streamName", stream)
    for key, value in options.items():
        w = w.option(key, str(value))
    w.save()


def rows(spark, count: int, keys: int = 10, start: int = 0):
    return spark.range(start, start + count, numPartitions=3).selectExpr(
        "concat('r-', id) AS data", f"concat('k', id % {keys}) AS partitionKey"
    )


def test_batch_write_reads_back_exactly(spark, any_kinesis):
    stream = new_stream(client(any_kinesis.endpoint), shards=3)
    write(rows(spark, 1200), any_kinesis.endpoint, stream)
    assert_exactly_once(read_back(any_kinesis.endpoint, stream), [f"r-{i}" for i in range(1200)])


def test_binary_data_stream_column_routing_and_random_default_keys(spark, kinesalite):
    kin = client(kinesalite.endpoint)
    first, second = new_stream(kin, shards=1), new_stream(kin, shards=1)
    df = spark.range(100).selectExpr(
        "cast(concat('r-', id) AS binary) AS data", f"IF(id % 2 = 0, '{first}', '{second}') AS streamName"
    )
    write(df, kinesalite.endpoint, None)
    got_first = read_back(kinesalite.endpoint, first)
    assert_exactly_once(got_first, [f"r-{i}" for i in range(0, 100, 2)])
    assert_exactly_once(read_back(kinesalite.endpoint, second), [f"r-{i}" for i in range(1, 100, 2)])
    assert len({r["partitionKey"] for r in got_first}) == 50  # a random key per row


def test_partial_failures_are_retried_until_every_record_is_in(spark, kinesalite):
    stream = new_stream(client(kinesalite.endpoint), shards=2)
    with FaultProxy(kinesalite.endpoint, reject_fraction=0.3, seed=1) as proxy:
        write(rows(spark, 3000), proxy.endpoint, stream)
        assert proxy.rejected > 300, "the proxy injected too few failures for this test to mean anything"
    assert_exactly_once(read_back(kinesalite.endpoint, stream), [f"r-{i}" for i in range(3000)])


def test_preserve_order_keeps_per_key_order_under_failures(spark, kinesalite):
    stream = new_stream(client(kinesalite.endpoint), shards=2)
    # 40 keys: with preserveOrder a call carries one record per key, so a handful of keys would make
    # this a test of how fast a loaded machine can make ~1,000 sequential calls, not of ordering.
    df = spark.range(2000, numPartitions=1).selectExpr(
        "concat('r-', id) AS data", "concat('k', id % 40) AS partitionKey"
    )
    with FaultProxy(kinesalite.endpoint, reject_fraction=0.4, seed=2) as proxy:
        write(df, proxy.endpoint, stream, preserveOrder="true", maxConcurrentRequests=4)
        assert proxy.rejected > 200
    got = read_back(kinesalite.endpoint, stream)
    assert_exactly_once(got, [f"r-{i}" for i in range(2000)])
    by_shard_order = sorted(got, key=lambda r: (r["shardId"], int(r["sequenceNumber"])))
    assert_key_order(by_shard_order)


def test_without_preserve_order_retries_do_reorder(kinesalite):
    """The control for the test above: the same failures without preserveOrder reorder some keys,
    so the ordered mode is what keeps order, not luck."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=1)
    with FaultProxy(kinesalite.endpoint, reject_fraction=0.4, seed=2) as proxy:
        config = parse_sink_options(
            {"streamName": stream, "region": "us-east-1", "endpointUrl": proxy.endpoint}
        )
        producer = Producer(config)
        for i in range(1000):
            producer.add(Entry(stream, f"r-{i}".encode(), f"k{i % 5}", None, i))
        producer.flush()
        producer.close()
    shard = kin.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kin.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    numbers = [
        int(r["Data"].decode().split("-")[1])
        for r in kin.get_records(ShardIterator=iterator, Limit=10000)["Records"]
    ]
    assert sorted(numbers) == list(range(1000))
    assert numbers != sorted(numbers)


def test_retry_time_exhausted_fails_the_write_with_a_clear_message(kinesalite):
    stream = new_stream(client(kinesalite.endpoint), shards=1)
    with FaultProxy(kinesalite.endpoint, reject_fraction=1.0) as proxy:
        config = parse_sink_options(
            {
                "streamName": stream,
                "region": "us-east-1",
                "endpointUrl": proxy.endpoint,
                "maxRetryTimeMs": "300",
            }
        )
        producer = Producer(config)
        producer.add(Entry(stream, b"x", "k", None, 0))
        with pytest.raises(SinkWriteError, match=r"could not be written .* within maxRetryTimeMs=300"):
            producer.flush()
        producer.close()


@pytest.mark.parametrize(
    ("data", "key", "message"),
    [
        ("IF(id = 7, NULL, 'x')", "'k'", "Row 7 of partition 0 cannot be written to Kinesis: data is null"),
        (
            "'x'",
            "IF(id = 3, '', 'k')",
            "Row 3 of partition 0 cannot be written to Kinesis: partitionKey is empty",
        ),
        (
            "'x'",
            "IF(id = 4, repeat('a', 257), 'k')",
            "Row 4 of partition 0 .* partitionKey has 257 characters",
        ),
        ("IF(id = 5, repeat('a', 1048577), 'x')", "'k'", "Row 5 of partition 0 .* record is 1048578 bytes"),
    ],
)
def test_invalid_rows_fail_naming_the_row_or_are_skipped(spark, kinesalite, data, key, message):
    stream = new_stream(client(kinesalite.endpoint), shards=1)
    df = spark.range(10, numPartitions=1).selectExpr(f"{data} AS data", f"{key} AS partitionKey")
    with pytest.raises(Exception, match=message):
        write(df, kinesalite.endpoint, stream)
    before = len(read_back(kinesalite.endpoint, stream))  # rows sent before the bad one (at-least-once)
    write(df, kinesalite.endpoint, stream, onInvalidRecord="skip")
    assert len(read_back(kinesalite.endpoint, stream)) - before == 9  # every valid row, the bad one skipped


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"streamName": "no-such-stream"}, "does not exist"),
        ({"preserveOrdr": "true"}, "Did you mean 'preserveOrder'?"),
        ({"onInvalidRecord": "ignore"}, "'onInvalidRecord': 'ignore' is not fail or skip"),
        ({"maxRecordsPerRequest": "600"}, "above the service maximum 500"),
        (
            {"streamName": "arn:aws:kinesis:eu-west-1:123456789012:stream/x"},
            "'region': 'us-east-1' disagrees",
        ),
        ({"streamName": "arn:aws:kinesis:eu-west-1:stream/x"}, "is not a Kinesis stream ARN"),
    ],
)
def test_bad_sink_options(spark, kinesalite, options, expected):
    stream = new_stream(client(kinesalite.endpoint), shards=1)
    with pytest.raises(Exception, match=expected):
        write(rows(spark, 5), kinesalite.endpoint, options.pop("streamName", stream), **options)


def test_streaming_write_and_round_trip_exactly_once_on_the_read_side(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    source, target = new_stream(kin, shards=2), new_stream(kin, shards=3)
    expected = [f"r-{i}" for i in range(800)]
    write(rows(spark, 800), kinesalite.endpoint, source)
    copy = reader(spark, kinesalite.endpoint, source, str(tmp_path / "m1"), startingPosition="TRIM_HORIZON")
    query = (
        copy.selectExpr("data", "partitionKey")
        .writeStream.format("kinesis")
        .option("streamName", target)
        .option("region", "us-east-1")
        .option("endpointUrl", kinesalite.endpoint)
        .option("checkpointLocation", str(tmp_path / "cp1"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180) and query.exception() is None
    sink = Collector()
    back = reader(spark, kinesalite.endpoint, target, str(tmp_path / "m2"), startingPosition="TRIM_HORIZON")
    run_available_now(spark, back, str(tmp_path / "cp2"), sink)
    assert_exactly_once(sink.rows, expected)


def test_streams_named_by_arn_are_written_in_the_arn_region(spark, kinesis_local):
    """An ARN in the option (no region option: the ARN's) and ARNs in the streamName column, one of
    them in another region: each row lands in its own stream. kinesis-local isolates regions."""
    east = client(kinesis_local.endpoint)
    west = client(kinesis_local.endpoint, region="eu-west-1")
    first, second = new_stream(west, shards=1), new_stream(east, shards=2)

    def arn_of(kin, name: str) -> str:
        return kin.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]

    first_arn, second_arn = arn_of(west, first), arn_of(east, second)
    assert ":eu-west-1:" in first_arn
    (
        rows(spark, 300)
        .write.format("kinesis")
        .option("streamName", first_arn)
        .option("endpointUrl", kinesis_local.endpoint)
        .mode("append")
        .save()
    )
    routed = spark.range(300, 500, numPartitions=2).selectExpr(
        "concat('r-', id) AS data",
        "concat('k', id % 7) AS partitionKey",
        f"IF(id % 2 = 0, '{first_arn}', '{second_arn}') AS streamName",
    )
    (
        routed.write.format("kinesis")
        .option("region", "us-east-1")
        .option("endpointUrl", kinesis_local.endpoint)
        .mode("append")
        .save()
    )
    in_first = read_back(kinesis_local.endpoint, first, "eu-west-1")
    assert_exactly_once(in_first, [f"r-{i}" for i in range(300)] + [f"r-{i}" for i in range(300, 500, 2)])
    assert_exactly_once(read_back(kinesis_local.endpoint, second), [f"r-{i}" for i in range(301, 500, 2)])


def test_a_non_ascii_digit_explicit_hash_key_is_a_bad_row(spark, kinesalite):
    """'²' passes str.isdigit but is no hash key: a bad row named as such, never a raw ValueError."""
    stream = new_stream(client(kinesalite.endpoint), shards=1)
    df = spark.range(10, numPartitions=1).selectExpr(
        "'x' AS data", "'k' AS partitionKey", "IF(id = 6, '²', '5') AS explicitHashKey"
    )
    with pytest.raises(Exception, match=r"Row 6 of partition 0 .* explicitHashKey is not a decimal number"):
        write(df, kinesalite.endpoint, stream)
    before = len(read_back(kinesalite.endpoint, stream))
    write(df, kinesalite.endpoint, stream, onInvalidRecord="skip")
    assert len(read_back(kinesalite.endpoint, stream)) - before == 9


def test_aggregated_writes_read_back_exactly_once_across_restarts_with_limits_inside_aggregates(
    spark, kinesis_local, tmp_path
):
    """aggregate=true (with preserveOrder) packs 1,500 rows into far fewer Kinesis records (20 rows and
    more each); the source reads them back with batches of 24 rows over three shards (8 per shard: every
    batch ends inside an aggregate) over three query runs, exactly once and in per-key order, with each
    row's own partition key."""
    kin = client(kinesis_local.endpoint)
    stream = new_stream(kin, shards=3)
    expected = [f"r-{i}" for i in range(1500)]
    write(rows(spark, 1500, keys=40), kinesis_local.endpoint, stream, aggregate="true", preserveOrder="true")
    raw = read_back(kinesis_local.endpoint, stream)
    assert len(raw) < 1500 // 20, f"{len(raw)} Kinesis records for 1,500 rows: not aggregated"
    # What landed, decoded by an independent reader (aws-kinesis-agg, KPL's own format library), not
    # this project's: every row once, with its own partition key, per key in order within a task.
    decoded = [user for record in raw for user in independent_deaggregate(record)]
    assert sorted(data for _key, data in decoded) == sorted(expected)
    assert all(key == f"k{int(data[2:]) % 40}" for key, data in decoded)

    sink = Collector()
    for run in range(3):
        df = reader(
            spark,
            kinesis_local.endpoint,
            stream,
            str(tmp_path / "meta"),
            startingPosition="TRIM_HORIZON",
            maxRecordsPerBatch=24,
        )
        query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "chk"))
        if run < 2:  # stopped after a few batches: the next run goes on from inside an aggregate
            query = query.trigger(processingTime="100 milliseconds").start()
            wait_for(lambda n=run: len(sink.batches) >= 4 * (n + 1), 120, "a few batches", query)
            query.stop()
        else:
            query = query.trigger(availableNow=True).start()
            assert query.awaitTermination(300) and query.exception() is None
    assert_exactly_once(sink.rows, expected)
    assert max(r["subSequenceNumber"] for r in sink.rows) >= 19  # rows came out of aggregates
    # Batches (and runs) ended inside aggregates: a shard's next batch went on within the aggregate its
    # last batch had cut.
    last_of: dict[str, tuple[int, str]] = {}
    inside = 0
    for batch, rows_ in sorted(sink.batches, key=lambda b: b[0]):
        for row in rows_:
            before = last_of.get(row["shardId"])
            inside += before is not None and before[0] != batch and before[1] == row["sequenceNumber"]
            last_of[row["shardId"]] = (batch, row["sequenceNumber"])
    assert inside >= 3, f"{inside} batch ends fell inside an aggregate"
    assert {r["partitionKey"] for r in sink.rows} == {f"k{n}" for n in range(40)}
    # Per key, rows written by one task arrive in the order they were written (tasks run side by side,
    # so only rows of one input partition, ids in one block of 500, are ordered among themselves).
    last: dict[tuple[str, int], int] = {}
    for row in sink.rows:
        number = int(bytes(row["data"]).decode()[2:])
        slot = (row["partitionKey"], number // 500)
        assert number > last.get(slot, -1), f"{slot}: {number} arrived after {last[slot]}"
        last[slot] = number


def test_records_up_to_the_streams_own_limit_round_trip(spark, kinesis_local, tmp_path):
    """A stream raised to 10 MiB records takes a 3 MiB row from the sink (over the default 1 MiB, so
    the sink asks the stream's own limit) and gives it back through the source; a stream at the
    default 1 MiB refuses a 2 MiB row naming its limit. (9 MiB rows took kinesis-local up to a minute
    more, for nothing a 3 MiB row does not show.)"""
    kin = client(kinesis_local.endpoint)
    big, small = new_stream(kin, shards=1), new_stream(kin, shards=1)
    arn = kin.describe_stream_summary(StreamName=big)["StreamDescriptionSummary"]["StreamARN"]
    kin.update_max_record_size(StreamARN=arn, MaxRecordSizeInKiB=10240)
    wait_for(
        lambda: (
            kin.describe_stream_summary(StreamName=big)["StreamDescriptionSummary"].get("MaxRecordSizeInKiB")
            == 10240
        ),
        30,
        "the stream's new record size",
    )
    huge = "h" * (3 * 1024 * 1024)
    df = spark.createDataFrame([(huge, "k1"), ("small", "k1")], "data string, partitionKey string")
    write(df, kinesis_local.endpoint, big)
    sink = Collector()
    back = reader(spark, kinesis_local.endpoint, big, str(tmp_path / "m"), startingPosition="TRIM_HORIZON")
    run_available_now(spark, back, str(tmp_path / "c"), sink)
    got = sorted((bytes(r["data"]) for r in sink.rows), key=len)  # two tasks: either may write first
    assert [len(g) for g in got] == [len("small"), len(huge)] and got[1] == huge.encode()

    two_mib = spark.createDataFrame([("x" * (2 * 1024 * 1024), "k")], "data string, partitionKey string")
    with pytest.raises(Exception, match=r"the stream takes at most 1048576"):
        write(two_mib, kinesis_local.endpoint, small)
