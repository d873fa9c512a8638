"""Kinesis calls the connector makes, with AWS errors turned into actionable connector errors."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)

from ..config.aws_settings import AwsSettings
from ..config.stream_specs import DYNAMODB, StreamSpec, arn_parts
from ..errors import StreamAccessError, StreamNotFoundError, StreamRecreatedError
from ..model import Position, ShardInfo, StreamIdentity
from .client import kinesis_client
from .error_kinds import (
    CREDENTIAL_CODES,
    is_retryable,
)
from .tip_look import TipAnswer, look_past_tip

MAX_MALFORMED = 8  # unreadable responses in a row before a call is given up
# DescribeStreamSummary is limited to 20 calls per second per account: throttled calls (left after
# botocore's own attempts) are tried again this many times, with backoff, before a task gives up.
SUMMARY_ROUNDS = 8
# A stream found CREATING at start is waited for this long, looked at every CREATING_POLL_S.
CREATING_WAIT_S, CREATING_POLL_S = 60.0, 1.0
_same_stream_checked: dict[tuple[str, int | None], float] = {}  # (ARN, creation) -> when (monotonic)
_same_stream_lock = threading.Lock()


def describe_failure(exc: Exception, spec: StreamSpec) -> StreamAccessError:
    """Translate a boto error into one message that says what to check. Never includes secrets."""
    if spec.service == DYNAMODB:  # (a table's stream: its own words and IAM actions)
        from .dynamodb_streams import describe_failure as table_failure

        return table_failure(exc, spec)
    where = spec.describe()
    if isinstance(exc, ClientError) and exc.operation_name == "AssumeRole":
        error = exc.response.get("Error", {})
        return StreamAccessError(
            f"Cannot assume role {spec.aws.role_arn} to read {where}: {error.get('Code', '')}: "
            f"{error.get('Message', '')}. Check the role's trust policy (principal, externalId), that the "
            "source credentials may call sts:AssumeRole on it, and the stsEndpointUrl option if set."
        )
    if isinstance(exc, EndpointConnectionError):
        options = (
            "'endpointUrl', 'stsEndpointUrl' and 'region'"
            if spec.aws.role_arn
            else "'endpointUrl' and 'region'"
        )
        return StreamAccessError(
            f"Cannot reach {'STS' if 'sts' in str(exc).lower() else 'Kinesis'} for {where}: {exc}. Check the "
            f"{options} options and the network."
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return StreamAccessError(
            f"No AWS credentials found for {where}. Set the awsAccessKeyId/awsSecretKey options or configure "
            "the default credential chain (environment, profile, instance role)."
        )
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            return StreamNotFoundError(
                f"Kinesis {where} does not exist. Create it, or fix the 'streamName'/'streams'/'region' options."
            )
        if code in CREDENTIAL_CODES:
            return StreamAccessError(
                f"AWS refused the credentials for {where} ({code}). Check the awsAccessKeyId/awsSecretKey/"
                "sessionToken/roleArn options or the default credential chain, and the IAM policy "
                "(kinesis:ListShards, kinesis:GetShardIterator, kinesis:GetRecords, kinesis:DescribeStreamSummary)."
            )
        return StreamAccessError(f"Kinesis call failed for {where}: {code}: {exc}")
    return StreamAccessError(f"Kinesis call failed for {where}: {exc.__class__.__name__}: {exc}")


class KinesisProxy:
    """One stream's Kinesis API as the connector uses it."""

    def __init__(self, spec: StreamSpec, *, agent: str, max_attempts: int | None = None) -> None:
        """`agent`: "planner" (driver), "reader" (executors) or "sink", shown in the User-Agent."""
        self.spec = spec
        self.agent = agent
        self.name = spec.name
        self.settings: AwsSettings = spec.aws
        self._max_attempts = max_attempts
        self._client: Any = None
        self.unreadable = 0  # responses that did not decode (incomplete documents) and were asked for again

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = kinesis_client(
                    self.settings, max_attempts=self._max_attempts, agent=self.agent
                )
            except (ClientError, BotoCoreError) as exc:
                raise describe_failure(exc, self.spec) from None
        return self._client

    def check_stream(self) -> str:
        """Fail fast with a clear message if the stream is missing or unreachable (or its role cannot be
        assumed); returns the stream's ARN, its identity in offsets."""
        return self.identity()[0]

    def summary(self) -> dict[str, Any]:
        """DescribeStreamSummary, or a clear error (`StreamNotFoundError` when it does not exist).
        Throttling and 5xx left after botocore's attempts are tried again (see `SUMMARY_ROUNDS`)."""
        return retried(
            lambda: dict(
                self.client.describe_stream_summary(**self.spec.api_args())["StreamDescriptionSummary"]
            ),
            SUMMARY_ROUNDS,
            lambda exc: describe_failure(exc, self.spec),
        )

    def max_record_bytes(self) -> int:
        """The largest record (payload and partition key) the stream takes: MaxRecordSizeInKiB, which
        streams raise from 1 MiB up to 10 MiB; 1 MiB when the server (or an older botocore) does not say.
        The sink asks this at query start, so a stream still CREATING is waited for here too."""
        return record_bytes(self.ready_summary())

    def write_facts(self) -> tuple[int, bool]:
        """What the sink learns at query start, from one DescribeStreamSummary: the largest record, and
        whether the service places records itself (RecordDistributionStrategy AUTO, on-demand streams:
        partition keys are ignored and may be left out)."""
        summary = self.ready_summary()
        return record_bytes(summary), summary.get("RecordDistributionStrategy") == "AUTO"

    def ready_summary(self) -> dict[str, Any]:
        """The stream's summary once it can be read and written, or a clear error. A stream still
        CREATING is waited for, a bounded time (`CREATING_WAIT_S`): a pipeline that creates its stream
        and starts its query at once should not fail on ListShards' or PutRecords' ResourceInUse /
        ResourceNotFound; a stream being deleted is an error; UPDATING streams (a reshard, a mode
        change, a retention change) are read and written as ACTIVE ones are."""
        summary = self.summary()
        deadline = time.monotonic() + CREATING_WAIT_S
        while summary.get("StreamStatus") == "CREATING":
            if time.monotonic() >= deadline:
                raise StreamAccessError(
                    f"Kinesis stream '{self.name}' is still CREATING after {CREATING_WAIT_S:.0f} s: start the "
                    "query (or the write) once it is ACTIVE"
                )
            time.sleep(CREATING_POLL_S)
            summary = self.summary()
        if summary.get("StreamStatus") == "DELETING":
            raise StreamNotFoundError(
                f"Kinesis stream '{self.name}' is being deleted: check streamName (and region), or create it again"
            )
        return summary

    def identity(self) -> StreamIdentity:
        """The stream's ARN, creation time and retention (None where the server does not say), or a
        clear error (`StreamNotFoundError` when it does not exist; see `ready_summary`)."""
        summary = self.ready_summary()
        arn = summary.get("StreamARN")
        if not arn:  # a server that does not report it: an identity that is unique in practice
            arn = f"arn:aws:kinesis:{self.settings.region}:unknown:stream/{self.name}"
        created = summary.get("StreamCreationTimestamp")
        hours = summary.get("RetentionPeriodHours")
        return StreamIdentity(
            str(arn),
            int(created.timestamp() * 1000) if created is not None else None,
            int(hours) * 3_600_000 if hours else None,
        )

    def check_same_stream(self, within_s: float = 0.0) -> None:
        """Raise a clear error if the stream was deleted, or deleted and re-created, since the query
        started (the creation time tells); return quietly if it is the stream the query started with.
        With `within_s`, a check this process made that recently stands (a restart after a long
        downtime finds many shards aged out at once, in every task: one DescribeStreamSummary serves)."""
        key = (self.spec.resolved_arn, self.spec.created_ms)
        with _same_stream_lock:
            last = _same_stream_checked.get(key)
        if within_s > 0 and last is not None and time.monotonic() - last < within_s:
            return
        try:
            created = self.identity().created_ms
        except StreamNotFoundError:
            raise self.deleted() from None
        if self.spec.created_ms is None or created is None or created == self.spec.created_ms:
            with _same_stream_lock:
                _same_stream_checked[key] = time.monotonic()
            return
        raise StreamRecreatedError(
            f"Kinesis {self.spec.describe()} was deleted and re-created while the query read it: the "
            "records it had not read yet are gone, and its positions do not apply to the new stream. "
            "Restart the query: with failOnDataLoss=false it goes on with the new stream from its start."
        )

    def deleted(self) -> StreamNotFoundError:
        """The error for a stream that went away while the query read it."""
        return StreamNotFoundError(
            f"Kinesis {self.spec.describe()} was deleted while the query read it. Restore it and restart the "
            "query, or remove it from the options (streamName/streams) and restart."
        )

    def list_shards(self, open_only: bool = False) -> list[ShardInfo]:
        """Every shard ListShards reports, following NextToken pages. With `open_only`, ask the server
        for the open shards only (ShardFilter AT_LATEST); servers without ShardFilter support answer
        with every shard or refuse the filter, and then the caller's own filtering applies."""
        if open_only:
            try:
                return self._list({"ShardFilter": {"Type": "AT_LATEST"}})
            except StreamAccessError as exc:
                if "InvalidArgument" not in str(exc):
                    raise
        return self._list({})

    def _list(self, extra: dict[str, Any]) -> list[ShardInfo]:
        shards: list[ShardInfo] = []
        try:
            response = self._call_list(**self.spec.api_args(), **extra)
            for _page in range(10_000):  # bounded: a stream has at most a few thousand pages
                shards.extend(ShardInfo.from_api(s) for s in response["Shards"])
                token = response.get("NextToken")
                if not token:
                    break
                response = self._call_list(NextToken=token)
        except (ClientError, BotoCoreError) as exc:
            raise describe_failure(exc, self.spec) from None
        return shards

    def _call_list(self, **kwargs: Any) -> dict[str, Any]:
        """One ListShards page. A page that is not a complete document reaches us as {}: read as "no shards", it would
        make every known shard look expired, so it is asked for again."""
        return self._well_formed("ListShards", "Shards", lambda: self.client.list_shards(**kwargs))

    def _well_formed(self, operation: str, member: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """botocore parses a body that is not a complete document as an empty result (a body cut short of
        its Content-Length is a closed connection instead, retried: whole_body.py); such a call is repeated, with a
        short backoff, until its result has `member` (MAX_MALFORMED times, then a clear error)."""
        for attempt in range(MAX_MALFORMED):
            response = call()
            if member in response:
                return response
            self.unreadable += 1
            time.sleep(min(2.0, 0.05 * 2**attempt))
        raise StreamAccessError(
            f"Kinesis returned {MAX_MALFORMED} unreadable {operation} responses in a row for stream "
            f"'{self.name}'. Check the network path to the endpoint."
        )

    def shard_iterator(self, shard_id: str, position: Position, verify: bool = False) -> str:
        """An iterator at `position` (with `verify`, "after S" starts at S: see `Position.iterator_args`)."""
        response = self.client.get_shard_iterator(
            **self.spec.api_args(), ShardId=shard_id, **position.iterator_args(verify)
        )
        return str(response["ShardIterator"])

    def look_past_tip(self, shard_id: str, position: Position, iterator: str | None) -> TipAnswer:
        return look_past_tip(self, shard_id, position, iterator)

    def successor(self) -> str | None:
        """None: a Kinesis stream is never followed by another (a re-created one keeps its ARN)."""
        return None

    def followed(self) -> bool:
        return False

    def get_records(self, iterator: str, limit: int) -> dict[str, Any]:
        """One GetRecords call. An incomplete document reaches us as {}: read literally (no next
        iterator) it would say "shard closed" and skip records, so it is asked for again."""
        return self._well_formed(
            "GetRecords", "Records", lambda: self.client.get_records(ShardIterator=iterator, Limit=limit)
        )


def retried(
    call: Callable[[], dict[str, Any]], rounds: int, failure: Callable[[Exception], Exception]
) -> dict[str, Any]:
    """A control-plane call, with throttling and 5xx left after botocore's attempts tried again up to
    `rounds` times, with backoff; `failure` makes the error a user reads of what ends it."""
    for attempt in range(rounds):
        try:
            return call()
        except ClientError as exc:
            if not is_retryable(exc) or attempt + 1 == rounds:
                raise failure(exc) from None
        except BotoCoreError as exc:
            raise failure(exc) from None
        time.sleep(random.uniform(0.5, 1.0) * min(5.0, 0.2 * 2**attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def sink_target(settings: AwsSettings, stream: str) -> StreamSpec:
    """Where the sink writes `stream` (a name, or an ARN already checked by the caller): an ARN is
    written to in its own region, with the sink's credentials and endpoint, and named as StreamARN
    (what cross-account writes need)."""
    parts = arn_parts(stream)
    if parts is None:
        return StreamSpec(stream, settings)
    return StreamSpec(parts[2], replace(settings, region=parts[0]), arn=stream, by_arn=True)


def record_bytes(summary: dict[str, Any]) -> int:
    kib = summary.get("MaxRecordSizeInKiB")
    return int(kib) * 1024 if kib else 1024 * 1024


@functools.cache
def partition_key_optional() -> bool:
    """Whether this botocore lets a PutRecords entry leave out its PartitionKey (newer ones do, for
    streams with AUTO record distribution; older ones refuse the call before sending it). Asked only
    for rows without a key bound for an AUTO stream, once per process: loading botocore's service
    model is not a cost every process that imports this module should pay."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("kinesis")
    return "PartitionKey" not in model.shape_for("PutRecordsRequestEntry").required_members


def put_records(settings: AwsSettings, stream: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One PutRecords call to a stream named by name or ARN; returns the per-record results in request
    order (ErrorCode on failures). Whole-call failures (throttling, 5xx) are retried by botocore; a
    missing stream raises a clear error."""
    spec = sink_target(settings, stream)
    try:
        response = kinesis_client(spec.aws, agent="sink").put_records(**spec.api_args(), Records=entries)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code in ("ResourceNotFoundException", *CREDENTIAL_CODES) or exc.operation_name == "AssumeRole":
            raise describe_failure(exc, spec) from None
        raise
    except (EndpointConnectionError, NoCredentialsError) as exc:
        raise describe_failure(exc, spec) from None
    return list(response["Records"])
