"""The driver's look at an idle shard (`tip_probe`): one GetRecords of one record, for either service,
which tells whether the shard has anything past its position, and since when (the record's arrival).

Apart from `kinesis.KinesisProxy` because both services' proxies use it with their own `get_records`,
and because what a look may conclude from an answer decides the tip (`ShardState.tip_ms`), which spares
or reports losses: its rules are pinned here with their tests (tests/unit/aws/test_look_past_tip.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import StreamAccessError
from ..model import Position
from .error_kinds import (
    CREDENTIAL_CODES,
    error_code,
    is_expired_iterator,
    is_foreign_sequence_number,
    is_retryable,
)


@dataclass(frozen=True)
class TipAnswer:
    """What one look at a shard last found at the tip says (`look_past_tip`).

    `news`: True when the shard has something for a batch to read (a record, its end, or the server
    says it is behind), False when it has nothing yet, None when the look told nothing (throttled).
    `iterator`: where the next look goes on from (None: obtain a new one). `failure`: why a look
    failed, in which case `news` is True, so a batch's read decides as it would have without looks;
    `denied` when the credentials may not call GetShardIterator/GetRecords. `first_ms`: when the
    record the look found arrived (epoch ms; 0: no record): the shard was at its tip at the look's
    position until then (`tip_probe.TipProbe.news`). `ended`: the shard ends right after the position
    (no record, no next iterator): it is at its tip there for good."""

    news: bool | None
    iterator: str | None = None
    failure: str = ""
    denied: bool = False
    first_ms: int = 0
    ended: bool = False


# GetRecords calls one look makes at most: an expired iterator obtained again, and DynamoDB Streams' empty
# pages that cannot tell (three in a row say the tip: `dynamodb_streams.EMPTY_AT_TIP`).
LOOK_PAGES = 5


def look_past_tip(proxy: Any, shard_id: str, position: Position, iterator: str | None) -> TipAnswer:
    """(`proxy`: a stream's proxy of either service: `shard_iterator` and `get_records` are all it needs.)
    Whether a shard has anything at or after `position`: one GetRecords of at most one record
    from `iterator` (or a new iterator at `position`), whose record is not kept (a batch's task
    reads it, so its end is recorded as every read's is). A position the service refuses as a
    sequence number it does not know (the record aged out) is looked at from the oldest record
    left: every record left is after it. (Found by the simulation: a quiet shard whose last record
    aged out failed every look on such a service, and each failed look ran a batch that read
    nothing, trigger after trigger.)"""
    renewed = False
    for _page in range(LOOK_PAGES):
        try:
            if iterator is None:
                iterator = _look_iterator(proxy, shard_id, position)
            response = proxy.get_records(iterator, 1)
        except ClientError as exc:
            if is_expired_iterator(exc) and iterator is not None and not renewed:
                iterator, renewed = None, True  # (an expired iterator is obtained again once)
                continue
            if error_code(exc) in CREDENTIAL_CODES:
                return TipAnswer(True, failure=f"{error_code(exc)}: {exc}", denied=True)
            if is_retryable(exc):
                return TipAnswer(None, iterator)
            return TipAnswer(True, failure=f"{error_code(exc)}: {exc}")
        except (BotoCoreError, StreamAccessError) as exc:
            return TipAnswer(True, failure=f"{exc.__class__.__name__}: {exc}")
        following = response.get("NextShardIterator")
        behind = int(response.get("MillisBehindLatest") or 0)
        found = response["Records"]
        if len(found):
            return TipAnswer(True, first_ms=int(found.arrivals[0].as_py() * 1000))
        if following is None:
            return TipAnswer(True, ended=True)
        if behind > 0:
            return TipAnswer(True)
        if behind == 0:
            return TipAnswer(False, str(following))
        # An empty page that cannot tell (DynamoDB Streams answers them mid-shard: `behind` -1): read on.
        # Taken for "nothing new", it let an AvailableNow run end with records put before its cutoff
        # unread, and renewed the tip of a shard that was not at it.
        iterator = str(following)
    return TipAnswer(None)


def _look_iterator(proxy: Any, shard_id: str, position: Position) -> str:
    try:
        return proxy.shard_iterator(shard_id, position)
    except ClientError as exc:
        if position.anchor is None or not is_foreign_sequence_number(exc):
            raise
        return proxy.shard_iterator(shard_id, Position.trim_horizon())
