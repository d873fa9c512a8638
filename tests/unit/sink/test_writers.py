"""The sink's partition writer and its query-start checks (src/pyspark_kinesis/sink/writers.py), with
the stream's API replaced (`Streams`: DescribeStreamSummary's facts, ListShards) and PutRecords
recorded: the columns it refuses and why, what it learns per stream at start, each row's entry or the
reason it cannot be written, the invalid-row policy, the task's counts and the driver's summary."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from pyspark_kinesis.errors import OptionError, SinkWriteError
from pyspark_kinesis.model import ShardInfo
from pyspark_kinesis.sink import producing, writers
from pyspark_kinesis.sink.options import parse_sink_options

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
MIB = 1024 * 1024


class Streams:
    """KinesisProxy replaced: per stream name its record limit, AUTO distribution and open shards;
    the proxies made (spec name, agent, attempts) and the calls are kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, limits: dict[str, int] | None = None) -> None:
        self.limits = limits or {}
        self.auto: set[str] = set()
        self.made: list[tuple[str, str, int | None]] = []
        self.calls: list[tuple[str, Any]] = []
        self.sent: list[tuple[str, dict[str, Any]]] = []
        streams = self

        class Proxy:
            def __init__(self, spec: Any, *, agent: str, max_attempts: int | None = None) -> None:
                streams.made.append((spec.name, agent, max_attempts))
                self.spec = spec

            def write_facts(self) -> tuple[int, bool]:
                streams.calls.append(("write_facts", self.spec.name))
                return streams.limits.get(self.spec.name, MIB), self.spec.name in streams.auto

            def max_record_bytes(self) -> int:
                streams.calls.append(("max_record_bytes", self.spec.name))
                return streams.limits.get(self.spec.name, MIB)

            def list_shards(self, open_only: bool = False) -> list[ShardInfo]:
                streams.calls.append(("list_shards", open_only))
                return [ShardInfo("shardId-0", None, None, 0, 2**128 - 1, closed=False)]

        def put(settings: Any, stream: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
            self.sent += [(stream, r) for r in records]
            return [{"ShardId": "shardId-0", "SequenceNumber": str(n)} for n in range(len(records))]

        monkeypatch.setattr(writers, "KinesisProxy", Proxy)
        monkeypatch.setattr(producing, "put_records", put)
        writers._LIMITS.clear()


def options(**more: str):
    return parse_sink_options({"region": "us-east-1", **more})


def schema(**columns: Any) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])


# -- the columns -------------------------------------------------------------------------------------
@pytest.mark.parametrize("column", ["partitionKey", "explicitHashKey", "streamName"])
def test_a_key_or_stream_column_that_is_not_a_string_is_refused_naming_it(column):
    with pytest.raises(OptionError) as refused:
        writers.check_schema(schema(data=BinaryType(), **{column: IntegerType()}), options(streamName="s"))
    assert refused.value.option == column
    assert str(refused.value) == (
        f"Kinesis option '{column}': column '{column}' is int. Cast {column} to string."
    )


def test_string_key_and_stream_columns_are_taken():
    strings = {c: StringType() for c in ("partitionKey", "explicitHashKey", "streamName")}
    writers.check_schema(schema(data=BinaryType(), **strings), options())  # (no stream option: the column)


def test_without_a_stream_option_the_rows_must_name_theirs():
    with pytest.raises(OptionError) as refused:
        writers.check_schema(schema(data=BinaryType(), partitionKey=StringType()), options())
    assert refused.value.option == "streamName"
    assert str(refused.value) == (
        "Kinesis option 'streamName': missing, and the DataFrame has no streamName column. "
        'Set .option("streamName", "<stream>") or add a streamName column.'
    )
    writers.check_schema(schema(data=BinaryType()), options(streamName="s"))


# -- what the sink learns at query start --------------------------------------------------------------
def test_the_named_stream_is_asked_once_for_its_record_limit(monkeypatch):
    streams = Streams(monkeypatch, {"orders": 2 * MIB})
    config = writers.check_stream(options(streamName="orders"))
    assert config.record_limits == {"orders": 2 * MIB} and config.auto_streams == frozenset()
    assert streams.made == [("orders", "sink", 2)] and streams.calls == [("write_facts", "orders")]


def test_each_entry_of_streams_is_asked_under_its_arn_or_its_name(monkeypatch):
    streams = Streams(monkeypatch, {"orders": 3 * MIB})
    streams.auto.add("orders")
    config = writers.check_stream(options(streams=f'["clicks", "{ARN}"]'))
    assert config.record_limits == {"clicks": MIB, ARN: 3 * MIB}
    assert config.auto_streams == frozenset({ARN})
    assert sorted(name for name, _a, _m in streams.made) == ["clicks", "orders"]


def test_aggregating_into_a_stream_that_places_records_itself_is_refused(monkeypatch):
    streams = Streams(monkeypatch)
    streams.auto.update({"a", "b"})
    with pytest.raises(OptionError) as refused:
        writers.check_stream(options(streams='["b", "a", "c"]', aggregate="true"))
    assert refused.value.option == "aggregate"
    assert str(refused.value) == (
        "Kinesis option 'aggregate': cannot pack rows for a, b: its record distribution is AUTO, so the "
        "service places each record itself and an aggregate would land in shards that do not hold its rows' "
        "hash keys (KCL readers drop those rows). Set aggregate=false for streams with AUTO record "
        "distribution."
    )
    writers.check_stream(options(streams='["b", "a"]'))  # (without aggregate: taken)


def test_prepare_checks_the_columns_before_asking_the_service(monkeypatch):
    streams = Streams(monkeypatch)
    with pytest.raises(OptionError, match="'partitionKey'"):
        writers.prepare(schema(data=BinaryType(), partitionKey=IntegerType()), options(streamName="o"))
    assert streams.calls == []
    config = writers.prepare(schema(data=BinaryType()), options(streamName="o"))
    assert config.record_limits == {"o": MIB} and streams.calls == [("write_facts", "o")]


def test_a_stream_only_rows_name_is_asked_once_per_process(monkeypatch):
    streams = Streams(monkeypatch, {"late": 4 * MIB})
    config = options()
    assert writers.record_limit(config, "late") == 4 * MIB
    assert writers.record_limit(config, "late") == 4 * MIB
    assert streams.calls == [("max_record_bytes", "late")] and streams.made == [("late", "sink", None)]
    known = writers.check_stream(options(streamName="named"))
    streams.calls.clear()
    assert writers.record_limit(known, "named") == MIB and streams.calls == []  # learned at start


# -- the rows ----------------------------------------------------------------------------------------
def test_rows_become_records_with_their_key_hash_key_and_stream(monkeypatch):
    streams = Streams(monkeypatch)
    config = writers.check_stream(options(streamName="orders"))
    batch = pa.record_batch(
        {
            "data": [b"a", "b"],
            "partitionKey": ["k1", "k2"],
            "explicitHashKey": [None, "42"],
            "streamName": [None, "other"],
        }
    )
    keyless = pa.record_batch({"data": [b"c"]})  # no key column: a random key
    frozen: list[str] = []
    monkeypatch.setattr(writers, "prepare_worker_process", lambda: frozen.append("frozen"))
    message = writers.write_partition(config, iter([batch, keyless]))
    assert frozen == ["frozen"]  # (a write task freezes what its worker keeps, as a read task does)
    sent = [
        (stream, r["Data"], r.get("PartitionKey"), r.get("ExplicitHashKey")) for stream, r in streams.sent
    ]
    assert sorted(sent[:3], key=lambda s: s[1])[:2] == [
        ("orders", b"a", "k1", None),
        ("other", b"b", "k2", "42"),
    ]
    (random,) = [s for s in sent if s[1] == b"c"]
    assert random[0] == "orders" and len(random[2]) == 32 and random[3] is None
    assert (message.records, message.bytes, message.skipped) == (3, 1 + 2 + 1 + 2 + 1 + 32, {})
    assert message.calls == 2 and message.retried == 0  # (one PutRecords per stream)
    with pytest.raises(
        SinkWriteError, match="Row 0 of partition 0 cannot be written to Kinesis: partitionKey"
    ):
        writers.write_partition(config, iter([pa.record_batch({"data": [b"d"], "partitionKey": [None]})]))


def test_a_row_that_cannot_be_written_fails_the_task_naming_it(monkeypatch):
    Streams(monkeypatch)
    config = writers.check_stream(options(streamName="orders"))
    batches = [
        pa.record_batch({"data": [b"ok"], "partitionKey": ["k"]}),
        pa.record_batch({"data": [b"x", b"y"], "partitionKey": ["k", ""]}),
    ]
    with pytest.raises(SinkWriteError) as failed:
        writers.write_partition(config, iter(batches))
    assert str(failed.value).startswith("Row 2 of partition 0 cannot be written to Kinesis: ")
    assert str(failed.value).endswith(
        ". Fix the row, or set onInvalidRecord=skip to count and skip such rows."
    )


def test_with_skip_invalid_rows_are_counted_by_reason_and_the_rest_written(monkeypatch, caplog):
    streams = Streams(monkeypatch)
    config = writers.check_stream(options(streamName="orders", onInvalidRecord="skip"))
    batch = pa.record_batch(
        {
            "data": [b"a", b"b", None, b"d", b"e"],
            "partitionKey": ["k", "", "k", "k", "k"],
            "explicitHashKey": [None, None, None, "x", "-1"],
        }
    )
    with caplog.at_level(logging.WARNING, logger=writers.__name__):
        message = writers.write_partition(config, iter([batch]))
    assert [r["Data"] for _s, r in streams.sent] == [b"a"]
    reasons = {reason.split(" (")[0] for reason in message.skipped}
    assert reasons == set(message.skipped) and sum(message.skipped.values()) == 4
    assert message.records == 1
    assert "Kinesis sink skipped 4 invalid rows in partition 0" in caplog.text


def test_a_row_without_a_stream_or_naming_one_not_configured_has_its_reason(monkeypatch):
    Streams(monkeypatch)
    free = writers.check_stream(options(streamName="orders"))
    assert writers._target(free, None) == (None, "streamName is null and no streamName option is set")
    assert writers._target(free, "arn:aws:kinesis:nowhere") == (
        "arn:aws:kinesis:nowhere",
        "streamName 'arn:aws:kinesis:nowhere' is not a Kinesis stream ARN",
    )
    assert writers._target(free, "anything") == ("anything", None)
    listed = writers.check_stream(options(streams=f'["clicks", "{ARN}"]'))
    assert writers._target(listed, "orders") == (ARN, None)  # an entry named by ARN is written by ARN
    assert writers._target(listed, "clicks") == ("clicks", None)
    assert writers._target(listed, "views") == (
        "views",
        "streamName 'views' is not one of the streams option's entries, or names several of them (give the ARN)",
    )


def test_a_record_over_a_mib_is_checked_against_the_streams_own_limit(monkeypatch):
    streams = Streams(monkeypatch, {"big": 2 * MIB})
    config = options(onInvalidRecord="skip")
    small = writers._invalid(config, "big", b"x" * 100, "k", None)
    assert small is None and streams.calls == []  # (most rows: not asked)
    assert writers._invalid(config, "big", b"x" * (MIB + 10), "k", None) is None
    assert streams.calls == [("max_record_bytes", "big")]
    too_big = writers._invalid(config, "big", b"x" * (2 * MIB), "k", None)
    assert too_big is not None and "bytes" in too_big


def test_aggregating_packs_rows_and_routes_them_by_the_open_shards(monkeypatch):
    streams = Streams(monkeypatch)
    config = writers.check_stream(options(streamName="orders", aggregate="true"))
    batch = pa.record_batch({"data": [b"a", b"b", b"c"], "partitionKey": ["k1", "k2", "k3"]})
    message = writers.write_partition(config, iter([batch]))
    assert len(streams.sent) == 1 and message.calls == 1  # three rows in one aggregated record
    assert ("list_shards", True) in streams.calls
    assert streams.sent[0][1]["Data"].startswith(b"\xf3\x89\x9a\xc2")  # the KPL's magic


# -- what the driver logs ------------------------------------------------------------------------------
def test_the_summary_adds_up_every_tasks_counts(caplog):
    done = [
        writers.KinesisCommitMessage(3, 30, 1, 0, {"a": 1}),
        writers.KinesisCommitMessage(2, 20, 2, 4, {"a": 1, "b": 2}),
        None,
    ]
    text = "5 records, 50 bytes in 3 PutRecords calls (4 record retries, 4 invalid rows skipped)"
    assert writers._summary(done) == text
    writer = writers.stream_writer(options(streamName="o"))
    with caplog.at_level(logging.INFO, logger=writers.__name__):
        writer.commit(done, 7)
        writer.abort(done, 8)
        writers.KinesisBatchWriter(options(streamName="o")).commit(done)
    assert f"Kinesis sink batch 7 wrote {text}" in caplog.text
    assert (
        f"Kinesis sink batch 8 aborted after writing {text} (at-least-once: a retry writes again)"
        in caplog.text
    )
    assert f"Kinesis sink wrote {text}" in caplog.text


def test_rows_are_grouped_into_arrow_batches_of_the_given_size():
    class Row(dict):
        def asDict(self) -> dict:
            return dict(self)

    batches = list(writers.rows_to_batches(iter(Row(data=bytes([n])) for n in range(5)), size=2))
    assert [b.num_rows for b in batches] == [2, 2, 1]
    assert [v for b in batches for v in b.column("data").to_pylist()] == [bytes([n]) for n in range(5)]
    assert list(writers.rows_to_batches(iter([]))) == []
    assert [b.num_rows for b in writers.rows_to_batches(iter(Row(data=b"x") for _ in range(1001)))] == [
        1000,
        1,
    ]
