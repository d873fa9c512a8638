"""metadataPath on S3 (s3fs, conditional writes) against a local S3 (moto's server): first writer wins,
also when attempts race; a store without exclusive create and a filesystem that cannot be opened are
refused at start; a streaming query keeps its batch ends there, exactly once across a restart."""

from __future__ import annotations

import json
import threading
import uuid

import boto3
import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver.discovery import resolve_streams
from pyspark_kinesis.source.executor.task import read_task
from pyspark_kinesis.source.options import parse_options
from pyspark_kinesis.source.state.offsets import ShardPlan, TaskPlan
from pyspark_kinesis.source.state.store import FsspecStore, open_store
from tests.helpers import assert_exactly_once, client, new_stream, put
from tests.integration.streaming_util import Collector, reader, run_available_now

pytestmark = [pytest.mark.kinesis]


def bucket(local_s3) -> str:
    name = f"meta-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3", endpoint_url=local_s3.endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=name)
    return name


def s3_options(local_s3) -> dict:
    return {
        "endpoint_url": local_s3.endpoint,
        "key": "local",
        "secret": "local-s3-secret",
        "client_kwargs": {"region_name": "us-east-1"},
    }


def test_first_writer_wins_on_s3_even_when_attempts_race(local_s3):
    store = FsspecStore(f"s3://{bucket(local_s3)}/meta", s3_options(local_s3))
    store.check_writable()  # exclusive create proven at start
    assert store.put_if_absent("t/batch-000000000000/task-00000.json", b"first")
    assert not store.put_if_absent("t/batch-000000000000/task-00000.json", b"second")
    assert store.get("t/batch-000000000000/task-00000.json") == b"first"
    results: list[bool] = []
    start = threading.Barrier(8)

    def attempt(n: int) -> None:
        start.wait(timeout=30)
        results.append(store.put_if_absent("t/batch-000000000001/task-00000.json", f"attempt {n}".encode()))

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results) == [False] * 7 + [True]


class OverwritingFileSystem(MemoryFileSystem):
    """An S3-compatible service that ignores conditional writes: 'xb' overwrites like 'wb'."""

    protocol = "overwriting"

    def _open(self, path, mode="rb", **kwargs):
        return super()._open(path, mode.replace("x", "w"), **kwargs)


def test_a_store_without_exclusive_create_is_refused_at_start():
    fsspec.register_implementation("overwriting", OverwritingFileSystem, clobber=True)
    with pytest.raises(OptionError, match="does not refuse a second create"):
        open_store(f"overwriting://meta-{uuid.uuid4().hex}").check_writable()


def test_a_filesystem_that_cannot_be_opened_is_refused_clearly():
    with pytest.raises(OptionError, match=r"metadataPath.*cannot open 'hdfs://127\.0\.0\.1:1/meta'.*hdfs://"):
        open_store("hdfs://127.0.0.1:1/meta").check_writable()


def test_racing_task_attempts_emit_the_same_rows_with_the_record_on_s3(kinesalite, local_s3, monkeypatch):
    """Two attempts of one task read before either records its end; records arrive between their reads,
    so they read different rows. The first to record its end on S3 wins, and the other emits the
    winner's rows, not its own: only the conditional write (first writer wins) makes them agree."""
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    put(kin, stream, 0, 300)
    options = {
        "streamName": stream,
        "region": "us-east-1",
        "endpointUrl": kinesalite.endpoint,
        "metadataPath": f"s3://{bucket(local_s3)}/meta",
        "metadataStorageOptions": json.dumps(s3_options(local_s3)),
    }
    config = resolve_streams(parse_options(options, streaming=True))
    shards = [s["ShardId"] for s in kin.list_shards(StreamName=stream)["Shards"]]
    plan = TaskPlan(
        "tok",
        0,
        0,
        tuple(ShardPlan(config.streams[0].resolved_arn, s, Position.trim_horizon(), -1, -1) for s in shards),
        None,
    )
    first_read, second_recorded = threading.Event(), threading.Event()
    original = FsspecStore.put_if_absent

    def gated(self, key: str, data: bytes) -> bool:
        """Attempt "first" has read and waits before recording its end until "second" has recorded."""
        name = threading.current_thread().name
        if "/task-" in key and name == "first":
            first_read.set()
            assert second_recorded.wait(60), "the second attempt did not record its end"
        won = original(self, key, data)
        if "/task-" in key and name == "second":
            second_recorded.set()
        return won

    monkeypatch.setattr(FsspecStore, "put_if_absent", gated)
    results: dict[str, list] = {}

    def attempt() -> None:
        name = threading.current_thread().name
        results[name] = [
            (r["shardId"], r["sequenceNumber"]) for b in read_task(config, plan) for r in b.to_pylist()
        ]

    first = threading.Thread(target=attempt, name="first")
    first.start()
    assert first_read.wait(60), "the first attempt did not finish reading"
    put(kin, stream, 300, 50)  # arrive after the first attempt's read: the second reads them too
    second = threading.Thread(target=attempt, name="second")
    second.start()
    for thread in (first, second):
        thread.join(timeout=120)
    assert len(results["second"]) == 350
    assert results["first"] == results["second"]  # the first lost the race and emits the winner's rows


@pytest.mark.spark
def test_a_streaming_query_with_metadata_on_s3_resumes_exactly(spark, kinesalite, local_s3, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 120)
    meta = f"s3://{bucket(local_s3)}/meta"
    storage = json.dumps(s3_options(local_s3))
    sink = Collector()
    for more in (80, 0):
        df = reader(
            spark,
            kinesalite.endpoint,
            stream,
            meta,
            startingPosition="TRIM_HORIZON",
            metadataStorageOptions=storage,
        )
        run_available_now(spark, df, str(tmp_path / "cp"), sink)
        if more:
            expected += put(kin, stream, 1000, more)
    assert_exactly_once(sink.rows, expected)
    listed = fsspec.filesystem("s3", **s3_options(local_s3)).ls(meta.removeprefix("s3://"))
    assert listed, "no batch-end records were written to S3"
