"""Parsing and validating the source's options into one immutable value.

All checks happen here, on the driver, when the query starts, so that a typo fails the query at
once with a message naming the option, instead of surfacing later as a Py4J trace from a task.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from ..config.aws_settings import AWS_OPTIONS
from ..config.declared import BOOL, INT, Option, by_key, parse_declared
from ..config.option_values import fold
from ..config.start_positions import parse_source_start
from ..config.stream_specs import DYNAMODB, KINESIS, StreamSpec, parse_streams, with_ends
from ..config.table_streams import spec_of
from ..config.value_format import ValueFormat
from ..errors import OptionError
from ..formats import parse_value_format, value_options
from ..model import Position, StreamIdentity
from .dynamodb_options import for_dynamodb
from .schema import KINESIS_COLUMNS

# Every source option, declared once (see `config.declared`): docs/options.md's table is generated
# from these (`pyspark-kinesis options --markdown`) and checked against them by a test.
SOURCE_OPTIONS: tuple[Option, ...] = (
    Option(
        "streamName",
        "Stream to read: a name or ARN, or a comma-separated list of them.",
        shown="(required, or streams)",
    ),
    Option(
        "service",
        "kinesis (Kinesis data streams) | dynamodb (DynamoDB tables' streams: streamName/streams name tables or "
        "their stream ARNs, and the rows are a change's columns: tableName, eventName, keys, newImage, oldImage...).",
        default=KINESIS,
        choices=(KINESIS, DYNAMODB),
    ),
    Option(
        "streams",
        "JSON list of streams, each a name/ARN or an object overriding region, endpointUrl, role options, startingPosition.",
    ),
    Option(
        "startingPosition",
        "LATEST | TRIM_HORIZON (or EARLIEST) | AT_TIMESTAMP:<ISO-8601>, or a JSON map of stream -> shard -> "
        "position (also AT_SEQUENCE_NUMBER:<n> | AFTER_SEQUENCE_NUMBER:<n>).",
        shown="LATEST",
    ),
    Option(
        "endingPosition",
        "Batch reads only: LATEST (the time of the call) | AT_TIMESTAMP:<ISO-8601>, or a JSON map of "
        "stream -> shard -> position as startingPosition's (AT_SEQUENCE_NUMBER:<n> stops before n, "
        "AFTER_SEQUENCE_NUMBER:<n> after it).",
        shown="LATEST",
    ),
    Option(
        "metadataPath", "Durable directory or URL for batch-end records.", shown="(required for readStream)"
    ),
    Option(
        "metadataStorageOptions",
        'JSON object of options for metadataPath\'s fsspec filesystem, e.g. {"endpoint_url": ..., "profile": ...}; never logged.',
        secret=True,
    ),
    Option(
        "maxRecordsPerBatch",
        "Upper bound on records per micro-batch (Spark ReadMaxRows).",
        kind=INT,
        minimum=1,
        field="max_records_per_batch",
    ),
    Option(
        "maxBytesPerBatch",
        "Upper bound on payload bytes per micro-batch (Spark ReadMaxBytes).",
        kind=INT,
        minimum=1,
        field="max_bytes_per_batch",
    ),
    Option(
        "maxRecordsPerShard",
        "Records one shard contributes to one batch at most (memory bound).",
        default=100_000,
        kind=INT,
        minimum=1,
        field="max_records_per_shard",
    ),
    Option(
        "maxBytesPerShard",
        "Payload bytes one shard contributes to one batch at most.",
        default=64 * 1024 * 1024,
        kind=INT,
        minimum=1,
        field="max_bytes_per_shard",
    ),
    Option(
        "maxFetchTimeMs",
        "Time one shard is read in one batch at most; a task with more than 16 shards gives each a fair share.",
        default=10_000,
        kind=INT,
        minimum=1,
        field="max_fetch_time_ms",
    ),
    Option(
        "shardAssigner",
        "balanced | hash_range | hash_mod | <module>:<function>: shard-to-task assigner.",
        default="balanced",
    ),
    Option(
        "targetTasks",
        "Spark tasks per batch at most; shards are grouped onto them.",
        shown="(one per shard; light shards share, 16 at most)",
        kind=INT,
        minimum=1,
        field="target_tasks",
    ),
    Option(
        "maxShardsPerTask",
        "Shards one task reads at most; more tasks are planned when needed.",
        kind=INT,
        minimum=1,
        field="max_shards_per_task",
    ),
    Option(
        "shardReadBytesPerSecond",
        "Read quota per shard (Kinesis: 2 MB/s); calls are paced to it. 0 turns byte pacing off.",
        default=2_000_000,
        kind=INT,
        minimum=0,
        field="shard_read_bytes_per_second",
    ),
    Option(
        "idlePollIntervalMs",
        "A shard found at the tip is looked at by the driver (one GetRecords of one record) no more often "
        "than this, and read by a batch only when a look finds something (under fan-out, also how long a "
        "read waits for a push). 1500 by default with service=dynamodb (a look there takes up to three calls).",
        default=500,
        kind=INT,
        minimum=0,
        field="idle_poll_interval_ms",
    ),
    Option(
        "shardDiscoveryIntervalMs",
        "ListShards runs at most this often while the query runs; 6 listings failing in a row (AccessDenied, "
        "throttling) fail the query, naming the calls.",
        default=10_000,
        kind=INT,
        minimum=0,
        field="shard_discovery_interval_ms",
    ),
    Option(
        "consumerType",
        "polling (GetRecords) | efo (enhanced fan-out: SubscribeToShard through a registered consumer).",
        default="polling",
        choices=("polling", "efo"),
        field="consumer_type",
    ),
    Option(
        "consumerName",
        "efo: the consumer to use, found by name or registered at query start (stable per query by default).",
        shown="pyspark-kinesis-<hash of metadataPath>",
    ),
    Option("consumerArn", "efo: an already registered consumer to use (one stream; per stream in streams)."),
    Option(
        "fanOutRelay",
        "efo: a shard's task on another executor reads the subscription the holding executor keeps "
        "(authenticated; events unencrypted), instead of subscribing anew.",
        default=True,
        kind=BOOL,
        field="fan_out_relay",
    ),
    Option(
        "drainInOneBatch",
        "trigger(once=True), and trigger(availableNow=True) on PySpark 4.0/4.1 (one batch there): the batch reads "
        "every record that arrived before the run started, each shard in chunks spilled to the executor's local "
        "disk (memory stays bounded); the batch limits do not apply. Another trigger fails at its second batch. "
        "Without it on 4.0/4.1, a run that starts from a batch that left shards behind says so once in the "
        "driver's log.",
        default=False,
        kind=BOOL,
        field="drain_in_one_batch",
    ),
    Option(
        "failOnDataLoss",
        "Fail when records the query should read are gone (past retention, stream re-created); false: warn, go on.",
        default=True,
        kind=BOOL,
        field="fail_on_data_loss",
    ),
    Option(
        "kinesisColumns",
        "Comma-separated Kinesis columns the rows carry (data, streamName, shardId, partitionKey, sequenceNumber, "
        "subSequenceNumber, approximateArrivalTimestamp, streamArn), in that order; the value format's columns "
        "come after. Spark does not push a query's column pruning to Python sources, and every column costs "
        "the JVM a conversion per row: name only those the query uses.",
        shown="(all)",
    ),
    Option(
        "onCorruptAggregate",
        "passThrough | fail: a record with the KPL magic that does not parse is read as one plain record "
        "(with a warning) or fails the batch.",
        default="passThrough",
        choices=("passThrough", "fail"),
    ),
)
_DECLARED = by_key(SOURCE_OPTIONS)
_DEFAULT: dict[str, Any] = {o.field: o.default for o in SOURCE_OPTIONS if o.field}


def known_options() -> dict[str, Option]:
    """Every option the source takes: its own, `valueFormat` with each registered format's (`formats`:
    a format registered after import takes its options with it), the AWS ones."""
    return by_key((*SOURCE_OPTIONS, *value_options(writing=False), *AWS_OPTIONS))


@dataclass(frozen=True)
class SourceConfig:
    """Everything the source needs, validated. Plain values only, so it pickles to executors."""

    streams: tuple[StreamSpec, ...]
    starting_position: Position
    ending_position: Position
    metadata_path: str | None
    # Options of metadataPath's filesystem (fsspec): may hold credentials, so never shown.
    metadata_storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    # (defaults: the options' declarations above)
    max_records_per_batch: int | None = _DEFAULT["max_records_per_batch"]
    max_bytes_per_batch: int | None = _DEFAULT["max_bytes_per_batch"]
    max_records_per_shard: int = _DEFAULT["max_records_per_shard"]
    max_bytes_per_shard: int = _DEFAULT["max_bytes_per_shard"]
    max_fetch_time_ms: int = _DEFAULT["max_fetch_time_ms"]
    shard_read_bytes_per_second: int = _DEFAULT["shard_read_bytes_per_second"]
    idle_poll_interval_ms: int = _DEFAULT["idle_poll_interval_ms"]
    shard_discovery_interval_ms: int = _DEFAULT["shard_discovery_interval_ms"]
    fail_on_data_loss: bool = _DEFAULT["fail_on_data_loss"]
    shard_assigner: str = "balanced"
    target_tasks: int | None = _DEFAULT["target_tasks"]
    max_shards_per_task: int | None = _DEFAULT["max_shards_per_task"]
    fail_on_corrupt_aggregate: bool = False
    consumer_type: str = _DEFAULT["consumer_type"]
    fan_out_relay: bool = _DEFAULT["fan_out_relay"]  # efo: continue a subscription another executor holds
    drain_in_one_batch: bool = _DEFAULT["drain_in_one_batch"]  # one-batch runs read all there at start
    value: ValueFormat = field(default_factory=ValueFormat)  # the payload's format (`formats`)
    kinesis_columns: tuple[str, ...] = KINESIS_COLUMNS  # kinesisColumns: the Kinesis columns rows carry

    @property
    def fan_out(self) -> bool:
        return self.consumer_type == "efo"

    def stream(self, key: str) -> StreamSpec | None:
        """The stream with this identity (its ARN), if the options still name it; a table named by
        name names each stream it has had (`table_streams`: a stream disabled and enabled again)."""
        return spec_of(self.streams, key)

    def with_identities(self, identities: list[StreamIdentity]) -> SourceConfig:
        """The config with every stream's identity (ARN, creation time, retention) resolved, in
        `streams` order."""
        specs = (s.with_identity(i) for s, i in zip(self.streams, identities, strict=True))
        return replace(self, streams=tuple(specs))


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceConfig:
    """Validate user options. `streaming` decides whether metadataPath is required."""
    opts = fold(options, known_options(), "source")
    fallback = Position.latest() if streaming else Position.trim_horizon()
    service = _DECLARED["service"].parse(opts)
    if service == DYNAMODB:
        opts = for_dynamodb(opts)
    starting, per_stream = parse_source_start(opts.get("startingPosition") or "LATEST", fallback)
    streams = parse_streams(opts, starting, per_stream, service)
    ending, per_stream_ends = parse_source_start(
        opts.get("endingPosition") or "LATEST", Position.latest(), option="endingPosition"
    )
    if "endingPosition" in opts and streaming:
        raise OptionError(
            "endingPosition",
            "applies to batch reads only",
            "Remove it, or use spark.read for a bounded backfill.",
        )
    metadata_path = (opts.get("metadataPath") or "").strip() or None
    if streaming and metadata_path is None:
        raise OptionError(
            "metadataPath",
            "missing; a streaming read records each batch's end there to replay batches exactly",
            'Set .option("metadataPath", "<durable dir or URL>"), e.g. next to the checkpoint location.',
        )
    fields = parse_declared(opts, SOURCE_OPTIONS)
    streams = _with_consumers(with_ends(streams, per_stream_ends), fields["consumer_type"], metadata_path)
    return SourceConfig(
        streams=streams,
        starting_position=starting,
        ending_position=ending,
        metadata_path=metadata_path,
        metadata_storage_options=_storage_options(opts.get("metadataStorageOptions")),
        shard_assigner=_assigner(opts),
        fail_on_corrupt_aggregate=_DECLARED["onCorruptAggregate"].parse(opts) == "fail",
        value=parse_value_format(opts, writing=False),
        kinesis_columns=_kinesis_columns(opts.get("kinesisColumns")),
        **fields,
    )


def _kinesis_columns(given: str | None) -> tuple[str, ...]:
    """kinesisColumns: the named Kinesis columns, in the rows' order (every one when not given)."""
    if given is None or not given.strip():
        return KINESIS_COLUMNS
    by_lower = {name.lower(): name for name in KINESIS_COLUMNS}
    named = [part.strip() for part in given.split(",") if part.strip()]
    unknown = [name for name in named if name.lower() not in by_lower]
    if unknown:
        raise OptionError(
            "kinesisColumns",
            f"'{unknown[0]}' is not a Kinesis column",
            f"Name some of {', '.join(KINESIS_COLUMNS)}, separated by commas.",
        )
    wanted = {name.lower() for name in named}
    return tuple(name for name in KINESIS_COLUMNS if name.lower() in wanted)


def refuse_fan_out_for_batch_reads(config: SourceConfig) -> None:
    """A bounded read (spark.read) reads with GetRecords, every shard to endingPosition: consumerType=efo
    and drainInOneBatch there are mistakes to name, not to ignore. (Spark asks a source for its schema
    before it says whether the read is a stream, so this is checked when the batch reader is made.)"""
    if config.drain_in_one_batch:
        raise OptionError(
            "drainInOneBatch",
            "applies to streaming reads only (a batch read reads every shard to endingPosition anyway)",
            "Remove it from spark.read.",
        )
    if config.fan_out:
        raise OptionError(
            "consumerType",
            "efo applies to streaming reads only",
            "Remove it for spark.read (a bounded backfill reads with GetRecords), or use readStream.",
        )


def default_consumer_name(metadata_path: str) -> str:
    """A consumer name stable for a query (its metadataPath is its own and does not change between
    runs) and distinct between queries, so that a restarted query finds its consumer again."""
    return "pyspark-kinesis-" + hashlib.sha256(metadata_path.encode()).hexdigest()[:20]


def _with_consumers(
    streams: tuple[StreamSpec, ...], consumer_type: str, metadata_path: str | None
) -> tuple[StreamSpec, ...]:
    """Polling: no stream may name a consumer. Fan-out: every stream without consumerName or
    consumerArn gets the query's default consumer name."""
    named = [s for s in streams if s.consumer_name or s.consumer_arn]
    if consumer_type == "polling":
        if named:
            option = "consumerArn" if named[0].consumer_arn else "consumerName"
            raise OptionError(
                option,
                "names an enhanced fan-out consumer, but consumerType is polling",
                "Set consumerType=efo.",
            )
        return streams
    default = default_consumer_name(metadata_path or "")
    return tuple(
        s if (s.consumer_name or s.consumer_arn) else replace(s, consumer_name=default) for s in streams
    )


def _assigner(opts: Mapping[str, str]) -> str:
    from .. import assign

    name = _DECLARED["shardAssigner"].parse(opts)
    try:
        assign.assigner_for(name)
    except (KeyError, ImportError, AttributeError, ValueError):
        raise OptionError(
            "shardAssigner",
            f"'{name}' is neither a known assigner nor an importable '<module>:<function>'",
            f"Use one of {', '.join(sorted(assign.STRATEGIES))}, or a function importable on the driver.",
        ) from None
    return name


def _storage_options(raw: str | None) -> dict[str, Any]:
    """metadataStorageOptions: a JSON object handed to fsspec. Its values may be credentials, so no
    message repeats them."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise OptionError(
            "metadataStorageOptions",
            "is not a JSON object",
            'Write it like {"endpoint_url": "https://s3.eu-west-1.amazonaws.com", "profile": "etl"}.',
        )
    return value
