"""The sink's options, validated at query start like the source's (see options.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config.aws_settings import AWS_OPTIONS, AwsSettings, aws_settings
from ..config.declared import BOOL, INT, Option, by_key, parse_declared
from ..config.option_values import fold
from ..config.stream_specs import StreamSpec, check_arn_region, parse_arn, parse_streams
from ..config.value_format import ValueFormat
from ..errors import OptionError
from ..formats import parse_value_format, value_options
from ..model import Position

# Every sink option, declared once (see `config.declared`); docs/sink.md's table is generated from these.
_TARGET: tuple[Option, ...] = (
    Option(
        "streamName",
        "Stream to write to, by name or ARN (an ARN's region is the one written to); a `streamName` "
        "column overrides it per row.",
        shown="(required unless a streamName column)",
    ),
    Option(
        "streams",
        "JSON list of the streams rows may go to, each a name/ARN or an object overriding region, endpointUrl, "
        "role options; rows pick theirs with the streamName column.",
    ),
)
_WRITING: tuple[Option, ...] = (
    Option(
        "maxRetryTimeMs",
        "How long records rejected inside a call are retried before the task fails.",
        default=60_000,
        kind=INT,
        minimum=0,
        field="max_retry_time_ms",
    ),
    Option(
        "maxConcurrentRequests",
        "PutRecords calls in flight per task.",
        default=8,
        kind=INT,
        minimum=1,
        field="concurrency",
    ),
    Option(
        "maxRecordsPerRequest",
        "Records per PutRecords call (service maximum 500).",
        default=500,
        kind=INT,
        minimum=1,
    ),
    Option(
        "maxBytesPerRequest",
        "Bytes per PutRecords call, keys included (service maximum 10 MiB; a larger record goes alone).",
        default=5 * 1024 * 1024,
        kind=INT,
        minimum=1024 * 1024,
    ),
    Option(
        "preserveOrder",
        "Keep row order per partition key, even across retries.",
        default=False,
        kind=BOOL,
        field="preserve_order",
    ),
    Option(
        "onInvalidRecord",
        "fail | skip: what to do with a record Kinesis would refuse.",
        default="fail",
        choices=("fail", "skip"),
    ),
    Option(
        "aggregate",
        "Pack rows into KPL aggregated records per shard (fewer records and calls; readers must de-aggregate).",
        default=False,
        kind=BOOL,
        field="aggregate",
    ),
)
_DECLARED = by_key((*_TARGET, *AWS_OPTIONS, *_WRITING))
_DEFAULT: dict[str, Any] = {o.field: o.default for o in _WRITING if o.field}


def sink_options() -> dict[str, Option]:
    """Every option the sink takes: its own, then `valueFormat` with each registered format's
    (`formats`: a format registered after import takes its options with it)."""
    return {**_DECLARED, **by_key(value_options(writing=True))}


@dataclass(frozen=True)
class SinkConfig:
    stream_name: str | None
    aws: AwsSettings
    max_retry_time_ms: int = _DEFAULT["max_retry_time_ms"]
    concurrency: int = _DEFAULT["concurrency"]
    max_records_per_request: int = _DECLARED["maxRecordsPerRequest"].default
    max_bytes_per_request: int = _DECLARED["maxBytesPerRequest"].default
    preserve_order: bool = _DEFAULT["preserve_order"]
    skip_invalid: bool = False
    aggregate: bool = _DEFAULT["aggregate"]
    # From the `streams` option: the only streams rows may name, each with its own settings (region,
    # endpoint, role). Empty: any stream, with the top-level settings.
    targets: tuple[StreamSpec, ...] = field(default=(), repr=False)
    # Each named stream's largest record (MaxRecordSizeInKiB), learned at query start.
    record_limits: dict[str, int] = field(default_factory=dict)
    # The named streams whose records the service places itself (AUTO record distribution): rows
    # without a partition key go there without one. Learned at query start.
    auto_streams: frozenset[str] = frozenset()
    # The value format (`formats`); glue: the schema version rows are encoded with, looked up at query
    # start (its settings' `reader_definition` and `version_id` then hold the version's definition and id).
    value: ValueFormat = field(default_factory=ValueFormat)

    def target_of(self, stream: str) -> str | None:
        """How a row's stream is written: the stream itself without `streams`; else the matching
        entry's ARN or name (None when no entry matches, or when a name matches several entries)."""
        if not self.targets:
            return stream
        matches = [t for t in self.targets if stream in (t.name, t.arn)]
        if len(matches) != 1:
            return None
        target = matches[0]
        return target.arn if target.by_arn and target.arn else target.name

    def settings_for(self, stream: str) -> AwsSettings:
        """The settings a resolved stream is written with."""
        for target in self.targets:
            if stream in (target.arn, target.name):
                return target.aws
        return self.aws


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    opts = fold(options, sink_options(), "sink")
    on_invalid = _DECLARED["onInvalidRecord"].parse(opts)
    records = _DECLARED["maxRecordsPerRequest"].parse(opts)
    if records > 500:
        raise OptionError("maxRecordsPerRequest", f"{records} is above the service maximum 500", "Use 1-500.")
    size = _DECLARED["maxBytesPerRequest"].parse(opts)
    if size > 10 * 1024 * 1024:
        raise OptionError(
            "maxBytesPerRequest", f"{size} is above the service maximum 10 MiB", "Use at most 10485760."
        )
    targets: tuple[StreamSpec, ...] = ()
    if (opts.get("streams") or "").strip():
        targets = parse_streams(opts, Position.latest())  # refuses streamName beside it, as the source
        if any(t.starting_position != Position.latest() for t in targets):
            raise OptionError("streams", "entries of the sink cannot set startingPosition", "Remove it.")
    stream = (opts.get("streamName") or "").strip() or None
    if targets and stream is None and len(targets) == 1:
        stream = targets[0].arn or targets[0].name  # one stream: rows need no streamName column
    parsed = parse_arn("streamName", stream) if stream and not targets else None
    value = parse_value_format(opts, writing=True)
    if parsed is not None and stream is not None:
        check_arn_region("region", (opts.get("region") or "").strip(), parsed[0], stream)
        opts = {**opts, "region": parsed[0]}
    return SinkConfig(
        stream_name=stream,
        aws=aws_settings(opts),
        max_records_per_request=records,
        max_bytes_per_request=size,
        skip_invalid=on_invalid == "skip",
        **parse_declared(opts, _WRITING),
        targets=targets,
        value=value,
    )
