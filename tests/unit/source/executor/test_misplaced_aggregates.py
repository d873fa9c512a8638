"""KPL aggregates in the wrong shard: right after a reshard a KPL producer's stale shard map may put an
aggregate into a shard whose HashKeyRange does not hold some of its user records (and re-sends those to
the right shard). The read drops them, as the KCL does, on a first attempt and on a replay alike, and
counts them. The aggregates are built by aws-kinesis-agg and the effective hash keys computed here as
the KCL computes them (explicit hash key, else the MD5 of the partition key as a big-endian number)."""

from __future__ import annotations

import hashlib
import random

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.executor.cutting import BatchCut, ShardLimits

STREAM, KEY = "orders", "arn:aws:kinesis:us-east-1:1:stream/orders"
HALF = 2**127
LOW_HALF = (0, HALF - 1)  # the shard a split left with the lower half of the keys


def kcl_hash_key(partition_key: str, explicit: str | None) -> int:
    if explicit is not None:
        return int(explicit)
    return int(hashlib.md5(partition_key.encode()).hexdigest(), 16)


def aggregates(rng: random.Random, count: int) -> tuple[Records, list[tuple[str, int, str, bytes]]]:
    """`count` aggregates of 1-6 user records each, keys and explicit hash keys anywhere in the key space;
    returns the response and every user record as (seq, sub, partition key, payload) with its hash key."""
    seqs, keys, blobs, users = [], [], [], []
    for index in range(count):
        aggregator = RecordAggregator()
        members = []
        for sub in range(rng.randrange(1, 7)):
            key = f"key-{rng.randrange(10_000)}"
            explicit = str(rng.randrange(2**128)) if rng.random() < 0.3 else None
            payload = f"{index}.{sub}".encode()
            aggregator.add_user_record(key, payload, explicit)
            members.append((key, explicit, payload))
        pk, _ehk, blob = aggregator.clear_and_get().get_contents()
        seq = str(1000 + 10 * index)
        seqs.append(seq)
        keys.append(pk)
        blobs.append(blob)
        users += [(seq, sub, key, explicit, payload) for sub, (key, explicit, payload) in enumerate(members)]
    records = Records.from_lists(
        seqs=seqs, keys=keys, data=blobs, arrivals=[1_700_000_000.0 + i for i in range(count)]
    )
    return records, users


def read(records: Records, hash_range, until: Position | None = None, max_records: int = -1) -> BatchCut:
    cut = BatchCut(
        STREAM,
        KEY,
        "shardId-1",
        Position.trim_horizon(),
        ShardLimits(max_records, -1, hash_range=hash_range),
        until,
    )
    cut.take(records, Position.trim_horizon())
    return cut


@pytest.mark.parametrize("seed", range(20))
def test_user_records_outside_the_shards_range_are_dropped_and_counted(seed):
    rng = random.Random(seed)
    records, users = aggregates(rng, rng.randrange(1, 12))
    cut = read(records, LOW_HALF)
    kept = [p for _s, _b, k, e, p in users if LOW_HALF[0] <= kcl_hash_key(k, e) <= LOW_HALF[1]]
    assert cut.cols.payloads().to_pylist() == kept
    assert cut.misplaced == len(users) - len(kept)
    # The read moves past the dropped ones too: the next batch starts after the last user record.
    last_seq, last_sub = users[-1][0], users[-1][1]
    assert cut.resume in (Position.after(last_seq), Position.inside(last_seq, last_sub))


@pytest.mark.parametrize("seed", range(10))
def test_a_replay_to_the_first_attempts_end_drops_the_same_records(seed):
    rng = random.Random(100 + seed)
    records, _users = aggregates(rng, 10)
    first = read(records, LOW_HALF, max_records=rng.randrange(1, 15))
    replay = read(records, LOW_HALF, until=first.resume)
    assert replay.cols.payloads().to_pylist() == first.cols.payloads().to_pylist()
    assert replay.misplaced == first.misplaced


def test_without_a_known_range_and_for_plain_records_nothing_is_dropped():
    rng = random.Random(3)
    records, users = aggregates(rng, 8)
    assert len(read(records, None).cols) == len(users)
    # A plain record whose partition key hashes outside the range was put there by Kinesis itself (an
    # explicit hash key at put time): it is the shard's.
    outside = next(f"k{i}" for i in range(1000) if kcl_hash_key(f"k{i}", None) >= HALF)
    plain = Records.from_lists(seqs=["7"], keys=[outside], data=[b"plain"], arrivals=[1_700_000_000.0])
    cut = BatchCut(
        STREAM, KEY, "shardId-1", Position.trim_horizon(), ShardLimits(-1, -1, hash_range=LOW_HALF), None
    )
    cut._take_each(plain, Position.trim_horizon())
    assert cut.cols.payloads().to_pylist() == [b"plain"] and cut.misplaced == 0


def test_each_task_gets_its_shards_ranges_also_in_a_restarted_run_that_replays_first():
    """The ranges reach the tasks from what the listing said when the batch was planned (its marker
    keeps it): a restarted run asked to replay its last batch before planning anything reads them there."""
    from pyspark_kinesis.source.driver.task_plans import plan_tasks
    from tests.unit.planner_fakes import arn, one_stream

    h = one_stream()
    planner = h.planner()
    offset = planner.next_offset(planner.initial_offset(), None, None)
    want = {"s0": (0, HALF - 1), "s1": (HALF, 2**128 - 1)}
    for run in (planner, h.planner()):  # the planning run, and a restarted one
        run.check_logged_batch(offset)
        plans = plan_tasks(offset, h.config, listed=run.listed(offset))
        got = {piece.shard_id: piece.hash_range for plan in plans for piece in plan.shards}
        assert got == want and all(piece.stream == arn("a") for plan in plans for piece in plan.shards)


# Explicit hash keys no producer's library would write, but anyone who may put records can: digits of other
# scripts and superscripts (`str.isdigit` takes them, `int()` refuses some), keys past 2^128, and one past
# Python's digit limit for `int()` (4,300 digits). None is a number in the key space.
HOSTILE_HASH_KEYS = [
    "²",
    "١٢٣",
    "𝟗",
    "٣" * 50,
    "9" * 5000,
    str(2**128),
    "3" * 40,
    " 12",
    "1_000",
    "-5",
    "0x10",
]


@pytest.mark.parametrize("explicit", HOSTILE_HASH_KEYS, ids=range(len(HOSTILE_HASH_KEYS)))
def test_a_user_record_whose_explicit_hash_key_is_no_number_is_kept_and_the_read_goes_on(explicit):
    """Such a record is placed by nothing, so nothing says it is misplaced: it is read (issue #61: before,
    `'²'.isdigit()` let `int('²')` raise, and every attempt and replay of the shard failed with a raw
    ValueError)."""
    aggregator = RecordAggregator()
    aggregator.add_user_record("k-low", b"before", "5")
    aggregator.add_user_record("k-hostile", b"hostile", explicit)
    aggregator.add_user_record("k-high", b"after", str(HALF + 5))
    pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    records = Records.from_lists(seqs=["1000"], keys=[pk], data=[blob], arrivals=[1_700_000_000.0])
    cut = read(records, LOW_HALF)
    assert cut.cols.payloads().to_pylist() == [b"before", b"hostile"]
    assert cut.misplaced == 1
    replay = read(records, LOW_HALF, until=Position.after("1000"))
    assert replay.cols.payloads().to_pylist() == [b"before", b"hostile"]


def test_the_hash_key_rule_reads_ascii_decimal_numbers_in_the_key_space_only():
    from pyspark_kinesis.model import effective_hash_key, hash_key_value

    assert [hash_key_value(text) for text in HOSTILE_HASH_KEYS] == [None] * len(HOSTILE_HASH_KEYS)
    assert hash_key_value("0") == 0
    assert hash_key_value(str(2**128 - 1)) == 2**128 - 1
    # (leading zeros: a number all the same, as the KCL's BigInteger reads it)
    assert hash_key_value("007") == 7
    assert effective_hash_key("a", "42") == 42
    assert effective_hash_key("a", None) == kcl_hash_key("a", None)
