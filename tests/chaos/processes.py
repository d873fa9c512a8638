"""The moving parts of a chaos run around the query: the producer, the processes it may kill, and the
ground truth read straight from the server."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import boto3

from tests.chaos.plan import KEYS


class Producer(threading.Thread):
    """Puts records 'c-<n>' with keys k<n % KEYS> at a steady rate; keeps what Kinesis acknowledged."""

    def __init__(self, endpoint: str, stream: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.client = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        self.stream, self.rate = stream, rate
        self.acknowledged: list[str] = []
        self.running = threading.Event()
        self.running.set()
        self.done = threading.Event()
        self.next = 0

    def run(self) -> None:
        chunk = max(1, self.rate // 5)
        for _tick in range(1_000_000):  # bounded; ended by `done`
            if self.done.is_set():
                return
            if not self.running.is_set():
                time.sleep(0.05)
                continue
            numbers = range(self.next, self.next + chunk)
            records = [{"Data": f"c-{n}".encode(), "PartitionKey": f"k{n % KEYS}"} for n in numbers]
            try:
                response = self.client.put_records(StreamName=self.stream, Records=records)
            except Exception:
                time.sleep(0.2)
                continue
            if response.get("FailedRecordCount"):
                # Only a prefix is safe to count: a later record of a key after a failed one would be out
                # of order. The local servers never reject, so this is a guard, not a path.
                raise RuntimeError("the local server rejected records")
            self.acknowledged += [f"c-{n}" for n in numbers]
            self.next += chunk
            time.sleep(0.2)


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


def everything_in(kin: Any, stream: str) -> list[tuple[str, str, str]]:
    """Every record the server holds in the stream (closed shards included), as (shard, sequence
    number, data): the ground truth."""
    out = []
    shards = kin.list_shards(StreamName=stream)["Shards"]
    for shard in shards:
        iterator = kin.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _call in range(10_000):
            response = kin.get_records(ShardIterator=iterator, Limit=10_000)
            out += [(shard["ShardId"], r["SequenceNumber"], r["Data"].decode()) for r in response["Records"]]
            iterator = response.get("NextShardIterator")
            if iterator is None or (not response["Records"] and response.get("MillisBehindLatest", 0) == 0):
                break
    return out
