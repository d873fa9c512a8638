"""The strict test mode's books (tests/support/service_rules.py): each rule refuses exactly the call
that breaks it, as Kinesis answers, and counts it."""

from __future__ import annotations

from tests.support.service_rules import ServiceRules


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_five_get_records_per_second_per_shard_then_throttled():
    clock = Clock()
    rules = ServiceRules(clock)
    for _call in range(5):
        assert rules.refusal("GetRecords", "shard-1", {}) is None
        clock.now += 0.01
    refused = rules.refusal("GetRecords", "shard-1", {})
    assert refused is not None and refused[1] == "ProvisionedThroughputExceededException"
    assert rules.refusal("GetRecords", "shard-2", {}) is None  # per shard
    clock.now += 1.0
    assert rules.refusal("GetRecords", "shard-1", {}) is None
    assert rules.violations == {"GetRecords over 5/s per shard": 1}


def test_two_mib_per_second_per_shard_over_five_seconds():
    clock = Clock()
    rules = ServiceRules(clock)
    assert rules.refusal("GetRecords", "s", {}) is None
    rules.served("GetRecords", "s", {}, 10 * 1024 * 1024 + 1)  # one big page is served...
    clock.now += 1.0
    assert rules.refusal("GetRecords", "s", {})[1] == "ProvisionedThroughputExceededException"  # ...then none
    clock.now += 4.1
    assert rules.refusal("GetRecords", "s", {}) is None


def test_a_page_over_ten_thousand_records_and_an_expired_iterator_are_refused():
    clock = Clock()
    rules = ServiceRules(clock, time_scale=60)  # an iterator lives 5 s here
    assert rules.refusal("GetRecords", "s", {"Limit": 10_001})[1] == "ValidationException"
    rules.served("GetShardIterator", "s", {"ShardIterator": "it-1"}, 0)
    clock.now += 4.0
    assert rules.refusal("GetRecords", "s", {"ShardIterator": "it-1"}) is None
    rules.served("GetRecords", "s", {"NextShardIterator": "it-2"}, 0)
    clock.now += 2.0
    assert rules.refusal("GetRecords", "s", {"ShardIterator": "it-1"})[1] == "ExpiredIteratorException"
    assert rules.refusal("GetRecords", "s", {"ShardIterator": "it-2"}) is None  # (a next iterator lives anew)


def test_control_plane_rates_per_stream_and_per_account():
    clock = Clock()
    rules = ServiceRules(clock)
    assert all(rules.refusal("DescribeStreamSummary", "", {}) is None for _n in range(20))
    assert rules.refusal("DescribeStreamSummary", "", {})[1] == "LimitExceededException"
    assert all(rules.refusal("ListShards", "orders", {}) is None for _n in range(100))
    assert rules.refusal("ListShards", "orders", {})[1] == "LimitExceededException"
    assert rules.refusal("ListShards", "clicks", {}) is None


def test_subscribe_rules_once_a_second_and_five_seconds_after_a_success():
    clock = Clock()
    rules = ServiceRules(clock)
    assert rules.subscribe_refusal("c", "s") is None
    rules.subscribe_succeeded("c", "s")
    clock.now += 0.5
    assert rules.subscribe_refusal("c", "s")[1] == "LimitExceededException"
    clock.now += 1.5
    assert rules.subscribe_refusal("c", "s")[1] == "ResourceInUseException"
    assert rules.subscribe_refusal("c", "other") is None
    clock.now += 3.5
    assert rules.subscribe_refusal("c", "s") is None
    assert sum(rules.violations.values()) == 2


def test_a_refused_subscribe_call_starts_no_five_second_wait():
    """A call the proxy passed but that was then refused (an injected fault, or the server's own
    ResourceInUse) opened no subscription: Kinesis would take a retry a second later. (The books once
    counted every call they passed as a success, and so blamed the connector for its retries.)"""
    clock = Clock()
    rules = ServiceRules(clock)
    assert rules.subscribe_refusal("c", "s") is None  # ...then refused downstream: no success
    clock.now += 1.2
    assert rules.subscribe_refusal("c", "s") is None
    rules.subscribe_succeeded("c", "s")
    clock.now += 1.2
    assert rules.subscribe_refusal("c", "s")[1] == "ResourceInUseException"
    assert dict(rules.violations) == {"SubscribeToShard within 5 s of a success": 1}


def test_a_broken_subscribe_rule_says_whose_calls_collided():
    """Two executors' agents on one shard: the books name the caller, the last call's and the last
    success's, so that a chaos run's log tells which processes broke a rule."""
    clock = Clock()
    rules = ServiceRules(clock)
    assert rules.subscribe_refusal("c", "s", "reader 11") is None
    rules.subscribe_succeeded("c", "s")
    clock.now += 2.0
    assert rules.subscribe_refusal("c", "s", "reader 22") is not None
    clock.now += 0.5
    assert rules.subscribe_refusal("c", "s", "reader 11") is not None
    assert rules.details == [
        "SubscribeToShard within 5 s of a success (another process before it: a collision): s by reader 22; "
        "last call 2.00 s before by reader 11, last success 2.00 s before by reader 11",
        "SubscribeToShard more than once a second (another process before it: a collision): s by reader 11; "
        "last call 0.50 s before by reader 22, last success 2.50 s before by reader 11",
    ]


def test_a_rule_broken_after_another_process_is_a_collision_after_its_own_a_violation():
    """Kinesis refuses the second of two processes' calls, and neither can know of the other (another
    executor's agent, a speculative attempt, a killed one's replacement): a collision, refused but not
    the reader's fault. After its own call or success the reader knows better: a violation (the chaos
    run of 2026-11-29, seed 9, run 4: 17 collisions under speculation and executor kills, no violation)."""
    clock = Clock()
    rules = ServiceRules(clock)
    assert rules.subscribe_refusal("c", "s", "reader 11") is None
    rules.subscribe_succeeded("c", "s")
    clock.now += 2.0
    assert rules.subscribe_refusal("c", "s", "reader 22")[1] == "ResourceInUseException"
    assert dict(rules.collisions) == {"SubscribeToShard within 5 s of a success": 1} and not rules.violations
    clock.now += 1.5
    assert rules.subscribe_refusal("c", "s", "reader 11")[1] == "ResourceInUseException"  # (its own success)
    assert dict(rules.violations) == {"SubscribeToShard within 5 s of a success": 1}
    clock.now += 0.5
    assert rules.subscribe_refusal("c", "s", "reader 11")[1] == "LimitExceededException"  # (its own call)
    assert sum(rules.violations.values()) == 2 and sum(rules.collisions.values()) == 1


def test_a_broken_rate_names_the_callers_of_its_second():
    clock = Clock()
    rules = ServiceRules(clock)
    for caller in ("reader 1", "reader 2", "reader 1", "planner 3", "reader 2"):
        assert rules.refusal("GetShardIterator", "s", {}, caller) is None
        clock.now += 0.1
    assert rules.refusal("GetShardIterator", "s", {}, "reader 4") is not None
    assert rules.details == [
        "GetShardIterator over 5/s per shard (other processes in the second: a collision): s by reader 4; "
        "the second's calls by reader 1, reader 2, reader 1, planner 3, reader 2"
    ]


def test_a_shards_rate_broken_only_by_two_processes_together_is_a_collision():
    """A speculative attempt reads the shard beside the first one (the chaos run of 2026-11-29, seed 9,
    run 7: 2 + 3 calls in a second by two readers): each keeps the rate, the service throttles the sum.
    One process alone over the rate is a violation."""
    clock = Clock()
    rules = ServiceRules(clock)
    for caller in ("reader 1", "reader 1", "reader 2", "reader 2", "reader 2"):
        assert rules.refusal("GetRecords", "s", {}, caller) is None
    assert rules.refusal("GetRecords", "s", {}, "reader 1")[1] == "ProvisionedThroughputExceededException"
    assert dict(rules.collisions) == {"GetRecords over 5/s per shard": 1} and not rules.violations
    clock.now += 1.0
    for _call in range(5):
        assert rules.refusal("GetRecords", "t", {}, "reader 1") is None
    assert rules.refusal("GetRecords", "t", {}, "reader 1") is not None
    assert dict(rules.violations) == {"GetRecords over 5/s per shard": 1}
    assert rules.refusal("ListShards", "orders", {}, "planner 9") is None  # (stream rates: never collisions)
    clock.now += 1.0
    for caller in ("planner 9", "planner 9", "planner 9", "reader 1", "reader 1"):
        assert rules.refusal("GetRecords", "u", {}, caller) is None
    assert rules.refusal("GetRecords", "u", {}, "reader 1") is not None  # (the looks pace with the reads)
    assert dict(rules.violations) == {"GetRecords over 5/s per shard": 2}
