"""Several streams in one source: different regions and accounts (kinesis-local isolates both), one
read through a role assumed at a local STS, exactly once across restarts, streams added and removed
on restart, and one throttled stream not holding back the others."""

from __future__ import annotations

import json
import time

import boto3
import orjson
import pytest
from botocore.credentials import RefreshableCredentials

from pyspark_kinesis.aws.client import session_for
from pyspark_kinesis.config.aws_settings import AwsSettings
from tests.helpers import assert_exactly_once, assert_shard_order, client, new_stream, put, read_all
from tests.integration.streaming_util import Collector, reader, run_available_now, start_running, wait_for
from tests.localsts import LocalSts
from tests.support.fault_proxy import FaultProxy

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

HOME, OTHER = "111111111111", "000000000000"  # kinesis-local: the access key id picks the account
ROLE = f"arn:aws:iam::{OTHER}:role/kinesis-reader"


def account_client(endpoint: str, account: str, region: str):
    return boto3.client(
        "kinesis",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=account,
        aws_secret_access_key="local",
    )


def two_streams_of_one_name(endpoint: str) -> tuple[str, object, object]:
    """A stream in account HOME / us-east-1 and one of the same name in account OTHER / eu-west-1."""
    home, other = account_client(endpoint, HOME, "us-east-1"), account_client(endpoint, OTHER, "eu-west-1")
    name = new_stream(home, shards=2, prefix="orders")
    other.create_stream(StreamName=name, ShardCount=3)
    other.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 50})
    return name, home, other


def options(endpoint: str, sts: str, name: str, role: bool = True) -> dict[str, str]:
    second: dict[str, str] = {"streamName": name, "region": "eu-west-1"}
    if role:
        second |= {"roleArn": ROLE, "stsEndpointUrl": sts, "externalId": "ext-4711"}
    return {
        "awsAccessKeyId": HOME,  # the source credentials: account HOME, which cannot see the second stream
        "awsSecretKey": "local",
        "streams": json.dumps([{"streamName": name}, second]),
        "startingPosition": "TRIM_HORIZON",
    }


def read(spark, endpoint: str, meta: str, opts: dict[str, str]):
    r = spark.readStream.format("kinesis").option("region", "us-east-1").option("endpointUrl", endpoint)
    for key, value in (opts | {"metadataPath": meta}).items():
        r = r.option(key, value)
    return r.load()


def test_two_regions_two_accounts_one_through_an_assumed_role(spark, kinesis_local, local_sts, tmp_path):
    endpoint = kinesis_local.endpoint
    name, home, other = two_streams_of_one_name(endpoint)
    expected = put(home, name, 0, 150, tag="home") + put(other, name, 0, 150, tag="other")
    opts = options(endpoint, local_sts.endpoint, name)
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    calls_before = local_sts.assume_role_calls()
    run_available_now(spark, read(spark, endpoint, meta, opts), cp, sink)
    assert local_sts.assume_role_calls() > calls_before, "the second stream was not read through the role"
    expected += put(home, name, 150, 100, tag="home") + put(other, name, 150, 100, tag="other")
    run_available_now(spark, read(spark, endpoint, meta, opts), cp, sink)

    assert_exactly_once(sink.rows, expected)
    assert_shard_order([r for r in sink.rows if r["streamArn"].endswith(f":{HOME}:stream/{name}")])
    arns = {bytes(r["data"]).decode().split("-")[0]: set() for r in sink.rows}
    for row in sink.rows:
        arns[bytes(row["data"]).decode().split("-")[0]].add(row["streamArn"])
        assert row["streamName"] == name  # one name; the ARN tells them apart
    assert arns == {
        "home": {f"arn:aws:kinesis:us-east-1:{HOME}:stream/{name}"},
        "other": {f"arn:aws:kinesis:eu-west-1:{OTHER}:stream/{name}"},
    }


def test_without_the_role_the_second_stream_is_out_of_reach(spark, kinesis_local, local_sts, tmp_path):
    """The control for the test above: the source credentials alone cannot see the second stream."""
    name, _home, _other = two_streams_of_one_name(kinesis_local.endpoint)
    opts = options(kinesis_local.endpoint, local_sts.endpoint, name, role=False)
    with pytest.raises(Exception, match=rf"stream '{name}' in region 'eu-west-1' .*does not exist"):
        read(spark, kinesis_local.endpoint, str(tmp_path / "m"), opts).writeStream.format("noop").option(
            "checkpointLocation", str(tmp_path / "cp")
        ).start().awaitTermination(60)


def test_a_role_that_cannot_be_assumed_fails_at_load(spark, kinesis_local, tmp_path):
    name, _home, _other = two_streams_of_one_name(kinesis_local.endpoint)
    with LocalSts(refuse=True) as refusing:
        opts = options(kinesis_local.endpoint, refusing.endpoint, name)
        with pytest.raises(Exception) as info:
            read(spark, kinesis_local.endpoint, str(tmp_path / "m"), opts)  # (`.load()`: no query starts)
    message = str(info.value)
    assert f"Cannot assume role {ROLE} to read stream '{name}' in region 'eu-west-1'" in message
    assert "InvalidClientTokenId" in message and "trust policy" in message
    assert "ext-4711" not in message  # the external id is a secret too


def test_assumed_role_credentials_are_refreshed_before_they_expire(local_sts):
    settings = AwsSettings(
        "eu-west-1",
        access_key_id=HOME,
        secret_key="local",
        role_arn=ROLE,
        sts_endpoint_url=local_sts.endpoint,
    )
    credentials = session_for(settings).get_credentials()
    assert isinstance(credentials, RefreshableCredentials) and credentials.method == "assume-role"
    first = credentials.get_frozen_credentials()
    assert first.access_key.startswith("ASIA") and first.token
    # Age the credentials (and the fetcher's cached STS answer) past botocore's refresh window, as
    # an hour of running would: the next use must assume the role again, with no action of ours.
    credentials._expiry_time = credentials._expiry_time.replace(year=2000)
    credentials._refresh_using.__self__._cache.clear()
    second = credentials.get_frozen_credentials()
    assert second.access_key != first.access_key


def test_streams_added_and_removed_on_restart(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    a, b, c = (new_stream(kin, shards=2, prefix=p) for p in ("a", "b", "c"))
    meta, cp = str(tmp_path / "meta"), str(tmp_path / "cp")
    sink = Collector()
    expected = put(kin, a, 0, 60, tag="a") + put(kin, b, 0, 60, tag="b")
    put(kin, c, 0, 40, tag="c")  # before C joins: its startingPosition (TRIM_HORIZON) still covers these
    run_available_now(
        spark,
        reader(spark, kinesalite.endpoint, f"{a},{b}", meta, startingPosition="TRIM_HORIZON"),
        cp,
        sink,
    )
    assert {r["streamName"] for r in sink.rows} == {a, b}
    put(kin, a, 60, 30, tag="a")  # A leaves the query: these must not be read
    expected += put(kin, b, 60, 30, tag="b") + [f"c-{n}" for n in range(40)] + put(kin, c, 40, 30, tag="c")
    run_available_now(
        spark,
        reader(spark, kinesalite.endpoint, f"{b},{c}", meta, startingPosition="TRIM_HORIZON"),
        cp,
        sink,
    )
    assert_exactly_once(sink.rows, expected)
    last = max((tmp_path / "cp" / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    offset = orjson.loads(last.read_text().splitlines()[-1])
    assert sorted(key.rsplit("/", 1)[1] for key in offset["streams"]) == sorted([b, c])


def test_a_throttled_stream_does_not_hold_back_the_others(spark, kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    slow, fast = new_stream(kin, shards=1, prefix="slow"), new_stream(kin, shards=2, prefix="fast")
    with FaultProxy(kinesalite.endpoint, read_faults={"throttle": 1.0}) as proxy:
        streams = [{"streamName": slow, "endpointUrl": proxy.endpoint}, {"streamName": fast}]
        df = reader(
            spark,
            kinesalite.endpoint,
            None,
            str(tmp_path / "meta"),
            streams=json.dumps(streams),
            startingPosition="TRIM_HORIZON",
            maxFetchTimeMs=1500,
        )
        sink = Collector()
        query = start_running(df, str(tmp_path / "cp"), sink, "200 milliseconds")
        try:
            expected_slow = put(kin, slow, 0, 50, tag="slow")
            expected_fast = put(kin, fast, 0, 100, tag="fast")
            wait_for(lambda: len(sink.rows) >= 100, 90, "the unthrottled stream's records", query)
            assert proxy.injected.get("throttle", 0) > 0
            assert not [r for r in sink.rows if bytes(r["data"]).startswith(b"slow")]
            proxy.read_faults = {}  # the throttling ends: the slow stream catches up
            wait_for(lambda: len(sink.rows) >= 150, 90, "the throttled stream's records", query)
            time.sleep(1.5)
        finally:
            query.stop()
    assert_exactly_once(sink.rows, expected_slow + expected_fast)


def test_the_sink_writes_two_accounts_one_through_an_assumed_role(spark, kinesis_local, local_sts, tmp_path):
    """The sink's `streams`: rows go by their streamName column (the ARN: both streams share a name) to
    account HOME with the sink's own keys and to account OTHER through the role."""
    endpoint = kinesis_local.endpoint
    name, home, other = two_streams_of_one_name(endpoint)
    home_arn = f"arn:aws:kinesis:us-east-1:{HOME}:stream/{name}"
    other_arn = f"arn:aws:kinesis:eu-west-1:{OTHER}:stream/{name}"
    streams = [
        {"streamName": home_arn},
        {
            "streamName": other_arn,
            "roleArn": ROLE,
            "stsEndpointUrl": local_sts.endpoint,
            "externalId": "ext-4711",
        },
    ]
    df = spark.range(0, 200, numPartitions=2).selectExpr(
        "concat('w-', id) AS data",
        "concat('k', id % 7) AS partitionKey",
        f"IF(id % 2 = 0, '{home_arn}', '{other_arn}') AS streamName",
    )
    calls_before = local_sts.assume_role_calls()
    (
        df.write.format("kinesis")
        .option("region", "us-east-1")
        .option("endpointUrl", endpoint)
        .option("awsAccessKeyId", HOME)
        .option("awsSecretKey", "local")
        .option("streams", json.dumps(streams))
        .mode("append")
        .save()
    )
    assert local_sts.assume_role_calls() > calls_before, "the second account was not written through the role"
    assert sorted(read_all(home, name)) == sorted(f"w-{i}".encode() for i in range(0, 200, 2))
    assert sorted(read_all(other, name)) == sorted(f"w-{i}".encode() for i in range(1, 200, 2))

    # A row naming a stream that is not an entry is refused, not written with the sink's own keys.
    stray = spark.range(1).selectExpr("'x' AS data", "'k' AS partitionKey", f"'{name}-typo' AS streamName")
    with pytest.raises(Exception, match="is not one of the streams option's entries"):
        stray.write.format("kinesis").option("region", "us-east-1").option("endpointUrl", endpoint).option(
            "awsAccessKeyId", HOME
        ).option("awsSecretKey", "local").option("streams", json.dumps(streams)).mode("append").save()
