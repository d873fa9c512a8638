"""Parsing and validating the source's options into one immutable value.

All checks happen here, on the driver, when the query starts, so that a typo fails the query at
once with a message naming the option, instead of surfacing later as a Py4J trace from a task.
Spark hands options over case-insensitively (keys may arrive lower-cased), so lookups fold case.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .errors import OptionError
from .positions import Position

# The options every AWS call takes, shared by the source and the sink (sink_options.py).
AWS_OPTIONS: dict[str, tuple[str, str]] = {
    "region": ("AWS_REGION / profile region", "AWS region of the stream."),
    "endpointUrl": ("(AWS endpoint)", "Kinesis endpoint, e.g. http://127.0.0.1:4568 for a local server."),
    "awsAccessKeyId": ("(default chain)", "Static access key id; use with awsSecretKey."),
    "awsSecretKey": ("(default chain)", "Static secret key; never logged."),
    "sessionToken": ("(none)", "Session token for temporary static credentials; never logged."),
    "retryMode": ("standard", "botocore retry mode: legacy | standard | adaptive."),
    "maxAttempts": ("10", "botocore total attempts per AWS call (first try included)."),
    "connectTimeoutMs": ("5000", "HTTP connect timeout for AWS calls."),
    "readTimeoutMs": ("30000", "HTTP read timeout for AWS calls."),
}

# name -> (default shown in docs, one-line description). docs/options.md is checked against this
# table by a test, so docs and code cannot drift apart.
KNOWN_OPTIONS: dict[str, tuple[str, str]] = {
    "streamName": ("(required)", "Name of the Kinesis data stream to read."),
    "startingPosition": ("LATEST", "LATEST | TRIM_HORIZON | AT_TIMESTAMP:<ISO-8601>."),
    "endingPosition": (
        "LATEST",
        "Batch reads only: LATEST (the time of the call) | AT_TIMESTAMP:<ISO-8601>.",
    ),
    "metadataPath": ("(required for readStream)", "Durable directory or URL for batch-end records."),
    "maxRecordsPerBatch": ("(none)", "Upper bound on records per micro-batch (Spark ReadMaxRows)."),
    "maxBytesPerBatch": ("(none)", "Upper bound on payload bytes per micro-batch (Spark ReadMaxBytes)."),
    "maxRecordsPerShard": ("100000", "Records one shard contributes to one batch at most (memory bound)."),
    "maxBytesPerShard": ("67108864", "Payload bytes one shard contributes to one batch at most."),
    "maxFetchTimeMs": ("10000", "Time a task spends fetching one shard in one batch at most."),
    "shardAssigner": (
        "balanced",
        "balanced | hash_range | hash_mod | <module>:<function>: shard-to-task assigner.",
    ),
    "targetTasks": ("(one per shard)", "Spark tasks per batch at most; shards are grouped onto them."),
    "maxShardsPerTask": ("(none)", "Shards one task reads at most; more tasks are planned when needed."),
    "idlePollIntervalMs": ("500", "A shard found at the tip is not polled again sooner than this."),
    "shardDiscoveryIntervalMs": ("10000", "ListShards runs at most this often while the query runs."),
    "failOnDataLoss": ("true", "Fail when records a batch must replay have expired from the stream."),
    **AWS_OPTIONS,
}
_LOWER = {k.lower(): k for k in KNOWN_OPTIONS}
# Options Spark itself may pass along with the user's; accepted and ignored.
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation"})


def _parse_time(option: str, text: str) -> int:
    """ISO-8601 -> epoch milliseconds; naive times are taken as UTC (Kinesis keeps UTC)."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            option,
            f"'{text}' is not an ISO-8601 timestamp",
            "Write it like AT_TIMESTAMP:2026-01-31T12:00:00Z.",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_position(option: str, text: str, *, allow_trim: bool = True) -> Position:
    """Parse a startingPosition/endingPosition value into a Position."""
    value = text.strip()
    upper = value.upper()
    if upper == "LATEST":
        return Position.latest()
    if upper in ("TRIM_HORIZON", "EARLIEST") and allow_trim:
        return Position.trim_horizon()
    if upper.startswith("AT_TIMESTAMP:"):
        return Position.at_timestamp(_parse_time(option, value.split(":", 1)[1]))
    allowed = (
        "LATEST, TRIM_HORIZON or AT_TIMESTAMP:<ISO-8601>"
        if allow_trim
        else "LATEST or AT_TIMESTAMP:<ISO-8601>"
    )
    raise OptionError(option, f"unknown position '{value}'", f"Use {allowed}.")


def _int(opts: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = opts.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(name, f"'{raw}' is not a whole number", f"Give an integer >= {minimum}.") from None
    if value < minimum:
        raise OptionError(name, f"{value} is below the minimum {minimum}", f"Give an integer >= {minimum}.")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(name, f"'{raw}' is not a boolean", "Use true or false.")


@dataclass(frozen=True)
class AwsSettings:
    """How to reach one stream's Kinesis endpoint. Pickled to executors; repr hides secrets."""

    region: str
    endpoint_url: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    retry_mode: str = "standard"
    max_attempts: int = 10
    connect_timeout_ms: int = 5000
    read_timeout_ms: int = 30000


@dataclass(frozen=True)
class SourceConfig:
    """Everything the source needs, validated. Plain values only, so it pickles to executors."""

    stream_name: str
    aws: AwsSettings
    starting_position: Position
    ending_position: Position
    metadata_path: str | None
    max_records_per_batch: int | None = None
    max_bytes_per_batch: int | None = None
    max_records_per_shard: int = 100_000
    max_bytes_per_shard: int = 64 * 1024 * 1024
    max_fetch_time_ms: int = 10_000
    idle_poll_interval_ms: int = 500
    shard_discovery_interval_ms: int = 10_000
    fail_on_data_loss: bool = True
    shard_assigner: str = "balanced"
    target_tasks: int | None = None
    max_shards_per_task: int | None = None


def _fold(options: Mapping[str, str]) -> dict[str, str]:
    """Map user keys to canonical option names; reject unknown ones with a suggestion."""
    folded: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low in _SPARK_OPTIONS:
            continue
        canonical = _LOWER.get(low)
        if canonical is None:
            guess = difflib.get_close_matches(low, list(_LOWER), n=1)
            hint = (
                f"Did you mean '{_LOWER[guess[0]]}'?" if guess else "See the options reference in README.md."
            )
            raise OptionError(key, "this option is not known to the kinesis source", hint)
        folded[canonical] = value
    return folded


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceConfig:
    """Validate user options. `streaming` decides whether metadataPath is required."""
    opts = _fold(options)
    stream = (opts.get("streamName") or "").strip()
    if not stream:
        raise OptionError("streamName", "missing", 'Set .option("streamName", "<your stream>").')
    aws = aws_settings(opts)
    starting = parse_position("startingPosition", opts.get("startingPosition") or "LATEST")
    ending = parse_position("endingPosition", opts.get("endingPosition") or "LATEST", allow_trim=False)
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
    return SourceConfig(
        stream_name=stream,
        aws=aws,
        starting_position=starting,
        ending_position=ending,
        metadata_path=metadata_path,
        max_records_per_batch=_int(opts, "maxRecordsPerBatch", None, 1),
        max_bytes_per_batch=_int(opts, "maxBytesPerBatch", None, 1),
        max_records_per_shard=_int(opts, "maxRecordsPerShard", 100_000, 1) or 100_000,
        max_bytes_per_shard=_int(opts, "maxBytesPerShard", 64 * 1024 * 1024, 1) or 64 * 1024 * 1024,
        max_fetch_time_ms=_int(opts, "maxFetchTimeMs", 10_000, 1) or 10_000,
        idle_poll_interval_ms=_int(opts, "idlePollIntervalMs", 500, 0) or 0,
        shard_discovery_interval_ms=_int(opts, "shardDiscoveryIntervalMs", 10_000, 0) or 0,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        shard_assigner=_assigner(opts),
        target_tasks=_int(opts, "targetTasks", None, 1),
        max_shards_per_task=_int(opts, "maxShardsPerTask", None, 1),
    )


def _assigner(opts: Mapping[str, str]) -> str:
    from . import assign

    name = (opts.get("shardAssigner") or "balanced").strip()
    try:
        assign.resolve(name)
    except (KeyError, ImportError, AttributeError, ValueError):
        raise OptionError(
            "shardAssigner",
            f"'{name}' is neither a known assigner nor an importable '<module>:<function>'",
            f"Use one of {', '.join(sorted(assign.STRATEGIES))}, or a function importable on the driver.",
        ) from None
    return name


def aws_settings(opts: Mapping[str, str]) -> AwsSettings:
    """Region, endpoint, credentials and retry settings: shared by the source and the sink."""
    region = opts.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or ""
    region = region.strip()
    if not region:
        raise OptionError("region", "missing and no AWS_REGION is set", 'Set .option("region", "us-east-1").')
    endpoint = (opts.get("endpointUrl") or "").strip() or None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise OptionError(
            "endpointUrl", f"'{endpoint}' is not an http(s) URL", "Write it like http://127.0.0.1:4568."
        )
    key_id, secret = opts.get("awsAccessKeyId"), opts.get("awsSecretKey")
    if bool(key_id) != bool(secret):
        raise OptionError(
            "awsAccessKeyId" if not key_id else "awsSecretKey",
            "static credentials need both awsAccessKeyId and awsSecretKey",
            "Set both, or neither to use the default credential chain.",
        )
    retry_mode = (opts.get("retryMode") or "standard").strip().lower()
    if retry_mode not in ("legacy", "standard", "adaptive"):
        raise OptionError(
            "retryMode", f"'{retry_mode}' is not a botocore retry mode", "Use standard or adaptive."
        )
    return AwsSettings(
        region=region,
        endpoint_url=endpoint,
        access_key_id=key_id or None,
        secret_key=secret or None,
        session_token=opts.get("sessionToken") or None,
        retry_mode=retry_mode,
        max_attempts=_int(opts, "maxAttempts", 10, 1) or 10,
        connect_timeout_ms=_int(opts, "connectTimeoutMs", 5000, 1) or 5000,
        read_timeout_ms=_int(opts, "readTimeoutMs", 30000, 1) or 30000,
    )
