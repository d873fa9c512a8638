"""Enhanced fan-out consumers: find one by name or register it, wait until it is ACTIVE, deregister it.

Why this shape: users of other connectors report consumers stuck after a register/deregister race
and consumers left registered (each costs money per shard-hour). So registering is idempotent (an
existing consumer of the name is reused, whatever registered it), every state is waited out with a
bound (CREATING until ACTIVE; DELETING until gone, then registered anew), two callers registering
the same name at once both end with the one consumer (ResourceInUse means "someone else is on it":
look again), and deregistering is a separate, explicit call that the connector never makes on its own
while a query may still use the consumer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import StreamAccessError

ACTIVE, CREATING, DELETING = "ACTIVE", "CREATING", "DELETING"


@dataclass(frozen=True)
class Consumer:
    name: str
    arn: str
    status: str
    created: float | None  # epoch seconds, when the server says

    @classmethod
    def from_api(cls, entry: dict[str, Any]) -> Consumer:
        created = entry.get("ConsumerCreationTimestamp")
        return cls(
            name=str(entry["ConsumerName"]),
            arn=str(entry["ConsumerARN"]),
            status=str(entry["ConsumerStatus"]),
            created=created.timestamp() if created is not None else None,
        )


def _code(exc: Exception) -> str:
    return str(exc.response.get("Error", {}).get("Code", "")) if isinstance(exc, ClientError) else ""


def _failure(what: str, subject: str, exc: Exception) -> StreamAccessError:
    return StreamAccessError(
        f"{what} failed for {subject}: {_code(exc) or exc.__class__.__name__}: {exc}. Check the stream "
        "ARN, the region and that the credentials may call the enhanced fan-out APIs "
        "(kinesis:RegisterStreamConsumer, DescribeStreamConsumer, ListStreamConsumers, SubscribeToShard)."
    )


def list_consumers(client: Any, stream_arn: str) -> list[Consumer]:
    """Every consumer registered on the stream (ListStreamConsumers, all pages)."""
    consumers: list[Consumer] = []
    args: dict[str, Any] = {"StreamARN": stream_arn}
    for _page in range(1000):
        try:
            response = client.list_stream_consumers(**args)
        except (ClientError, BotoCoreError) as exc:
            raise _failure("ListStreamConsumers", f"stream {stream_arn}", exc) from None
        consumers += [Consumer.from_api(c) for c in response.get("Consumers", [])]
        token = response.get("NextToken")
        if not token:
            return consumers
        args = {"StreamARN": stream_arn, "NextToken": token}
    raise StreamAccessError(f"ListStreamConsumers of {stream_arn} did not end after 1000 pages")


def describe(client: Any, stream_arn: str, name: str) -> Consumer | None:
    """The consumer of that name on the stream, or None if there is none."""
    args = {"StreamARN": stream_arn, "ConsumerName": name}
    return _describe(client, args, f"consumer '{name}' of {stream_arn}")


def describe_arn(client: Any, consumer_arn: str) -> Consumer | None:
    """The consumer with that ARN, or None if it is not (or no longer) registered."""
    return _describe(client, {"ConsumerARN": consumer_arn}, f"consumer {consumer_arn}")


def _describe(client: Any, args: dict[str, str], subject: str) -> Consumer | None:
    try:
        response = client.describe_stream_consumer(**args)
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            return None
        raise _failure("DescribeStreamConsumer", subject, exc) from None
    except BotoCoreError as exc:
        raise _failure("DescribeStreamConsumer", subject, exc) from None
    return Consumer.from_api(response["ConsumerDescription"])


# Enhanced fan-out consumer slots per stream: 20 (50 with On-demand Advantage); Kinesis Queues share them.
CONSUMER_SLOTS = (20, 50)
# How long RegisterStreamConsumer may answer LimitExceeded before it is taken for full slots rather than
# the control plane's rate (5 calls per second per stream, which clears within a second).
LIMIT_PATIENCE_S = 10.0


def ensure_consumer(
    client: Any, stream_arn: str, name: str, timeout_s: float = 300.0, register_with: Any = None
) -> Consumer:
    """The ACTIVE consumer of that name on the stream: reused if it exists, registered if not, waited
    for while it is being created, registered anew once a deregistration in progress has finished. A
    stream whose consumer slots are full fails within seconds, naming its consumers (`_slots_full`).

    `register_with`: the client RegisterStreamConsumer goes through, one whose retry budget is a single
    attempt. LimitExceededException means both "too many calls" and "no consumer slot left", botocore
    retries it as throttling, and with the default budget a stream whose slots are taken cost a query
    108 s before its error; this loop paces its own calls and tells the two apart."""
    register = client if register_with is None else register_with
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    last = "not registered"
    limited_since: float | None = None
    while time.monotonic() < deadline:
        consumer = describe(client, stream_arn, name)
        if consumer is not None and consumer.status == ACTIVE:
            return consumer
        if consumer is None:
            try:
                register.register_stream_consumer(StreamARN=stream_arn, ConsumerName=name)
                limited_since = None
            except ClientError as exc:
                # ResourceInUse: another caller registers it right now; LimitExceeded: the 5 TPS of
                # the control plane, or every consumer slot taken. Look again after the pause, unless
                # the slots are full.
                if _code(exc) not in ("ResourceInUseException", "LimitExceededException"):
                    raise _failure(
                        "RegisterStreamConsumer", f"consumer '{name}' of {stream_arn}", exc
                    ) from None
                if _code(exc) == "LimitExceededException":
                    now = time.monotonic()
                    limited_since = now if limited_since is None else limited_since
                    _slots_full(client, stream_arn, name, now - limited_since >= LIMIT_PATIENCE_S)
            except BotoCoreError as exc:
                raise _failure("RegisterStreamConsumer", f"consumer '{name}' of {stream_arn}", exc) from None
        else:
            last = consumer.status
        time.sleep(delay)
        delay = min(2.0, delay * 1.5)
    raise StreamAccessError(
        f"consumer '{name}' of {stream_arn} is still {last} after {timeout_s:.0f} s; check it with "
        "`pyspark-kinesis consumers list` and start the query again"
    )


def _slots_full(client: Any, stream_arn: str, name: str, persisting: bool) -> None:
    """Fail, naming the consumers and how to free a slot, when RegisterStreamConsumer's LimitExceeded
    means the stream has no consumer slot left: as many consumers as a stream can have, or (a stream
    with more slots) the refusal persisting past the control plane's rate. Otherwise return: a pause
    and another try is what the rate limit asks for."""
    registered = list_consumers(client, stream_arn)
    if len(registered) < CONSUMER_SLOTS[0] and not persisting:
        return
    stream_name = stream_arn.rsplit("/", 1)[-1]
    names = ", ".join(sorted(c.name for c in registered)) or "(none listed)"
    raise StreamAccessError(
        f"Cannot register enhanced fan-out consumer '{name}' on {stream_arn}: Kinesis answers "
        f"LimitExceededException, and the stream has {len(registered)} consumers registered (a stream has "
        f"{CONSUMER_SLOTS[0]} consumer slots, {CONSUMER_SLOTS[1]} with On-demand Advantage, shared with Kinesis "
        f"Queues): {names}. Free a slot with `pyspark-kinesis consumers deregister {stream_name} NAME` for one "
        "no query uses (list them with `pyspark-kinesis consumers list`), or give this query an existing "
        "consumer with the option consumerName or consumerArn."
    )


def deregister(client: Any, consumer: Consumer, wait_s: float = 300.0) -> None:
    """Deregister the consumer and wait until it is gone (bounded); a consumer already gone is fine."""
    try:
        client.deregister_stream_consumer(ConsumerARN=consumer.arn)
    except ClientError as exc:
        if _code(exc) != "ResourceNotFoundException":
            raise _failure("DeregisterStreamConsumer", f"consumer {consumer.arn}", exc) from None
    except BotoCoreError as exc:
        raise _failure("DeregisterStreamConsumer", f"consumer {consumer.arn}", exc) from None
    deadline = time.monotonic() + wait_s
    delay = 0.1
    while describe_arn(client, consumer.arn) is not None:
        if time.monotonic() > deadline:
            raise StreamAccessError(f"consumer {consumer.arn} is still registered after {wait_s:.0f} s")
        time.sleep(delay)
        delay = min(2.0, delay * 1.5)
