"""The Kinesis sink: thin Spark writer adapters over `producing.Producer`.

Semantics are at-least-once: Spark may run a task twice (retry, speculation) and replays a streaming
batch after a crash, and Kinesis has no idempotent put, so a record can be written twice. Consumers
deduplicate with a record id carried in the payload (see docs/sink.md).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StringType, StructType

from .. import spark_features
from ..aws.kinesis import KinesisProxy, partition_key_optional, sink_target
from ..aws.process_tuning import prepare_worker_process
from ..config.stream_specs import arn_parts
from ..errors import OptionError, SinkWriteError, surfaced
from ..formats import ValueDoesNotFit, codec_of
from .options import SinkConfig
from .packing import Aggregator, ShardRouter
from .producing import MAX_RECORD_BYTES, Entry, Producer, invalid_reason

log = logging.getLogger(__name__)
_COLUMNS = {"data", "partitionKey", "explicitHashKey", "streamName"}


@dataclass
class KinesisCommitMessage(WriterCommitMessage):
    records: int = 0
    bytes: int = 0
    calls: int = 0
    retried: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


def check_schema(schema: StructType, config: SinkConfig) -> None:
    """Fail at query start on a DataFrame the sink cannot write, naming the column."""
    fields = {f.name: f.dataType for f in schema.fields}
    codec_of(config.value).check_columns(fields)
    for name in ("partitionKey", "explicitHashKey", "streamName"):
        if name in fields and not isinstance(fields[name], StringType):
            raise OptionError(
                name, f"column '{name}' is {fields[name].simpleString()}", f"Cast {name} to string."
            )
    if config.stream_name is None and "streamName" not in fields:
        raise OptionError(
            "streamName",
            "missing, and the DataFrame has no streamName column",
            'Set .option("streamName", "<stream>") or add a streamName column.',
        )


def check_stream(config: SinkConfig) -> SinkConfig:
    """At query start: every stream the options name exists and is reachable (roles assumed); returns
    the config with each one's record size limit."""
    named = [(t.arn if t.by_arn and t.arn else t.name, t) for t in config.targets]
    if config.stream_name and not config.targets:
        named = [(config.stream_name, sink_target(config.aws, config.stream_name))]
    facts = {key: KinesisProxy(spec, agent="sink", max_attempts=2).write_facts() for key, spec in named}
    auto = frozenset(key for key, (_limit, placed) in facts.items() if placed)
    if auto and config.aggregate:
        raise OptionError(
            "aggregate",
            f"cannot pack rows for {', '.join(sorted(auto))}: its record distribution is AUTO, so the service "
            "places each record itself and an aggregate would land in shards that do not hold its rows' hash "
            "keys (KCL readers drop those rows)",
            "Set aggregate=false for streams with AUTO record distribution.",
        )
    return replace(
        config, record_limits={key: limit for key, (limit, _p) in facts.items()}, auto_streams=auto
    )


def prepare(schema: StructType, config: SinkConfig) -> SinkConfig:
    """Everything the sink checks and learns at query start, in order: the DataFrame's columns, the
    value format's look-ups (valueFormat=glue: the schema version, the value's fields against it),
    the streams."""
    check_schema(schema, config)
    value = codec_of(config.value).for_writing(config.value, config.aws, schema)
    return check_stream(replace(config, value=value))


_LIMITS: dict[tuple[Any, str], int] = {}  # per executor process: streams named only by rows


def record_limit(config: SinkConfig, stream: str) -> int:
    """The stream's largest record: learned at query start for the streams the options name, else
    asked once per executor process (DescribeStreamSummary has a low per-account rate)."""
    known = config.record_limits.get(stream)
    if known is not None:
        return known
    settings = config.settings_for(stream)
    if (settings, stream) not in _LIMITS:
        _LIMITS[(settings, stream)] = KinesisProxy(
            sink_target(settings, stream), agent="sink"
        ).max_record_bytes()
    return _LIMITS[(settings, stream)]


def write_partition(config: SinkConfig, batches: Iterator[pa.RecordBatch]) -> KinesisCommitMessage:
    """Write one task's rows; rows are numbered from 0 in the task's input for error messages. Each
    row becomes an entry (`_RowEntries`) or the reason it cannot be written, which the invalid-row
    policy turns into an error or a count (`_refuse`)."""
    prepare_worker_process()
    partition = _partition_id()
    producer = Producer(config)
    sink: Producer | Aggregator = producer
    if config.aggregate:
        sink = Aggregator(producer, MAX_RECORD_BYTES, lambda stream, every: _router(config, stream, every))
    skipped: Counter[str] = Counter()
    try:
        for row, entry in _RowEntries(config, partition).of(batches):
            if isinstance(entry, Entry):
                sink.add(entry)
            else:
                _refuse(config, entry, row, partition, skipped)
        sink.flush()
    finally:
        producer.close()
    if skipped:
        log.warning(
            "Kinesis sink skipped %d invalid rows in partition %d: %s",
            sum(skipped.values()),
            partition,
            dict(skipped),
        )
    stats = producer.stats
    return KinesisCommitMessage(stats.records, stats.bytes, stats.calls, stats.retried, dict(skipped))


def _partition_id() -> int:
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return context.partitionId() if context else 0
    except ImportError:  # pragma: no cover
        return 0


def _refuse(config: SinkConfig, reason: str, row: int, partition: int, skipped: Counter[str]) -> None:
    """The invalid-row policy: fail the task naming the row, or count the row under its reason."""
    if not config.skip_invalid:
        raise SinkWriteError(
            f"Row {row} of partition {partition} cannot be written to Kinesis: {reason}. Fix the "
            "row, or set onInvalidRecord=skip to count and skip such rows."
        )
    skipped[reason.split(" (")[0]] += 1


@dataclass(frozen=True)
class _Columns:
    """One Arrow batch's sink columns as Python lists (None: the input has no such column)."""

    data: list[Any]
    keys: list[Any] | None
    hashes: list[Any] | None
    streams: list[Any] | None

    @classmethod
    def of(cls, batch: pa.RecordBatch, value_column: str) -> _Columns:
        names = batch.schema.names

        def column(name: str) -> list[Any] | None:
            return batch.column(names.index(name)).to_pylist() if name in names else None

        data = column(value_column)
        assert data is not None  # (`check_schema` made sure of it at query start)
        return cls(data, column("partitionKey"), column("explicitHashKey"), column("streamName"))


class _RowEntries:
    """A task's rows as entries to put: the payload encoded, the stream resolved, the key filled in
    where the row has none, and the service's limits checked; a row that breaks one gives its reason."""

    def __init__(self, config: SinkConfig, partition: int) -> None:
        self.config, self.partition = config, partition
        codec = codec_of(config.value)
        self.encoder, self.column = codec.encoder(config.value), codec.payload_column

    def of(self, batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Entry | str]]:
        row = 0
        for batch in batches:
            cols = _Columns.of(batch, self.column)
            for i in range(batch.num_rows):
                yield row, self._entry(cols, i, row)
                row += 1

    def _entry(self, cols: _Columns, i: int, row: int) -> Entry | str:
        config = self.config
        payload = self._payload(cols.data[i], row)
        key = cols.keys[i] if cols.keys is not None else None
        hash_key = cols.hashes[i] if cols.hashes is not None else None
        stream = (cols.streams[i] if cols.streams is not None else None) or config.stream_name
        if key is None and (cols.keys is None or stream in config.auto_streams):
            key = _no_key(config, stream)
        stream, reason = _target(config, stream)
        if reason is None:
            reason = _invalid(config, stream, payload, key, hash_key)
        if reason is not None:
            return reason
        assert stream is not None  # (no reason: the row names its stream)
        return Entry(stream, payload, key or "", hash_key, row)

    def _payload(self, value: Any, row: int) -> Any:
        """The record's payload: the format's encoding of the value, or (a format without an encoder)
        the column's bytes, text written as UTF-8."""
        if self.encoder is None or value is None:
            return value.encode() if isinstance(value, str) else value
        try:
            return self.encoder.encode(value)
        except ValueDoesNotFit as exc:
            raise SinkWriteError(
                f"Row {row} of partition {self.partition}: its value does not fit schema version "
                f"{self.encoder.version_id} ({exc}). Fix the row's value to the schema."
            ) from None


def _target(config: SinkConfig, stream: str | None) -> tuple[str | None, str | None]:
    """The stream a row goes to, as the options name it, and why it cannot go anywhere (or None)."""
    if stream is None:
        return None, "streamName is null and no streamName option is set"
    if stream.startswith("arn:") and arn_parts(stream) is None:
        return stream, f"streamName '{stream}' is not a Kinesis stream ARN"
    if not config.targets:
        return stream, None
    resolved = config.target_of(stream)
    if resolved is None:
        return stream, (
            f"streamName '{stream}' is not one of the streams option's entries, or names several "
            "of them (give the ARN)"
        )
    return resolved, None


def _invalid(
    config: SinkConfig, stream: str | None, payload: Any, key: str | None, hash_key: Any
) -> str | None:
    """Why the service would refuse the record, or None. Over 1 MiB the stream's own limit decides
    (asked only then: most rows are small)."""
    limit = MAX_RECORD_BYTES
    if stream and payload is not None and key and len(payload) + len(key.encode()) > limit:
        limit = record_limit(config, stream)
    return invalid_reason(payload, key, hash_key, limit, keyless=stream in config.auto_streams)


def _no_key(config: SinkConfig, stream: str | None) -> str:
    """The key of a row without one: none at all on a stream with AUTO record distribution (the
    service places records there and ignores keys; where botocore allows leaving it out), else a random
    one, which spreads records evenly over the shards (no per-key order: there is no key)."""
    if stream in config.auto_streams and partition_key_optional():
        return ""
    return uuid.uuid4().hex


def _router(config: SinkConfig, stream: str, every: bool = False) -> ShardRouter:
    """The stream's open shards and their hash ranges, listed once per task and stream (and again,
    every shard, when an aggregate landed in another shard than it was packed for)."""
    target = sink_target(config.settings_for(stream), stream)
    return ShardRouter(KinesisProxy(target, agent="sink").list_shards(open_only=not every))


def _summary(messages: list[Any]) -> str:
    done = [m for m in messages if isinstance(m, KinesisCommitMessage)]
    skipped = sum(sum(m.skipped.values()) for m in done)
    return (
        f"{sum(m.records for m in done)} records, {sum(m.bytes for m in done)} bytes in {sum(m.calls for m in done)} "
        f"PutRecords calls ({sum(m.retried for m in done)} record retries, {skipped} invalid rows skipped)"
    )


class KinesisBatchWriter(DataSourceArrowWriter):
    def __init__(self, config: SinkConfig) -> None:
        self.config = config

    @surfaced
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_partition(self.config, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("Kinesis sink wrote %s", _summary(list(messages)))


ROWS_PER_BATCH = 1000  # PySpark 4.0 hands a streaming writer rows: grouped into Arrow batches this size


def rows_to_batches(rows: Iterator[Any], size: int = ROWS_PER_BATCH) -> Iterator[pa.RecordBatch]:
    """PySpark 4.0's streaming writer gets `Row`s (4.1+ gets Arrow batches): the same partition writer
    takes them as Arrow batches of `size` rows."""
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row.asDict())
        if len(chunk) >= size:
            yield pa.RecordBatch.from_pylist(chunk)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk)


class KinesisStreamWriter(DataSourceStreamWriter):
    """`df.writeStream.format("kinesis")`. On PySpark 4.1+ Spark feeds it Arrow batches (see
    `stream_writer`), on 4.0 rows."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config

    @surfaced
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_partition(self.config, rows_to_batches(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("Kinesis sink batch %d wrote %s", batchId, _summary(list(messages)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "Kinesis sink batch %d aborted after writing %s (at-least-once: a retry writes again)",
            batchId,
            _summary(list(messages)),
        )


if spark_features.ARROW_STREAM_WRITER:

    class KinesisStreamArrowWriter(KinesisStreamWriter, spark_features.DataSourceStreamArrowWriter):
        @surfaced
        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            return write_partition(self.config, iterator)


def stream_writer(config: SinkConfig) -> KinesisStreamWriter:
    """The streaming writer for the running PySpark (see `spark_features`)."""
    if spark_features.ARROW_STREAM_WRITER:
        return KinesisStreamArrowWriter(config)
    return KinesisStreamWriter(config)
