"""The sink's options, validated at query start like the source's (see options.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..config.aws_settings import AWS_OPTIONS, AwsSettings, aws_settings
from ..config.option_values import bool_option, fold, int_option
from ..config.stream_specs import check_arn_region, parse_arn
from ..errors import OptionError

SINK_OPTIONS: dict[str, tuple[str, str]] = {
    "streamName": (
        "(required unless a streamName column)",
        "Stream to write to, by name or ARN (an ARN's region is the one written to); a `streamName` "
        "column overrides it per row.",
    ),
    **AWS_OPTIONS,
    "maxRetryTimeMs": ("60000", "How long records rejected inside a call are retried before the task fails."),
    "maxConcurrentRequests": ("8", "PutRecords calls in flight per task."),
    "maxRecordsPerRequest": ("500", "Records per PutRecords call (service maximum 500)."),
    "maxBytesPerRequest": ("5242880", "Bytes per PutRecords call, keys included (service maximum 5 MiB)."),
    "preserveOrder": ("false", "Keep row order per partition key, even across retries."),
    "onInvalidRecord": ("fail", "fail | skip: what to do with a record Kinesis would refuse."),
    "aggregate": (
        "false",
        "Pack rows into KPL aggregated records per shard (fewer records and calls; readers must de-aggregate).",
    ),
}


@dataclass(frozen=True)
class SinkConfig:
    stream_name: str | None
    aws: AwsSettings
    max_retry_time_ms: int = 60_000
    concurrency: int = 8
    max_records_per_request: int = 500
    max_bytes_per_request: int = 5 * 1024 * 1024
    preserve_order: bool = False
    skip_invalid: bool = False
    aggregate: bool = False


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    opts = fold(options, SINK_OPTIONS, "sink", "docs/sink.md")
    on_invalid = (opts.get("onInvalidRecord") or "fail").strip().lower()
    if on_invalid not in ("fail", "skip"):
        raise OptionError(
            "onInvalidRecord", f"'{on_invalid}' is not fail or skip", "Use fail (default) or skip."
        )
    records = int_option(opts, "maxRecordsPerRequest", 500, 1) or 500
    if records > 500:
        raise OptionError("maxRecordsPerRequest", f"{records} is above the service maximum 500", "Use 1-500.")
    size = int_option(opts, "maxBytesPerRequest", 5 * 1024 * 1024, 1024 * 1024) or 5 * 1024 * 1024
    if size > 5 * 1024 * 1024:
        raise OptionError(
            "maxBytesPerRequest", f"{size} is above the service maximum 5 MiB", "Use at most 5242880."
        )
    stream = (opts.get("streamName") or "").strip() or None
    parsed = parse_arn("streamName", stream) if stream else None
    if parsed is not None:
        check_arn_region("region", (opts.get("region") or "").strip(), parsed[0], stream)
        opts = {**opts, "region": parsed[0]}
    return SinkConfig(
        stream_name=stream,
        aws=aws_settings(opts),
        max_retry_time_ms=int_option(opts, "maxRetryTimeMs", 60_000, 0) or 0,
        concurrency=int_option(opts, "maxConcurrentRequests", 8, 1) or 8,
        max_records_per_request=records,
        max_bytes_per_request=size,
        preserve_order=bool_option(opts, "preserveOrder", False),
        skip_invalid=on_invalid == "skip",
        aggregate=bool_option(opts, "aggregate", False),
    )
