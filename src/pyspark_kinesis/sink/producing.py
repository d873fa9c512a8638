"""Executor-side writing: PutRecords batched to the service limits, concurrent, retried, ordered.

Records go to `concurrency` lanes, each sending one PutRecords call at a time. A call takes the
lane's pending records in order up to 500 records / 5 MiB. Records that fail inside a successful
call (FailedRecordCount: throttling, internal errors) stay pending, in their place, and are retried
after a backoff with full jitter (exponential while calls make no progress), until
`max_retry_time_ms` has passed; then the task
fails with a message naming the error and the count: nothing is dropped silently.

With `preserve_order`, all records of a (stream, partition key) go to one lane, and a call carries
at most one record per key, and only the oldest pending one: a later record of a key is sent only
after every earlier one succeeded, so none overtakes a retried one.

An aggregate that lands in another shard than it was packed for (`packing.Aggregator`: the shard map
went stale) holds back what follows it in order: the lane sends nothing more of its order key in this
flush, and the aggregator packs those entries again with a fresh map, after the user records the
landed shard does not hold. Sent on, they would reach readers before those re-sent records.
"""

from __future__ import annotations

import random
import re
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..aws.kinesis import put_records
from ..errors import SinkWriteError
from .options import SinkConfig

MAX_RECORD_BYTES = 1024 * 1024  # data + partition key
MAX_KEY_CHARS = 256
BASE_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0
MAX_PUT_CALLS = (
    10_000_000  # one lane's PutRecords calls per flush at most (maxRetryTimeMs ends it far sooner)
)


@dataclass
class Entry:
    stream: str
    data: bytes
    partition_key: str
    hash_key: str | None
    row: int  # position in the task's input, for error messages
    # What preserveOrder keeps in order: the partition key, or for aggregated records (many keys in
    # one) the shard they go to, so no aggregate overtakes an earlier one of its shard.
    order: str | None = None
    # An aggregate's: the shard it was packed for, and its user records (partition key, explicit hash
    # key, data), re-sent where they belong when it lands elsewhere (see `packing.Aggregator`).
    shard: str | None = None
    members: tuple[tuple[str, str | None, bytes], ...] = ()

    @property
    def order_key(self) -> str:
        if self.order is not None:
            return self.order
        return self.partition_key or f"\0row {self.row}"  # (no key, AUTO distribution: no order to keep)

    @property
    def size(self) -> int:
        return len(self.data) + len(self.partition_key.encode())

    def request(self) -> dict:
        item: dict = {"Data": self.data}
        if self.partition_key:  # (left out only on streams with AUTO record distribution)
            item["PartitionKey"] = self.partition_key
        if self.hash_key is not None:
            item["ExplicitHashKey"] = self.hash_key
        return item


# The service's own pattern for ExplicitHashKey: a leading zero or a digit of another script (which
# str.isdigit and int() accept) would make it refuse the whole PutRecords call, not this record.
_HASH_KEY = re.compile(r"0|[1-9][0-9]{0,38}")


def _hash_key_ok(text: str) -> bool:
    return _HASH_KEY.fullmatch(text) is not None and int(text) < 2**128


def invalid_reason(
    data: bytes | None,
    key: str | None,
    hash_key: str | None,
    max_record_bytes: int = MAX_RECORD_BYTES,
    keyless: bool = False,
) -> str | None:
    """Why Kinesis would refuse this record, or None. `max_record_bytes`: the stream's own limit
    (MaxRecordSizeInKiB: 1 MiB unless the stream was raised to up to 10 MiB); `keyless`: the stream
    places records itself (AUTO record distribution), where a record may have no partition key."""
    if data is None:
        return "data is null"
    if key is None and keyless:
        key = ""
    if key is None or (not key and not keyless):
        return "partitionKey is empty"
    if len(key) > MAX_KEY_CHARS:
        return f"partitionKey has {len(key)} characters (at most {MAX_KEY_CHARS})"
    size = len(data) + len(key.encode())
    if size > max_record_bytes:
        return (
            f"record is {size} bytes with its partition key (the stream takes at most {max_record_bytes}; "
            "UpdateMaxRecordSize raises a stream's limit up to 10 MiB)"
        )
    if hash_key is not None and not _hash_key_ok(hash_key):
        return "explicitHashKey is not a decimal number below 2^128 (ASCII digits, no leading zero)"
    return None


@dataclass
class WriteStats:
    records: int = 0
    bytes: int = 0
    calls: int = 0
    retried: int = 0


class Lane:
    """One sender: a FIFO of pending records, one call in flight at a time."""

    def __init__(self, config: SinkConfig, stats: WriteStats, lock: threading.Lock) -> None:
        self.config = config
        self.pending: list[Entry] = []
        self.stats = stats
        self.lock = lock
        self.misplaced: list[tuple[Entry, str]] = []  # aggregates written, and the shard each landed in
        self.held: set[str] = set()  # order keys held back after a misplaced aggregate (this flush)

    def _next_call(self) -> tuple[str, list[int]]:
        """Indexes of pending records for the next call: one stream per call, within the limits."""
        stream = next(e.stream for e in self.pending if e.order_key not in self.held)
        chosen: list[int] = []
        size = 0
        seen_keys: set[str] = set(self.held)
        for index, entry in enumerate(self.pending):
            if entry.order_key in self.held:
                continue
            if entry.stream != stream:
                if self.config.preserve_order:
                    seen_keys.add(entry.order_key)  # nothing later of this key may pass it
                continue
            if self.config.preserve_order:
                if entry.order_key in seen_keys:
                    continue
                seen_keys.add(entry.order_key)
            if chosen and (
                len(chosen) >= self.config.max_records_per_request
                or size + entry.size > self.config.max_bytes_per_request
            ):
                break
            chosen.append(index)
            size += entry.size
        return stream, chosen

    def drain(self, deadline: float) -> None:
        attempt = 0
        last_error = ""
        for _call in range(MAX_PUT_CALLS):  # each round sends or sleeps; the deadline ends it far sooner
            if all(entry.order_key in self.held for entry in self.pending):
                return  # (what is left is held back for the aggregator: `take_held`)
            stream, chosen = self._next_call()
            settings = self.config.settings_for(stream)
            results = put_records(settings, stream, [self.pending[i].request() for i in chosen])
            failed = {i for i, result in zip(chosen, results, strict=True) if "ErrorCode" in result}
            with self.lock:
                self.stats.calls += 1
                done = [self.pending[i] for i in chosen if i not in failed]
                self.stats.records += len(done)
                self.stats.bytes += sum(e.size for e in done)
                self.stats.retried += len(failed)
            for index, result in zip(chosen, results, strict=True):
                if "ErrorCode" in result:
                    last_error = f"{result['ErrorCode']}: {result.get('ErrorMessage', '')}"
                    continue
                entry, landed = self.pending[index], result.get("ShardId")
                if entry.shard is not None and landed and landed != entry.shard:
                    self.misplaced.append((entry, landed))
                    self.held.add(entry.order_key)
            sent = set(chosen) - failed
            self.pending = [e for i, e in enumerate(self.pending) if i not in sent]
            if not failed:
                attempt = 0
                continue
            if time.monotonic() > deadline:
                raise SinkWriteError(
                    f"{len(self.pending)} records could not be written to Kinesis stream '{stream}' within "
                    f"maxRetryTimeMs={self.config.max_retry_time_ms} (last error {last_error}). Nothing was "
                    "dropped: the task fails and Spark retries it. Raise maxRetryTimeMs or the stream's capacity."
                )
            # Escalate only while calls make no progress at all; a call that got some records in
            # waits one short jittered step, so a steady trickle of throttling does not stall the lane.
            attempt = attempt + 1 if len(failed) == len(chosen) else 0
            time.sleep(random.uniform(0, min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2**attempt)))
        raise SinkWriteError(f"a write lane made {MAX_PUT_CALLS} PutRecords calls without finishing: a bug")


class Producer:
    """Writes a task's records. `add` buffers; `flush` sends everything buffered and waits."""

    def __init__(
        self, config: SinkConfig, buffer_records: int = 20_000, buffer_bytes: int = 64 * 1024 * 1024
    ) -> None:
        self.config = config
        self.stats = WriteStats()
        self._lock = threading.Lock()
        self.lanes = [Lane(config, self.stats, self._lock) for _ in range(config.concurrency)]
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency)
        self._buffered = 0
        self._buffered_bytes = 0
        self._next_lane = 0
        self.buffer_records = buffer_records
        self.buffer_bytes = buffer_bytes
        # `add` flushes a full buffer itself, unless an aggregator in front decides when (it must mend
        # misplaced aggregates after every flush: `packing.Aggregator`)
        self.auto_flush = True

    @property
    def full(self) -> bool:
        """The buffer holds as many records or bytes as it may before they are written."""
        return self._buffered >= self.buffer_records or self._buffered_bytes >= self.buffer_bytes

    def add(self, entry: Entry) -> None:
        if self.config.preserve_order:
            lane = zlib.crc32(f"{entry.stream}\0{entry.order_key}".encode()) % len(self.lanes)
        else:
            # Round-robin in runs of a call's size, so each lane's calls fill up.
            lane = (self._buffered // self.config.max_records_per_request) % len(self.lanes)
        self.lanes[lane].pending.append(entry)
        self._buffered += 1
        self._buffered_bytes += entry.size
        if self.auto_flush and self.full:
            self.flush()

    def flush(self) -> None:
        deadline = time.monotonic() + self.config.max_retry_time_ms / 1000.0
        futures = [self._pool.submit(lane.drain, deadline) for lane in self.lanes if lane.pending]
        errors = []
        for future in futures:
            try:
                future.result()
            except Exception as exc:  # every lane finishes before the first error is raised
                errors.append(exc)
        self._buffered = self._buffered_bytes = 0  # (what is held back is the aggregator's: `take_held`)
        if errors:
            raise errors[0]

    def take_misplaced(self) -> list[tuple[Entry, str]]:
        """Aggregates the last flush wrote into another shard than the one they were packed for."""
        taken = [item for lane in self.lanes for item in lane.misplaced]
        for lane in self.lanes:
            lane.misplaced = []
        return taken

    def take_held(self) -> list[Entry]:
        """What the last flush held back behind misplaced aggregates, in order (see the module
        docstring): the caller packs it again. Nothing stays pending."""
        taken = [entry for lane in self.lanes for entry in lane.pending]
        for lane in self.lanes:
            lane.pending, lane.held = [], set()
        return taken

    def close(self) -> None:
        self._pool.shutdown(wait=True)
