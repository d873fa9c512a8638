"""The moving parts of a chaos run around the query: the producer, the processes it may kill, and the
ground truth read straight from the server."""

from __future__ import annotations

import base64
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import boto3
from aws_kinesis_agg.aggregator import RecordAggregator
from aws_kinesis_agg.deaggregator import iter_deaggregate_records

from tests.chaos.plan import KEYS
from tests.helpers import kcl_hash

KPL_MAGIC = b"\xf3\x89\x9a\xc2"
RESEND_S = 120.0  # how long the producer keeps re-sending a misplaced aggregate's user records


class Producer(threading.Thread):
    """Puts records 'c-<n>' with keys k<n % KEYS> at a steady rate; keeps what Kinesis acknowledged.

    With `misplace_every` n, every nth chunk goes as the KPL sends one with a stale shard map: one
    aggregate (built by aws-kinesis-agg) put with a random explicit hash key, so that it lands in a
    shard whose hash range holds only some of its user records; the others are then put again, plain,
    to the shards they belong to, as the KPL re-sends them. A reader that reads as the KCL reads drops
    the misplaced copies: each record once."""

    def __init__(self, endpoint: str, stream: str, rate: int, misplace_every: int = 0, seed: int = 0) -> None:
        super().__init__(daemon=True)
        self.client = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        self.stream, self.rate, self.misplace_every = stream, rate, misplace_every
        self.rng = random.Random(seed)
        self.acknowledged: list[str] = []
        self.running = threading.Event()
        self.running.set()
        self.done = threading.Event()
        self.next = 0
        self.chunks = 0
        self.misplaced = 0  # user records put into a shard whose range does not hold them (re-sent)
        self.ranges: dict[str, tuple[int, int]] = {}  # shard -> its hash key range (never changes)

    def run(self) -> None:
        chunk = max(1, self.rate // 5)
        for _tick in range(1_000_000):  # bounded; ended by `done`
            if self.done.is_set():
                return
            if not self.running.is_set():
                time.sleep(0.05)
                continue
            numbers = range(self.next, self.next + chunk)
            aggregate = bool(self.misplace_every) and self.chunks % self.misplace_every == 0
            try:
                if aggregate:
                    self._put_misplaced(numbers)
                else:
                    self._put(numbers)
            except RuntimeError:
                raise  # (the guards below: a rejected record or a re-send that never went through)
            except Exception:
                time.sleep(0.2)
                continue
            self.acknowledged += [f"c-{n}" for n in numbers]
            self.next += chunk
            self.chunks += 1
            time.sleep(0.2)

    def _put(self, numbers: range | list[int]) -> None:
        records = [{"Data": f"c-{n}".encode(), "PartitionKey": f"k{n % KEYS}"} for n in numbers]
        response = self.client.put_records(StreamName=self.stream, Records=records)
        if response.get("FailedRecordCount"):
            # Only a prefix is safe to count: a later record of a key after a failed one would be out
            # of order. The local servers never reject, so this is a guard, not a path.
            raise RuntimeError("the local server rejected records")

    def _put_misplaced(self, numbers: range) -> None:
        aggregator = RecordAggregator()
        for n in numbers:
            aggregator.add_user_record(f"k{n % KEYS}", f"c-{n}".encode())
        key, _hash_key, blob = aggregator.clear_and_get().get_contents()
        landed = self.client.put_record(
            StreamName=self.stream,
            Data=blob,
            PartitionKey=key,
            ExplicitHashKey=str(self.rng.randrange(2**128)),
        )["ShardId"]
        low, high = self._range(landed)
        resend = [n for n in numbers if not low <= kcl_hash(f"k{n % KEYS}") <= high]
        self.misplaced += len(resend)
        # The aggregate is written: its misplaced records must follow before anything else of theirs
        # (per-key order), whatever the server does meanwhile (a restart: bounded by RESEND_S).
        deadline = time.monotonic() + RESEND_S
        while resend:
            try:
                self._put(resend)
                return
            except RuntimeError:
                raise
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError("could not re-send a misplaced aggregate's records") from None
                time.sleep(0.2)

    def _range(self, shard: str) -> tuple[int, int]:
        if shard not in self.ranges:
            for listed in self.client.list_shards(StreamName=self.stream)["Shards"]:
                hash_range = listed["HashKeyRange"]
                self.ranges[listed["ShardId"]] = (
                    int(hash_range["StartingHashKey"]),
                    int(hash_range["EndingHashKey"]),
                )
        return self.ranges[shard]


def session_pids(session: int) -> list[tuple[int, str]]:
    """(pid, command line) of live processes in a session (the driver's, started with its own)."""
    return [(pid, command) for pid, command, sid in processes() if sid == session]


def all_pids() -> list[tuple[int, str]]:
    return [(pid, command) for pid, command, _sid in processes()]


def processes() -> list[tuple[int, str, int]]:
    """(pid, command line, session) of live processes."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            sid = int(stat.rsplit(")", 1)[1].split()[3])  # after the name: state ppid pgrp session
            command = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(entry), command.strip(), sid))
    return out


def everything_in(kin: Any, stream: str, dropped: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Every record the server holds in the stream (closed shards included), as (shard, sequence
    number, data): the ground truth, read as the KCL reads. A KPL aggregate is opened (aws-kinesis-agg)
    and a user record whose effective hash key lies outside its shard's range is left out (appended to
    `dropped`): the producer re-sent it to the shard it belongs to."""
    out = []
    shards = kin.list_shards(StreamName=stream)["Shards"]
    for shard in shards:
        hash_range = shard["HashKeyRange"]
        low, high = int(hash_range["StartingHashKey"]), int(hash_range["EndingHashKey"])
        iterator = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _call in range(10_000):
            response = kin.get_records(ShardIterator=iterator, Limit=10_000)
            for record in response["Records"]:
                if not record["Data"].startswith(KPL_MAGIC):
                    out.append((shard["ShardId"], record["SequenceNumber"], record["Data"].decode()))
                    continue
                for user in iter_deaggregate_records([record], data_format="Boto3"):
                    fields = user["kinesis"]
                    data = base64.b64decode(fields["data"]).decode()
                    explicit = fields.get("explicitHashKey")
                    hash_key = int(explicit) if explicit else kcl_hash(fields["partitionKey"])
                    if low <= hash_key <= high:
                        out.append((shard["ShardId"], record["SequenceNumber"], data))
                    elif dropped is not None:
                        dropped.append(data)
            iterator = response.get("NextShardIterator")
            if iterator is None or (not response["Records"] and response.get("MillisBehindLatest", 0) == 0):
                break
    return out
