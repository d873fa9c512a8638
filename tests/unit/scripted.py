"""Scripted fakes for the shard-read loop: a page source that hands out pages (or faults) from a script,
and a Kinesis proxy with no network, so the loop's rules can be driven page by page."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from botocore.exceptions import ClientError

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.cutting import ShardLimits
from pyspark_kinesis.source.executor.pages import Fault, Page, ReadContext
from pyspark_kinesis.source.options import parse_options

SPEC = replace(
    parse_options(
        {
            "streamName": "orders",
            "region": "eu-west-1",
            "endpointUrl": "http://127.0.0.1:9",
            "metadataPath": "/m",
        },
        streaming=True,
    ).streams[0],
    arn="arn:aws:kinesis:eu-west-1:123456789012:stream/orders",
    consumer_arn="arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/c:1",
)
SHARD = "shardId-000000000001"


def task_config(meta: str, **options: str) -> Any:
    """A streaming source's options for a task's read of SPEC (no network: the tests stand the API in),
    its batch-end records under `meta`."""
    return replace(
        parse_options(
            {
                "streamName": "orders",
                "region": "eu-west-1",
                "endpointUrl": "http://127.0.0.1:9",
                "metadataPath": meta,
                **options,
            },
            streaming=True,
        ),
        streams=(SPEC,),
    )


def client_error(
    code: str, message: str = "", operation: str = "GetRecords", status: int = 400
) -> ClientError:
    """An AWS error as botocore raises it (the code, message and HTTP status the connector reads)."""
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


THROTTLED = client_error("ProvisionedThroughputExceededException")


def records(seqs: Iterable[str | int], data: bytes = b"x", arrival: float = 1.0) -> Records:
    seqs = [str(s) for s in seqs]
    return Records.from_lists(seqs, ["k"] * len(seqs), [data] * len(seqs), [arrival] * len(seqs))


def page(seqs: Iterable[str | int] = (), **facts: Any) -> Page:
    return Page(records(seqs), **facts)


class FakeProxy:
    """The stream's API as the loop and the sources use it, with no network: `get_records` answers
    from `answers` (a response dict or an exception to raise)."""

    def __init__(self, spec: Any = SPEC, answers: list[Any] | None = None) -> None:
        self.spec, self.name, self.client = spec, spec.name, None
        self.answers = list(answers or [])
        self.calls: list[tuple[str, Any]] = []

    def shard_iterator(self, shard: str, position: Position, verify: bool = False) -> str:
        self.calls.append(("GetShardIterator", position))
        return f"it-{position.describe()}"

    def get_records(self, iterator: str, limit: int) -> dict[str, Any]:
        self.calls.append(("GetRecords", iterator))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def check_same_stream(self, within_s: float = 0.0) -> None:
        self.calls.append(("DescribeStreamSummary", within_s))


@dataclass
class ScriptedPages:
    """A page source whose pages come from a script: a `Page` is handed out, a `Fault` raised, None is
    "nothing within the wait"; once the script is done, None. `opens` and `kept` record the calls."""

    script: list[Page | Fault | None]
    fresh: bool = True  # what `open` answers (False: a kept continuation was reused)
    exists: bool = True  # what `open_oldest` answers
    open_faults: list[Fault] = field(default_factory=list)  # raised by the next `open` calls
    opens: list[tuple[Position, bool, bool]] = field(default_factory=list)
    oldest: int = 0
    kept: list[Position] = field(default_factory=list)
    closed: bool = False
    limits_asked: list[int] = field(default_factory=list)
    open_s: float = 0.0  # how long each `open` takes (a subscription waiting out the service's spacing)
    keeps_partial: bool = False  # (see PageSource: True stands for fan-out's agent)

    def open(self, position: Position, *, verify: bool, reuse: bool) -> bool:
        self.opens.append((position, verify, reuse))
        time.sleep(self.open_s)
        if self.open_faults:
            raise self.open_faults.pop(0)
        return self.fresh

    def open_oldest(self) -> bool:
        self.oldest += 1
        return self.exists

    def next_page(self, limit: int) -> Page | None:
        self.limits_asked.append(limit)
        if not self.script:
            time.sleep(0.01)  # "nothing within the wait": a real source waited before saying so
            return None
        step = self.script.pop(0)
        if isinstance(step, Fault):
            raise step
        return step

    def keep(self, position: Position) -> str:
        self.kept.append(position)
        return ""

    def close(self) -> None:
        self.closed = True


def context(
    proxy: Any = None,
    *,
    max_records: int = 1000,
    closed: bool = False,
    cutoff_ms: int | None = None,
    seconds: float = 0.5,
    until: Position | None = None,
    push_wait_s: float = 0.5,
    last_seq: str | None = None,
    first_seq: str | None = None,
) -> ReadContext:
    limits = ShardLimits(
        max_records=max_records,
        max_bytes=10**9,
        cutoff_ms=cutoff_ms,
        deadline=time.monotonic() + seconds,
        closed=closed,
        push_wait_s=push_wait_s,
        last_seq=last_seq,
        first_seq=first_seq,
    )
    return ReadContext(proxy or FakeProxy(), SHARD, limits, until, batch=7, batch_key="tok#7")


class ReadRecorder:
    """Stands in for `ShardRead` in `modules` (a task's or a drained task's reads): records what each read
    is given, answers with `answer(context, start)` (its columns and end); `barrier`, if set, is met by
    every read before it answers (reads of one task run in threads)."""

    def __init__(
        self, monkeypatch: Any, modules: Iterable[Any], answer: Callable[[Any, Position], Any]
    ) -> None:
        self.calls: list[dict[str, Any]] = []
        self.barrier: threading.Barrier | None = None
        lock, recorder = threading.Lock(), self

        class Recorded:
            def __init__(self, source, context, start, expect, fail_on_data_loss, tip_ms) -> None:
                call = {"source": source, "context": context, "start": start, "expect": expect}
                with lock:
                    recorder.calls.append({**call, "fail": fail_on_data_loss, "tip_ms": tip_ms})
                self.context, self.start = context, start

            def run(self) -> Any:
                if recorder.barrier is not None:
                    recorder.barrier.wait()
                return answer(self.context, self.start)

        for module in modules:
            monkeypatch.setattr(module, "ShardRead", Recorded)
