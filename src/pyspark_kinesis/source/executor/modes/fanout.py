"""Enhanced fan-out: pages are SubscribeToShard events; the continuation is the subscription.

Events arrive shaped like GetRecords responses (`aws.subscribe`), so the one shard-read loop takes
them under polling's limits, aggregate handling, replay bound and caught-up rule. What is fan-out's
own, and why, is docs/design.md's "Enhanced fan-out": subscriptions held by the executor's agent and
continued only from exactly where a read left them, the relay to the holding executor, what an
event says of the tip and when a running read settles, a closed shard's end confirmed by GetRecords,
the subscribe spacing, and what is read by GetRecords instead (replays, a speculative copy whose
first attempt holds the subscription).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ....aws.consumers import describe_arn
from ....aws.error_kinds import (
    CALL_ERRORS,
    STREAM_ERRORS,
    error_code,
    is_foreign_sequence_number,
    is_future_timestamp,
    is_not_found,
    is_retryable,
)
from ....aws.get_records import Records
from ....aws.kinesis import describe_failure
from ....config.stream_specs import StreamSpec
from ....errors import StreamAccessError
from ....model import INSIDE, TIMESTAMP, Position
from ...agent.hub import SubscriptionRequest
from ...agent.link import AgentLink, SubscriptionEnded
from ...agent.relay import RelayBusy, RelayRefused
from ..pacing import ITERATOR_PACER
from ..pages import Fault, FaultKind, Page, ReadContext
from .polling import PollingPages

EVENT_WAIT_S = 10.0  # a read asks the agent for an event this long at a time at most...
SILENT_WAITS = 6  # ...and takes this many empty waits in a row as a broken subscription
_EMPTY = Records.from_lists([], [], [], [])


def holder_hint(holder: str) -> tuple[str, int]:
    """`host:port@ms` (see `agent.process`) as (relay address or "", when the holder subscribed or 0)."""
    address, _at, since = holder.rpartition("@")
    if not _at:
        return holder, 0  # (written before the time was added)
    return address, int(since) if since.isdigit() else 0


class FanOutPages:
    """The SubscribeToShard events of one shard read, through the executor's fan-out agent."""

    keeps_partial = True  # the agent puts the rest of the last event back for the next read

    def __init__(self, context: ReadContext) -> None:
        if context.proxy.spec.consumer_arn is None:
            raise RuntimeError(
                f"{context.proxy.spec.describe()} has no consumer: the query start registers one"
            )
        self.context = context
        self.link: AgentLink | None = None
        self.link_is_remote = False  # `link` goes to another agent (see `_from_holder`)
        # A replay reads by GetRecords (and so does a second attempt of a read: see `_from_holder`).
        self.polling: PollingPages | None = PollingPages(context) if context.replay else None
        self.subscribed = False
        self.position: Position | None = None  # after the last record handed out (a closed shard's check)
        self.read_started, self.read_wall = time.monotonic(), time.time()
        self.idle = 0

    # (what the read's context fixes: derived, not copied, so that it cannot drift from it)
    @property
    def spec(self) -> StreamSpec:
        return self.context.proxy.spec

    @property
    def consumer(self) -> str:
        arn = self.spec.consumer_arn
        assert arn is not None, "checked when the read began"
        return arn

    @property
    def settle(self) -> bool:
        """The read ends as soon as another read of its batch took records (see `_page`): not for a
        replay, which must reach its recorded end, nor under an AvailableNow cutoff."""
        return not self.context.replay and self.context.limits.cutoff_ms is None

    # -- the subscription ----------------------------------------------------------------------------
    def open(self, position: Position, *, verify: bool, reuse: bool) -> bool:
        address, subscribed_ms = holder_hint(self.context.holder)
        remote = bool(reuse and address and self.context.relay_key) and not self._held_here(address)
        if remote and self._from_holder(address, position):
            self.subscribed, self.position, self.idle = True, position, 0
            return False
        if self.polling is not None:
            return self.polling.open(position, verify=verify, reuse=False)
        try:
            # A link to another agent (the holder of the shard's last subscription) only continues what
            # that agent kept: a new subscription (that one ended, or broke) is this executor's agent's.
            if self.link is None or self.link.broken or self.link_is_remote:
                if self.link is not None:
                    self.link.close()
                self.link, self.link_is_remote = AgentLink(), False
            want = SubscriptionRequest(
                self.spec,
                self.consumer,
                self.context.shard,
                position,
                reuse,
                self.context.batch_key,
                verify,
                self.context.relay_key,
                subscribed_ms,
            )
            fresh = self.link.open(want)
        except STREAM_ERRORS as exc:
            raise self._classify(exc, position) from None
        self.subscribed, self.position, self.idle = True, position, 0
        return fresh

    def _held_here(self, address: str) -> bool:
        """The holder is this executor's own agent: the read continues its subscription over the local
        link (`open` with reuse), not over TCP. Over TCP it waited on the relay's handshake like a read
        from elsewhere, and where strangers flooded the relay port, a refused or stalled connect sent it
        to a new subscription behind the service's 5 s spacing (issue #61 item 7)."""
        try:
            if self.link is None or self.link.broken or self.link_is_remote:
                if self.link is not None:
                    self.link.close()
                self.link, self.link_is_remote = AgentLink(), False
            return self.link.is_agent_at(address)
        except (ConnectionError, OSError, RelayRefused):
            return False

    def _from_holder(self, address: str, position: Position) -> bool:
        """Continue the subscription the shard's last read kept at `position` in the agent at `address`
        (this executor's or another's); False when it keeps none there."""
        try:
            link = AgentLink.to_holder(address, self.consumer, self.context.shard, self.context.relay_key)
        except RelayRefused:
            return False
        try:
            link.resume(position, self.context.batch_key)
        except RelayBusy as busy:
            link.close()
            if busy.batch == self.context.batch_key:
                # Another attempt of this very read holds the subscription now (Spark speculates a slow
                # task on another executor): a subscription here would take it from that attempt
                # (which would then subscribe back, each refused within the service's 5 s of the
                # other), so this attempt reads its records by GetRecords; either attempt's batch end
                # stands (first writer wins) and the shard's next read goes back to the holder.
                self.polling = PollingPages(self.context)
            return False
        except (RelayRefused, *STREAM_ERRORS):
            link.close()
            return False
        if self.link is not None:
            self.link.close()
        self.link, self.link_is_remote = link, True
        return True

    def open_oldest(self) -> bool:
        """Whether the shard is still there is GetShardIterator's to say (a refused subscription may mean
        other things); then a subscription at TRIM_HORIZON."""
        if self.polling is not None:
            return self.polling.open_oldest()
        ITERATOR_PACER.before_call((self.context.proxy.spec.resolved_arn, self.context.shard))
        try:
            self.context.proxy.shard_iterator(self.context.shard, Position.trim_horizon())
        except CALL_ERRORS as exc:
            if is_not_found(exc):
                return False
            raise self._classify(exc, Position.trim_horizon()) from None
        self.open(Position.trim_horizon(), verify=False, reuse=False)
        return True

    def keep(self, position: Position) -> str:
        """The read ended at `position`, between two events or inside the last one (a batch limit, a
        KPL aggregate partly taken): the shard's next batch, in any worker of any executor, continues
        this subscription from exactly here, the agent handing it the rest of that event first (see
        `agent.hub.HeldSubscription.requeue_after`, `agent.relay`)."""
        if self.polling is not None:
            return self.context.holder  # (the holder still keeps the shard's subscription)
        if self.subscribed and self.link is not None and not self.link.broken:
            with contextlib.suppress(*STREAM_ERRORS):  # (a lost agent keeps nothing: no harm)
                return self.link.keep(position)
        return ""

    def close(self) -> None:
        if self.link is not None:
            self.link.close()  # closes the subscription unless it was kept

    # -- events --------------------------------------------------------------------------------------
    def next_page(self, limit: int) -> Page | None:
        if self.polling is not None:
            return self.polling.next_page(limit)
        link = self.link
        assert link is not None, "next_page before open"
        now = time.monotonic()
        wait_s = self.context.limits.deadline - now
        if self.settle:
            wait_s = min(wait_s, self.read_started + self.context.limits.push_wait_s - now)
        try:
            response = link.next_event(min(EVENT_WAIT_S, max(0.01, wait_s)), self.settle)
        except SubscriptionEnded:
            self.subscribed = False
            raise Fault(FaultKind.REOPEN) from None
        except STREAM_ERRORS as exc:
            self.subscribed = False
            raise self._classify(exc, self.position, broken=True) from None
        if response is None:  # nothing pushed within the wait
            return self._quiet()
        self.idle = 0
        return self._page(response)

    def _page(self, response: dict[str, Any]) -> Page:
        assert self.link is not None
        records: Records = response["Records"]
        behind = int(response.get("MillisBehindLatest", -1))
        if behind == 0 and response.get("ReceivedAt", 1e18) < self.read_wall:
            behind = -1  # pushed before this read started: at the tip then, which says nothing of now
        if len(records):
            self.position = Position.after(records.seqs[-1].as_py())
        ended = response.get("NextShardIterator") is None
        if ended:
            children = tuple(c["ShardId"] for c in response.get("ChildShards", []))
            return Page(records, behind, ended=True, children=children)
        page = Page(records, behind, full=self.link.pending > 0)
        if not len(records) and behind == 0 and not page.full and self.context.to_end:
            return self._confirm_end(page)
        return page

    def _quiet(self) -> Page | None:
        """No push within the wait: a settled page when this read waits no longer; otherwise nothing
        (the loop checks its budget); a subscription silent for a minute is broken."""
        link = self.link
        assert link is not None
        self.idle += 1
        waited = time.monotonic() >= self.read_started + self.context.limits.push_wait_s
        if self.settle and (link.settled or waited):
            page = Page(_EMPTY, link.behind, settled=True)
            return self._confirm_end(page) if self.context.to_end and link.behind == 0 else page
        if self.idle >= SILENT_WAITS:
            self.subscribed = False
            cause = ConnectionError("no event from the subscription for a minute")
            raise Fault(FaultKind.BROKEN, cause)
        return None

    def _confirm_end(self, page: Page) -> Page:
        """A shard known to be closed, at the tip, whose subscription did not send the event that ends
        it: one GetRecords from where the read got to settles it (no records and no next iterator is
        the shard's end). Unconfirmed, the page does not count as the tip."""
        position = self.position
        if position is None or position.kind == INSIDE:
            return Page(page.records, -1, settled=page.settled)  # inside an aggregate: not at an end
        proxy = self.context.proxy
        ITERATOR_PACER.before_call((proxy.spec.resolved_arn, self.context.shard))
        try:
            response = proxy.get_records(proxy.shard_iterator(self.context.shard, position), 1)
        except CALL_ERRORS:
            return Page(page.records, -1, settled=page.settled)  # the next batch asks again
        if not len(response["Records"]) and response.get("NextShardIterator") is None:
            children = tuple(c["ShardId"] for c in response.get("ChildShards", []))
            return Page(page.records, 0, ended=True, children=children)
        return Page(page.records, -1, settled=page.settled)

    def _classify(self, exc: Exception, position: Position | None, broken: bool = False) -> Fault:
        """What a failed subscription means: at the tip (a start ahead of the service's clock), data gone,
        the consumer gone (the user's to fix), or a pause before subscribing again."""
        if position is not None and position.kind == TIMESTAMP and is_future_timestamp(exc):
            return Fault(FaultKind.AHEAD, exc)
        if is_not_found(exc) and describe_arn(self.context.proxy.client, self.consumer) is None:
            raise StreamAccessError(
                f"the enhanced fan-out consumer {self.consumer} of {self.spec.describe()} is no longer "
                "registered (deregistered while the query ran?). Restart the query: it registers its "
                "consumer again (with consumerArn, give a registered one)."
            ) from None
        if is_not_found(exc) or is_foreign_sequence_number(exc):
            return Fault(FaultKind.GONE, exc)
        code = error_code(exc)
        if is_retryable(exc) or code == "ResourceInUseException" or not code:
            return Fault(FaultKind.BROKEN if broken else FaultKind.RETRY, exc)
        raise describe_failure(exc, self.spec) from exc
