"""The sink's options, validated at query start like the source's (see options.py)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import OptionError
from .options import AWS_OPTIONS, AwsSettings, _bool, _int, aws_settings

SINK_OPTIONS: dict[str, tuple[str, str]] = {
    "streamName": (
        "(required unless a streamName column)",
        "Stream to write to; a `streamName` column overrides it per row.",
    ),
    **AWS_OPTIONS,
    "maxRetryTimeMs": ("60000", "How long records rejected inside a call are retried before the task fails."),
    "maxConcurrentRequests": ("8", "PutRecords calls in flight per task."),
    "maxRecordsPerRequest": ("500", "Records per PutRecords call (service maximum 500)."),
    "maxBytesPerRequest": ("5242880", "Bytes per PutRecords call, keys included (service maximum 5 MiB)."),
    "preserveOrder": ("false", "Keep row order per partition key, even across retries."),
    "onInvalidRecord": ("fail", "fail | skip: what to do with a record Kinesis would refuse."),
}
_LOWER = {k.lower(): k for k in SINK_OPTIONS}
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})


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


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    opts: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low in _SPARK_OPTIONS:
            continue
        if low not in _LOWER:
            guess = difflib.get_close_matches(low, list(_LOWER), n=1)
            hint = (
                f"Did you mean '{_LOWER[guess[0]]}'?" if guess else "See docs/sink.md for the sink's options."
            )
            raise OptionError(key, "this option is not known to the kinesis sink", hint)
        opts[_LOWER[low]] = value
    on_invalid = (opts.get("onInvalidRecord") or "fail").strip().lower()
    if on_invalid not in ("fail", "skip"):
        raise OptionError(
            "onInvalidRecord", f"'{on_invalid}' is not fail or skip", "Use fail (default) or skip."
        )
    records = _int(opts, "maxRecordsPerRequest", 500, 1) or 500
    if records > 500:
        raise OptionError("maxRecordsPerRequest", f"{records} is above the service maximum 500", "Use 1-500.")
    size = _int(opts, "maxBytesPerRequest", 5 * 1024 * 1024, 1024 * 1024) or 5 * 1024 * 1024
    if size > 5 * 1024 * 1024:
        raise OptionError(
            "maxBytesPerRequest", f"{size} is above the service maximum 5 MiB", "Use at most 5242880."
        )
    return SinkConfig(
        stream_name=(opts.get("streamName") or "").strip() or None,
        aws=aws_settings(opts),
        max_retry_time_ms=_int(opts, "maxRetryTimeMs", 60_000, 0) or 0,
        concurrency=_int(opts, "maxConcurrentRequests", 8, 1) or 8,
        max_records_per_request=records,
        max_bytes_per_request=size,
        preserve_order=_bool(opts, "preserveOrder", False),
        skip_invalid=on_invalid == "skip",
    )
