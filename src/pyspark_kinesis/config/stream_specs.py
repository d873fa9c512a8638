"""Which streams a source reads, each with its own region, endpoint, role and starting position.

A source names its streams either with `streamName` (one name or ARN, or a comma-separated list) or
with `streams`, a JSON list whose entries may override, per stream, the options that say how to reach
it (FLINK-3211: streams live in different regions and accounts with independent access settings).
Top-level options are the defaults every entry inherits.

A stream is identified in offsets and batch-end records by its ARN, which Kinesis reports when the
query starts: names repeat across regions and accounts, ARNs do not.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from ..errors import OptionError
from ..model import LATEST, Position, StreamIdentity
from .aws_settings import AwsSettings, aws_settings
from .option_values import shown
from .start_positions import ENDING, ShardStarts, StreamStart, match_streams, parse_stream_start

_ARN = re.compile(r"^arn:(aws[a-z-]*):kinesis:([a-z0-9-]+):(\d{12}):stream/([A-Za-z0-9_.-]{1,128})$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_TABLE_ARN = re.compile(
    r"^arn:aws[a-z-]*:dynamodb:([a-z0-9-]+):(\d{12}):table/([A-Za-z0-9_.-]{3,255})/stream/\S+$"
)
_TABLE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_CONSUMER_ARN = re.compile(
    r"^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream/([A-Za-z0-9_.-]{1,128})/consumer/[A-Za-z0-9_.-]{1,128}:\d+$"
)

# Keys a `streams` entry may set; everything else comes from the top-level options.
ENTRY_KEYS = (
    "streamName",
    "region",
    "endpointUrl",
    "roleArn",
    "roleSessionName",
    "externalId",
    "stsEndpointUrl",
    "startingPosition",
    "consumerName",
    "consumerArn",
)
_ENTRY_LOWER = {k.lower(): k for k in ENTRY_KEYS}


KINESIS, DYNAMODB = "kinesis", "dynamodb"  # (StreamSpec.service)


@dataclass(frozen=True)
class StreamSpec:
    """One stream of a source. `arn` is the stream's identity; it is None until the query start
    resolves it (`with_arn`), unless the user named the stream by ARN."""

    name: str
    aws: AwsSettings
    starting_position: Position = Position(LATEST)  # noqa: RUF009 (a frozen value)
    # Shards named with their own starting position (`start_positions`); the others start at
    # `starting_position`, as the lineage rule decides (`source.driver.lineage.named_states`).
    shard_starts: ShardStarts = ()
    # Batch reads: where this stream's reads stop, when endingPosition names the stream (None: the
    # source's endingPosition), and shards named with their own end (`start_positions`, ENDING).
    ending_position: Position | None = None
    shard_ends: ShardStarts = ()
    arn: str | None = None
    by_arn: bool = False  # named by ARN: API calls pass StreamARN (cross-account access needs it)
    # When the stream was created (DescribeStreamSummary), learned at query start: a stream deleted and
    # re-created under the same name keeps its ARN, and only this tells the two apart.
    created_ms: int | None = None
    # How long the stream keeps records (RetentionPeriodHours at query start; None: the server did not say).
    retention_ms: int | None = None
    # Enhanced fan-out (consumerType=efo): the consumer's name, and its ARN once registered or found at
    # query start (or as given by consumerArn). None for polling.
    consumer_name: str | None = None
    consumer_arn: str | None = None
    # The service the stream is read through: KINESIS, or DYNAMODB (a table's stream: `name` is the
    # table's name or the stream's ARN; aws.services.proxy_for).
    service: str = KINESIS

    @property
    def resolved_arn(self) -> str:
        """The ARN, resolved at query start: the stream's identity in offsets and records."""
        if self.arn is None:
            raise RuntimeError(f"stream {self.name} was not resolved to an ARN at query start")
        return self.arn

    def api_args(self) -> dict[str, str]:
        return {"StreamARN": self.arn or ""} if self.by_arn else {"StreamName": self.name}

    def describe(self) -> str:
        """How messages name the stream: enough to find it, nothing secret."""
        where = f"stream '{self.name}' in region '{self.aws.region}'"
        if self.by_arn and self.arn:
            where = f"stream {self.arn}"
        if self.aws.endpoint_url:
            where += f" at endpoint {self.aws.endpoint_url}"
        if self.aws.role_arn:
            where += f" (through role {self.aws.role_arn})"
        return where

    def place(self) -> dict[str, str | None]:
        """Where the stream is served, as it may be written down (metadataPath's `source.json`, for the
        CLI's `lag`): region and endpoint, without a `user:password@` an endpoint might carry."""
        url = self.aws.endpoint_url
        if url and "@" in url:
            scheme, _, rest = url.partition("://")
            url = f"{scheme}://{rest.rpartition('@')[2]}"
        return {"region": self.aws.region, "endpointUrl": url}

    def with_identity(self, identity: StreamIdentity) -> StreamSpec:
        return replace(
            self, arn=identity.arn, created_ms=identity.created_ms, retention_ms=identity.retention_ms
        )

    def with_consumer(self, consumer_arn: str) -> StreamSpec:
        return replace(self, consumer_arn=consumer_arn)


def arn_parts(text: str) -> tuple[str, str, str] | None:
    """(region, account, name) of a well-formed Kinesis stream ARN, else None."""
    match = _ARN.match(text)
    return None if match is None else (match.group(2), match.group(3), match.group(4))


def parse_arn(option: str, text: str) -> tuple[str, str, str] | None:
    """(region, account, name) of a Kinesis stream ARN, None if `text` is no ARN; a malformed ARN is an error."""
    if not text.startswith("arn:"):
        return None
    match = _ARN.match(text)
    if match is None:
        raise OptionError(
            option,
            f"'{text}' is not a Kinesis stream ARN",
            "Write it like arn:aws:kinesis:us-east-1:123456789012:stream/orders.",
        )
    return match.group(2), match.group(3), match.group(4)


def check_arn_region(option: str, region: str, arn_region: str, arn: str) -> None:
    """A stream named by ARN is used in the ARN's region: a region option that names another one is a
    contradiction the user must resolve, not something to pick a winner for silently."""
    if region and region != arn_region:
        raise OptionError(
            option,
            f"'{region}' disagrees with the region '{arn_region}' of the stream ARN {arn}",
            "Remove the region option for this stream (the ARN says where it is), or fix the ARN.",
        )


def _spec(
    option: str,
    target: str,
    opts: Mapping[str, str],
    entry: Mapping[str, str],
    default_start: Position,
    service: str = KINESIS,
) -> StreamSpec:
    """One stream from its name or ARN, the top-level options and the entry's overrides."""
    target = target.strip()
    merged = dict(opts) | dict(entry)
    parsed = _table_target(option, target) if service == DYNAMODB else parse_arn(option, target)
    if parsed is not None:
        arn_region, _account, name = parsed
        # A streams entry's ARN is checked against the entry's own region only: the top-level region
        # is merely the default of the entries that do not say where they are.
        given = "region" in entry or not option.startswith("streams[")
        region = ((entry if "streams[" in option else opts).get("region") or "").strip() if given else ""
        region_option = f"{option.split('.')[0]}.region" if "streams[" in option else "region"
        check_arn_region(region_option, region, arn_region, target)
        merged["region"] = arn_region
    elif service == DYNAMODB or _NAME.match(target):
        name = target
    else:
        raise OptionError(
            option,
            f"'{target}' is neither a stream name (1-128 of A-Z a-z 0-9 _ . -) nor a stream ARN",
            "Give a stream name like orders, or an ARN like arn:aws:kinesis:us-east-1:123456789012:stream/orders.",
        )
    prefix = option.split(".")[0] + "." if "." in option else ""
    aws = aws_settings(merged, prefix=prefix if entry else "", entry_keys=set(entry))
    start_text = entry.get("startingPosition")
    own = StreamStart() if start_text is None else parse_stream_start(f"{prefix}startingPosition", start_text)
    consumer_name, consumer_arn = _consumer(prefix, opts, entry, name)
    return StreamSpec(
        name=name,
        aws=aws,
        starting_position=own.default or default_start,
        shard_starts=own.shards,
        arn=target if parsed is not None else None,
        by_arn=parsed is not None,
        consumer_name=consumer_name,
        consumer_arn=consumer_arn,
        service=service,
    )


def _table_target(option: str, target: str) -> tuple[str, str, str] | None:
    """(region, account, table) of a DynamoDB stream ARN, None for a table's name; anything else is an
    error naming the option (service=dynamodb)."""
    match = _TABLE_ARN.match(target)
    if match is not None:
        return match.group(1), match.group(2), match.group(3)
    if target.startswith("arn:") or not _TABLE.match(target):
        raise OptionError(
            option,
            f"'{target}' is neither a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -) nor a table's stream ARN",
            "Give a table name like orders, or a stream ARN like "
            "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000.",
        )
    return None


def _consumer(
    prefix: str, opts: Mapping[str, str], entry: Mapping[str, str], stream: str
) -> tuple[str | None, str | None]:
    """The stream's enhanced fan-out consumer as named by consumerName / consumerArn (checked here;
    whether fan-out is on at all, and the default name, are the source options' to decide). An entry
    that names its consumer either way replaces the top-level default entirely."""
    source = entry if ("consumerName" in entry or "consumerArn" in entry) else opts
    prefix = prefix if source is entry else ""
    name = (source.get("consumerName") or "").strip() or None
    arn = (source.get("consumerArn") or "").strip() or None
    if name is not None and not _NAME.match(name):
        raise OptionError(
            f"{prefix}consumerName",
            f"'{name}' is not a consumer name (1-128 of A-Z a-z 0-9 _ . -)",
            "Give a name like orders-etl.",
        )
    if arn is not None:
        match = _CONSUMER_ARN.match(arn)
        if match is None:
            raise OptionError(
                f"{prefix}consumerArn",
                f"'{arn}' is not a Kinesis stream consumer ARN",
                "Write it like arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/etl:1700000000.",
            )
        if match.group(1) != stream:
            raise OptionError(
                f"{prefix}consumerArn",
                f"belongs to stream '{match.group(1)}', not to '{stream}'",
                "A consumer reads the stream it was registered on: give that stream's consumer.",
            )
        if name is not None:
            raise OptionError(
                f"{prefix}consumerArn",
                "cannot be combined with consumerName",
                "Name the consumer with one of the two: consumerName (found or registered) or consumerArn.",
            )
    return name, arn


def _entries(raw: str) -> list[Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OptionError(
            "streams",
            f"is not valid JSON ({exc})",
            'Write a JSON list, e.g. [{"streamName": "orders", "region": "eu-west-1"}, "clicks"].',
        ) from None
    if not isinstance(value, list) or not value:
        raise OptionError(
            "streams",
            "must be a non-empty JSON list",
            'Write a JSON list, e.g. [{"streamName": "orders", "region": "eu-west-1"}, "clicks"].',
        )
    return value


def _entry_options(index: int, item: Any) -> tuple[str, dict[str, str]]:
    """(name or ARN, overrides) of one `streams` entry: a string, or an object of ENTRY_KEYS."""
    where = f"streams[{index}]"
    if isinstance(item, str):
        return item, {}
    if not isinstance(item, dict):
        raise OptionError(
            where,
            f"is a {type(item).__name__}, not a stream name or an object",
            'Give "orders" or {"streamName": "orders", "region": "eu-west-1"}.',
        )
    entry: dict[str, str] = {}
    for key, value in item.items():
        canonical = _ENTRY_LOWER.get(str(key).lower())
        if canonical is None:
            guess = difflib.get_close_matches(str(key).lower(), list(_ENTRY_LOWER), n=1)
            hint = f"Did you mean '{_ENTRY_LOWER[guess[0]]}'?" if guess else f"Use {', '.join(ENTRY_KEYS)}."
            raise OptionError(f"{where}.{key}", "is not a key a streams entry can set", hint)
        if canonical == "startingPosition" and isinstance(value, dict):
            value = orjson.dumps(value).decode()  # per-shard positions (see `start_positions`)
        if not isinstance(value, str):
            raise OptionError(
                f"{where}.{canonical}", f"is {shown(canonical, value)}, not a string", "Quote the value."
            )
        entry[canonical] = value
    target = entry.pop("streamName", "").strip()
    if not target:
        raise OptionError(
            f"{where}.streamName", "missing", 'Every entry names its stream: {"streamName": "orders"}.'
        )
    return target, entry


def parse_streams(
    opts: Mapping[str, str],
    default_start: Position,
    per_stream: Mapping[str, Any] | None = None,
    service: str = KINESIS,
) -> tuple[StreamSpec, ...]:
    """The streams a source reads, from `streamName` or `streams`. Streams named twice are an error.
    `per_stream`: the streams' own starting positions from a startingPosition map, by the key the user
    wrote (see `start_positions`)."""
    names = (opts.get("streamName") or "").strip()
    raw = (opts.get("streams") or "").strip()
    if names and raw:
        raise OptionError(
            "streams",
            "cannot be combined with streamName",
            "Name the streams with one of the two: streamName (a comma-separated list) or streams (JSON).",
        )
    if not names and not raw:
        raise OptionError(
            "streamName",
            "missing",
            'Set .option("streamName", "<your stream>") (a comma-separated list for several) or the streams option.',
        )
    specs: list[StreamSpec] = []
    if names:
        targets = [t.strip() for t in names.split(",")]
        if any(not t for t in targets):
            raise OptionError(
                "streamName", f"'{names}' has an empty name", "Separate stream names with single commas."
            )
        specs = [_spec("streamName", t, opts, {}, default_start, service) for t in targets]
    else:
        for index, item in enumerate(_entries(raw)):
            target, entry = _entry_options(index, item)
            specs.append(_spec(f"streams[{index}].streamName", target, opts, entry, default_start, service))
    seen: set[tuple[str, str | None, str | None, str]] = set()
    for spec in specs:
        identity = (spec.aws.region, spec.aws.endpoint_url, spec.aws.role_arn, spec.arn or spec.name)
        if identity in seen:
            raise OptionError(
                "streams" if raw else "streamName", f"names {spec.describe()} twice", "Name each stream once."
            )
        seen.add(identity)
    return _with_starts(specs, per_stream or {}, raw)


def with_ends(specs: tuple[StreamSpec, ...], per_stream: Mapping[str, Any]) -> tuple[StreamSpec, ...]:
    """The specs with what a top-level endingPosition map says of each stream (batch reads)."""
    if not per_stream:
        return specs
    names = [(spec.name, spec.arn if spec.by_arn else None) for spec in specs]
    by_index, top = match_streams(per_stream, names, option=ENDING)
    if top is not None:
        by_index = {0: top}
    out = list(specs)
    for index, given in by_index.items():
        out[index] = replace(out[index], ending_position=given.default, shard_ends=given.shards)
    return tuple(out)


def _with_starts(specs: list[StreamSpec], per_stream: Mapping[str, Any], raw: str) -> tuple[StreamSpec, ...]:
    """The specs with what a top-level startingPosition map says of each stream. A stream whose
    `streams` entry sets its own startingPosition must not be named there as well."""
    if not per_stream:
        return tuple(specs)
    names = [(spec.name, spec.arn if spec.by_arn else None) for spec in specs]
    by_index, top = match_streams(per_stream, names)
    if top is not None:
        by_index = {0: top}
    entries = _entries(raw) if raw else []
    out = list(specs)
    for index, given in by_index.items():
        item = entries[index] if index < len(entries) else None
        if isinstance(item, dict) and any(str(k).lower() == "startingposition" for k in item):
            raise OptionError(
                f"streams[{index}].startingPosition",
                "is set, and the top-level startingPosition names the same stream",
                "Give the stream's positions in one of the two places.",
            )
        spec = out[index]
        out[index] = replace(
            spec, starting_position=given.default or spec.starting_position, shard_starts=given.shards
        )
    return tuple(out)
