"""One DynamoDB table's stream, through the DynamoDB Streams API, in the shapes the Kinesis side uses.

DynamoDB Streams is Kinesis's shape with other rules (../shared notes, issue #66): shards with parents,
sequence numbers, GetShardIterator and GetRecords with iterators. So a table's stream is given the same
surface as `kinesis.KinesisProxy` (identity, shards as `ShardInfo`, iterators, records as `Records`)
and the source's planner, lineage rule and read loop serve both. What differs stays here:

- A table is named by its name or by a stream ARN. By name, the stream is the table's latest one
  (ListStreams, the newest StreamLabel): a stream disabled and re-enabled is a new stream with a new ARN,
  and the ARN, not the name, is the stream's identity in offsets.
- DescribeStream lists at most 100 shards a call, paged by `ExclusiveStartShardId` (the last page has
  no `LastEvaluatedShardId`); `children` asks for a closed shard's children with `ShardFilter`
  (CHILD_SHARDS). The order of a listing means nothing: lineage follows `ParentShardId`.
- A shard has no hash-key range: each is given the whole hash space (a DynamoDB shard holds a
  partition's changes, and no record of it can belong elsewhere).
- A record is a change of one item: `change` turns it into one payload, the service's typed values
  kept as sent, so the read loop's limits, replays and positions apply unchanged.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import orjson
import pybase64
from botocore.exceptions import BotoCoreError, ClientError

from ..config.stream_specs import StreamSpec
from ..config.table_streams import follows_table
from ..errors import StreamAccessError, StreamNotFoundError
from ..model import LATEST, Position, ShardInfo, StreamIdentity
from .client import dynamodb_streams_client
from .error_kinds import CREDENTIAL_CODES
from .get_records import Records
from .kinesis import retried
from .tip_look import TipAnswer, look_past_tip

DESCRIBE_LIMIT = 100  # shards per DescribeStream call, the service's most
DESCRIBE_ROUNDS = 8  # a throttled or failed DescribeStream page is asked for again this many times at most
MAX_PAGES = 10_000  # bounded: 1,000,000 shards, past any table's partitions
RETENTION_MS = 24 * 3_600_000  # a stream keeps records 24 hours, not configurable
HASH_SPACE_END = 2**128 - 1
EMPTY_AT_TIP = 3  # empty pages in a row that a read takes for the shard's tip (see `get_records`)
MAX_CHAINS = 10_000  # iterators whose empty pages are counted at once, at most
TTL_PRINCIPAL = "dynamodb.amazonaws.com"  # userIdentity of a delete by Time to Live
IAM_ACTIONS = "dynamodb:ListStreams, dynamodb:DescribeStream, dynamodb:GetShardIterator, dynamodb:GetRecords"


def table_name(arn: str) -> str:
    """The table a stream ARN belongs to (arn:aws:dynamodb:REGION:ACCOUNT:table/T/stream/LABEL)."""
    return arn.split(":table/", 1)[-1].split("/stream/", 1)[0]


def is_stream_arn(text: str) -> bool:
    """Whether `text` names a table's stream by ARN (arn:aws:dynamodb:REGION:ACCOUNT:table/T/stream/LABEL)."""
    return text.startswith("arn:") and ":dynamodb:" in text and "/stream/" in text


def describe_failure(exc: Exception, spec: StreamSpec) -> StreamAccessError:
    """A boto error as one message that says what to check. Never includes secrets."""
    where = f"the stream of DynamoDB table {spec.describe().removeprefix('stream ')}"
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            return StreamNotFoundError(
                f"{where} does not exist. Check the table's name (or stream ARN) and region, and that the "
                "table has DynamoDB Streams enabled (StreamSpecification)."
            )
        if code in CREDENTIAL_CODES:
            return StreamAccessError(
                f"AWS refused the credentials for {where} ({code}). Check the credential options or the "
                f"default credential chain, and the IAM policy ({IAM_ACTIONS})."
            )
        return StreamAccessError(f"DynamoDB Streams call failed for {where}: {code}: {exc}")
    return StreamAccessError(f"DynamoDB Streams call failed for {where}: {exc.__class__.__name__}: {exc}")


def _shard(shard: dict[str, Any]) -> ShardInfo:
    seqs = shard.get("SequenceNumberRange", {})
    return ShardInfo(
        shard_id=shard["ShardId"],
        parent=shard.get("ParentShardId"),
        adjacent_parent=None,
        start_hash=0,
        end_hash=HASH_SPACE_END,
        closed="EndingSequenceNumber" in seqs,
        first_seq=seqs.get("StartingSequenceNumber"),
        last_seq=seqs.get("EndingSequenceNumber"),
    )


def _epoch_s(when: Any) -> float:
    """ApproximateCreationDateTime as botocore gives it (a datetime; a number from a raw body)."""
    if isinstance(when, datetime.datetime):
        return when.timestamp()
    return float(when or 0.0)


def _wire(value: Any) -> str:
    """Binary back to the base64 text the service sent (botocore decoded it): the payload keeps the
    service's typed values as they were on the wire."""
    if isinstance(value, bytes | bytearray):
        return pybase64.b64encode(bytes(value)).decode()
    raise TypeError(f"{type(value).__name__} in a DynamoDB Streams record")


def change(record: dict[str, Any]) -> tuple[str, bytes, float]:
    """(sequence number, payload, creation time in epoch seconds) of one stream record. The payload is
    a JSON array, [eventName, Keys, NewImage, OldImage, whether Time to Live deleted the item,
    SizeBytes, eventID], the item parts in DynamoDB's typed form as the service sent them (null where
    the stream's view type leaves them out): turning them into plain values is the reader's
    (`values.dynamodb_images.change_row`), after the batch is cut. An array, not an object: a batch
    holds millions of them."""
    body = record["dynamodb"]
    identity = record.get("userIdentity") or {}
    by_ttl = identity.get("Type") == "Service" and identity.get("PrincipalId") == TTL_PRINCIPAL
    payload = orjson.dumps(
        [
            record.get("eventName"),
            body.get("Keys"),
            body.get("NewImage"),
            body.get("OldImage"),
            by_ttl,
            body.get("SizeBytes"),
            record.get("eventID"),
        ],
        default=_wire,
    )
    return body["SequenceNumber"], payload, _epoch_s(body.get("ApproximateCreationDateTime"))


class StreamsProxy:
    """One table's stream as the connector uses it (the surface of `kinesis.KinesisProxy`)."""

    def __init__(self, spec: StreamSpec, *, agent: str, max_attempts: int | None = None) -> None:
        self.spec, self.agent, self._max_attempts = spec, agent, max_attempts
        self._client: Any = None
        self._empties: dict[str, int] = {}  # next iterator -> empty pages in a row before it (`get_records`)
        self._arn = spec.arn if spec.arn else (spec.name if is_stream_arn(spec.name) else None)

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = dynamodb_streams_client(
                    self.spec.aws, max_attempts=self._max_attempts, agent=self.agent
                )
            except (ClientError, BotoCoreError) as exc:
                raise describe_failure(exc, self.spec) from None
        return self._client

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return dict(getattr(self.client, operation)(**kwargs))
        except (ClientError, BotoCoreError) as exc:
            raise describe_failure(exc, self.spec) from None

    @property
    def arn(self) -> str:
        """The stream's ARN: as given, or the table's latest stream (ListStreams by table name)."""
        if self._arn is None:
            streams = self._call("list_streams", TableName=self.spec.name).get("Streams", [])
            if not streams:
                raise StreamNotFoundError(
                    f"DynamoDB table '{self.spec.name}' in region '{self.spec.aws.region}' has no stream. "
                    "Enable DynamoDB Streams on it (StreamSpecification, a view type with the images you "
                    "want: NEW_AND_OLD_IMAGES gives both), or check the table's name and region."
                )
            self._arn = str(max(streams, key=lambda s: s.get("StreamLabel", ""))["StreamArn"])
        return self._arn

    @property
    def name(self) -> str:
        return self.spec.name

    def deleted(self) -> StreamNotFoundError:
        """The error for a stream that went away while the query read it (its table was deleted)."""
        return StreamNotFoundError(
            f"The stream {self.arn} of DynamoDB table '{table_name(self.arn)}' was deleted (with its table) "
            "while the query read it. Remove it from the options and restart the query."
        )

    def check_same_stream(self, within_s: float = 0.0) -> None:
        """Raise a clear error if the stream is gone. A stream is never re-created under its ARN (a table
        whose stream is disabled and enabled again has a new one), so there is nothing else to tell. A
        table's stream that another followed (the table named by name) is deleted 24 hours after it was
        disabled: its shards are gone as aged-out ones are, which the read says as such."""
        try:
            self.describe(Limit=1)
        except StreamNotFoundError:
            if not self.followed():
                raise self.deleted() from None

    def followed(self) -> bool:
        """Whether another stream of the table followed this one (the table named by name): a stream
        that is gone is then the disabled one, deleted 24 hours later, not a table deleted. False when
        the table is gone too; a throttled or failed ListStreams raises."""
        try:
            return follows_table(self.spec) and self.successor() is not None
        except StreamNotFoundError:
            return False

    def look_past_tip(self, shard_id: str, position: Position, iterator: str | None) -> TipAnswer:
        return look_past_tip(self, shard_id, position, iterator)

    def successor(self) -> str | None:
        """The table's stream after this one (ListStreams: the oldest StreamLabel newer than this one's),
        or None. A table has one enabled stream at most, so a newer one means this one was disabled (its
        shards closed) and the table's stream enabled again; `source.driver.stream_set` reads it once
        this one is read to its end. The next one, not the newest: a stream enabled and disabled again
        in between holds changes too (found by the simulation: seed 5,229, a stream of 25 minutes
        skipped). Asked of the table this stream belongs to, whatever the options named."""
        table, own = table_name(self.arn), self.arn.rsplit("/stream/", 1)[-1]
        following: tuple[str, str] | None = None
        start: dict[str, str] = {}
        for _page in range(MAX_PAGES):
            page = self._call("list_streams", TableName=table, **start)
            for stream in page.get("Streams", []):
                label = str(stream.get("StreamLabel") or stream["StreamArn"].rsplit("/stream/", 1)[-1])
                if label > own and (following is None or label < following[0]):
                    following = (label, str(stream["StreamArn"]))
            last = page.get("LastEvaluatedStreamArn")
            if not last or last == start.get("ExclusiveStartStreamArn"):
                break
            start = {"ExclusiveStartStreamArn": str(last)}
        return following[1] if following is not None else None

    def describe(self, **kwargs: Any) -> dict[str, Any]:
        """One DescribeStream page. Throttling and 5xx left after botocore's attempts are tried again
        (DESCRIBE_ROUNDS, with backoff): a large table's listing is many pages against a 10 calls/s
        limit, and one throttled page would otherwise fail the whole listing (found by the simulation:
        six such listings in a row failed a query)."""
        return retried(
            lambda: dict(self.client.describe_stream(StreamArn=self.arn, **kwargs)["StreamDescription"]),
            DESCRIBE_ROUNDS,
            lambda exc: describe_failure(exc, self.spec),
        )

    def identity(self) -> StreamIdentity:
        """The stream's ARN and creation time. A stream is never re-created under its ARN (re-enabling
        makes a new ARN), and keeps records 24 hours."""
        created = self.describe(Limit=1).get("CreationRequestDateTime")
        return StreamIdentity(self.arn, int(_epoch_s(created) * 1000) if created else None, RETENTION_MS)

    def list_shards(self, open_only: bool = False) -> list[ShardInfo]:
        """Every shard DescribeStream lists, page after page. DynamoDB Streams has no open-only filter:
        `open_only` keeps the open ones of the whole listing."""
        shards: dict[str, ShardInfo] = {}
        start: str | None = None
        for _page in range(MAX_PAGES):
            page = self.describe(Limit=DESCRIBE_LIMIT, **({"ExclusiveStartShardId": start} if start else {}))
            for shard in page.get("Shards", []):
                shards.setdefault(shard["ShardId"], _shard(shard))
            following = page.get("LastEvaluatedShardId")
            if not following or following == start:  # (a server that ignores the paging ends here too)
                break
            start = following
        listed = list(shards.values())
        return [s for s in listed if not s.closed] if open_only else listed

    def children(self, shard_id: str) -> list[ShardInfo]:
        """A closed shard's children (ShardFilter CHILD_SHARDS), which may not exist yet: the service
        opens a child after its parent ended. A server that ignores the filter answers with other shards,
        and only those whose parent is `shard_id` are kept."""
        page = self.describe(ShardFilter={"Type": "CHILD_SHARDS", "ShardId": shard_id})
        return [_shard(s) for s in page.get("Shards", []) if s.get("ParentShardId") == shard_id]

    def shard_iterator(self, shard_id: str, position: Position, verify: bool = False) -> str:
        """An iterator at `position` (see `Position.iterator_args`; LATEST as the service's LATEST;
        AT_TIMESTAMP as recent botocore models have it)."""
        args = {"ShardIteratorType": "LATEST"} if position.kind == LATEST else position.iterator_args(verify)
        if "StartingSequenceNumber" in args:  # (Kinesis's name for it)
            args["SequenceNumber"] = args.pop("StartingSequenceNumber")
        response = self.client.get_shard_iterator(StreamArn=self.arn, ShardId=shard_id, **args)
        return str(response["ShardIterator"])

    def get_records(self, iterator: str, limit: int) -> dict[str, Any]:
        """{"Records": Records, "NextShardIterator": str | None, "MillisBehindLatest": int}: no next
        iterator once a closed shard is read to its end. Failures raise as botocore raised them (the
        read loop tells expiry, trimming and throttling apart by their codes).

        DynamoDB Streams says nothing of how far behind a read is, and answers empty pages in the middle
        of a shard too: a page with records is as far behind as its last change is old; an empty page
        says "unknown" (-1: the read goes on) until it is the EMPTY_AT_TIP-th in a row of its read, which
        says "at the tip" (0)."""
        response = self.client.get_records(ShardIterator=iterator, Limit=limit)
        changes = [change(r) for r in response.get("Records", [])]
        following = response.get("NextShardIterator")
        empties = 0 if changes else self._empties.pop(iterator, 0) + 1
        if following and 0 < empties < EMPTY_AT_TIP:
            if len(self._empties) >= MAX_CHAINS:  # (reads that ended mid-chain leave entries behind)
                self._empties.clear()
            self._empties[following] = empties
        if changes:
            behind = max(0, int(time.time() * 1000) - int(changes[-1][2] * 1000))
        else:
            behind = 0 if empties >= EMPTY_AT_TIP else -1
        seqs = [c[0] for c in changes]
        return {
            # (no partition key: a change's keys are in its payload)
            "Records": Records.from_lists(
                seqs, [None] * len(seqs), [c[1] for c in changes], [c[2] for c in changes]
            ),
            "NextShardIterator": following,
            "MillisBehindLatest": behind,
        }


def table_backlog(
    spec: StreamSpec, shard_id: str, position: Position, max_records: int, timeout_s: float
) -> Any:
    """`admin.backlog` for a table's stream (the CLI's `lag`): the changes after `position`, counted by
    reading them, up to `max_records` or `timeout_s` seconds; complete at a closed shard's end or at the
    tip (the third empty page in a row, see `StreamsProxy.get_records`)."""
    from .admin import Backlog

    proxy = StreamsProxy(spec, agent="cli")
    try:
        iterator: str | None = proxy.shard_iterator(shard_id, position)
        count, behind = 0, None
        deadline = time.monotonic() + timeout_s
        for _call in range(100_000):  # the deadline ends it far sooner
            if iterator is None:
                return Backlog(count, behind if behind is not None else 0, True)
            page = proxy.get_records(iterator, 1000)
            taken = len(page["Records"])
            count += taken
            if behind is None and page["MillisBehindLatest"] >= 0:
                behind = int(page["MillisBehindLatest"])
            iterator = page["NextShardIterator"]
            if (taken == 0 and page["MillisBehindLatest"] == 0) or count >= max_records:
                return Backlog(count, behind if behind is not None else -1, taken == 0)
            if time.monotonic() > deadline:
                break
    except (ClientError, BotoCoreError) as exc:
        raise describe_failure(exc, spec) from None
    return Backlog(count, behind if behind is not None else -1, False)
