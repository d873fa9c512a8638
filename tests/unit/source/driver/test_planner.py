"""The planner's decisions, batch by batch, without Spark or a server (fakes in planner_fakes.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pyspark_kinesis.aws.tip_look import TipAnswer
from pyspark_kinesis.errors import (
    CheckpointMismatchError,
    DataLossError,
    StreamAccessError,
    StreamRecreatedError,
)
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver.task_plans import plan_tasks
from pyspark_kinesis.source.state.batch_log import BatchEndLog, batch_folder
from pyspark_kinesis.source.state.offsets import SourceOffset, TaskEnd
from tests.unit.planner_fakes import (
    CREATED,
    Clock,
    FakeKinesis,
    Harness,
    arn,
    config,
    config_with_created,
    logged,
    one_stream,
    read,
    shard,
)

A = arn("a")


def test_first_batch_reads_every_shard_from_the_starting_position():
    h = one_stream()
    planner = h.planner()
    start = planner.initial_offset()
    assert planner.initial_offset() is start  # asked twice, answered once
    first = planner.next_offset(start, None, None)
    assert first.batch == 0
    assert sorted(first.tasks().values()) == [[(A, "s0")], [(A, "s1")]]
    assert {s.position for s in first.streams[A].values()} == {Position.trim_horizon()}


def test_next_batch_starts_where_the_last_one_ended():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    second = planner.next_offset(first, None, None)
    assert second.batch == 1
    assert {s.position for s in second.streams[A].values()} == {Position.after("1010")}


def test_idle_shards_wait_for_the_poll_interval():
    h = one_stream(idlePollIntervalMs="500")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    at_tip = {(A, sid): read(Position.trim_horizon(), 0, tip=True, at_ms=h.clock.now) for sid in ("s0", "s1")}
    h.run(first, at_tip)
    h.clock.now += 100
    assert planner.next_offset(first, None, None) is first  # both idle, read 100 ms ago: no batch
    assert h.kinesis.looks == []  # nor a look
    h.kinesis.tips = {sid: TipAnswer(True) for sid in ("s0", "s1")}  # records arrived since
    h.clock.now += 400
    again = planner.next_offset(first, None, None)
    assert again.batch == 1 and sorted(r for refs in again.tasks().values() for r in refs) == [
        (A, "s0"),
        (A, "s1"),
    ]


@pytest.mark.parametrize("mode", ["polling", "efo"])
def test_an_idle_stream_plans_no_batch_and_looks_once_per_interval(mode):
    """Idle shards are looked at, at most once per interval each, from an iterator kept at their
    position; no batch is planned until a look finds something, and then only for that shard."""
    h = one_stream(idlePollIntervalMs="500", consumerType=mode)
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    at_tip = {(A, sid): read(Position.trim_horizon(), 0, tip=True, at_ms=h.clock.now) for sid in ("s0", "s1")}
    h.run(first, at_tip)
    for _trigger in range(30):  # 3 s of triggers every 100 ms: 6 intervals
        h.clock.now += 100
        assert planner.next_offset(first, None, None) is first
    assert len(h.kinesis.looks) == 12  # 6 looks per shard: one per 500 ms
    by_shard = [look for look in h.kinesis.looks if look[1] == "s0"]
    assert by_shard[0][3] is None  # the first look obtains an iterator...
    assert all(later[3] is not None for later in by_shard[1:])  # ...later ones go on from the last
    assert {look[2] for look in h.kinesis.looks} == {Position.trim_horizon()}
    h.kinesis.tips = {"s1": TipAnswer(True)}  # a record arrived on s1 only
    h.clock.now += 500
    nxt = planner.next_offset(first, None, None)
    assert nxt.batch == 1 and list(nxt.tasks().values()) == [[(A, "s1")]]


def test_idle_shards_are_looked_at_in_shard_order_whatever_the_process_hash_seed():
    """Looks follow the shard order, not a set's (which changes with each process's hash seed): the
    driver's calls are the same in every run of the same history, which a replayed simulation needs
    (found when the DynamoDB Streams simulation's figures changed from one pytest process to the next)."""
    sids = [f"s{n:02d}" for n in range(24)]
    h = Harness(config("a"), FakeKinesis({A: [shard(sid) for sid in sids]}), Clock())
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first, {(A, sid): read(Position.trim_horizon(), 0, tip=True, at_ms=h.clock.now) for sid in sids})
    h.clock.now += 1_000
    assert planner.next_offset(first, None, None) is first
    assert [look[1] for look in h.kinesis.looks] == sids


def test_an_idle_shard_the_listing_shows_closed_is_read_to_its_end_whatever_a_look_says():
    """Found by the simulation (moto's flavor): a shard idle at its tip when a split closed it was
    only looked at, and moto answers a closed shard's end with "nothing new" for ever; the shard idled
    until it aged out and the query reported a loss. Its end must be read."""
    h = one_stream(idlePollIntervalMs="500", shardDiscoveryIntervalMs="1000")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    at_tip = {(A, sid): read(Position.trim_horizon(), 0, tip=True, at_ms=h.clock.now) for sid in ("s0", "s1")}
    h.run(first, at_tip)
    h.clock.now += 600
    assert planner.next_offset(first, None, None) is first  # both idle, looks find nothing
    h.kinesis.shards[A] = [
        shard("s0", high=2**127 - 1, closed=True),
        shard("s1", low=2**127),
        shard("c", "s0"),
    ]
    h.clock.now += 1_000  # (the listing's interval: s0 shows closed, its child c waits for it)
    looks = len(h.kinesis.looks)
    h.kinesis.tips = {"s0": TipAnswer(True, first_ms=h.clock.now - 50)}  # (records came before it closed)
    nxt = planner.next_offset(first, None, None)
    assert nxt.batch == 1 and [ref for refs in nxt.tasks().values() for ref in refs] == [(A, "s0")]
    assert nxt.state((A, "s0")).closed
    # Looked at all the same, for the tip (found by the simulation: a shard that closed while the query
    # was down waited for a batch's budget past its old tip's retention, and was called a loss).
    assert [look[1] for look in h.kinesis.looks[looks:]] == ["s0", "s1"]
    assert nxt.state((A, "s0")).tip_ms == h.clock.now - 50


def test_a_look_that_tells_nothing_or_fails_lets_the_shard_be_read():
    h = one_stream(idlePollIntervalMs="500")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(
        first,
        {(A, sid): read(Position.trim_horizon(), 0, tip=True, at_ms=h.clock.now) for sid in ("s0", "s1")},
    )
    h.kinesis.tips = {
        "s0": TipAnswer(None),
        "s1": TipAnswer(True, failure="InvalidArgumentException: aged out"),
    }
    h.clock.now += 500
    nxt = planner.next_offset(first, None, None)
    assert sorted(r for refs in nxt.tasks().values() for r in refs) == [(A, "s0"), (A, "s1")]


def test_credentials_that_may_not_look_turn_looks_off_for_the_stream(caplog):
    h = one_stream(idlePollIntervalMs="500")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(
        first,
        {(A, sid): read(Position.trim_horizon(), 0, tip=True, at_ms=h.clock.now) for sid in ("s0", "s1")},
    )
    h.kinesis.tips = {
        sid: TipAnswer(True, failure="AccessDeniedException: no", denied=True) for sid in ("s0", "s1")
    }
    h.clock.now += 500
    assert planner.next_offset(first, None, None).batch == 1  # read, as before looks
    looks = len(h.kinesis.looks)
    h.clock.now += 500
    assert planner.next_offset(first, None, None).batch == 1
    assert len(h.kinesis.looks) == looks  # no more looks on that stream
    assert sum("may not call GetShardIterator/GetRecords" in r.message for r in caplog.records) == 1


def test_listing_waits_for_the_discovery_interval():
    h = one_stream(shardDiscoveryIntervalMs="10000", idlePollIntervalMs="1000000")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert h.kinesis.list_calls[A] == 1
    h.run(
        first, {(A, s): read(Position.trim_horizon(), 0, tip=True, at_ms=h.clock.now) for s in ("s0", "s1")}
    )
    for _ in range(50):  # triggers within the interval: no listing
        h.clock.now += 100
        assert planner.next_offset(first, None, None) is first
    assert h.kinesis.list_calls[A] == 1
    h.clock.now += 5_001
    planner.next_offset(first, None, None)
    assert h.kinesis.list_calls[A] == 2


def test_available_now_ends_when_every_shard_is_drained():
    h = one_stream()
    planner = h.planner()
    planner.read_up_to(h.clock.now)
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert first.cutoff_ms == h.clock.now
    # s0 reached the tip; s1 was cut by a limit and must be read again.
    h.run(first, {(A, "s0"): read(Position.trim_horizon(), 5, tip=True)})
    second = planner.next_offset(first, None, None)
    assert list(second.tasks().values()) == [[(A, "s1")]]
    h.run(second, {(A, "s1"): read(Position.after("1010"), 3, tip=True, end=Position.after("2000"))})
    assert planner.next_offset(second, None, None) is second  # drained: the run ends


@pytest.mark.parametrize("last_read", [0, 3])
def test_an_available_now_run_looks_at_shards_left_at_the_tip_and_plans_no_batch_without_news(last_read):
    """A run that starts where the last one left every shard at the tip (its last read took nothing, or
    took records and reached the tip) looks at each shard once, however recently it was read, and reads
    only those a look found something in: a run with nothing new plans no batch at all."""
    h = one_stream(idlePollIntervalMs="60000")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    tip = {(A, s): read(Position.trim_horizon(), 4, tip=True, at_ms=h.clock.now) for s in ("s0", "s1")}
    h.run(first, tip)
    second = planner.next_offset(first, None, None)
    h.run(second, {ref: read(tip[ref].reached, last_read, tip=True, at_ms=h.clock.now) for ref in tip})
    for news in ({}, {"s1": TipAnswer(True)}):  # two runs, 100 ms after the shards were read
        run = h.planner()
        h.clock.now += 100
        run.cutoff_ms = h.clock.now
        looks = len(h.kinesis.looks)
        h.kinesis.tips = news
        planned = run.next_offset(logged(second), None, None)
        assert len(h.kinesis.looks) - looks == 2  # both idle shards looked at, within the interval
        if not news:
            assert planned.batch == second.batch  # nothing new: no batch, the run ends
        else:
            assert list(planned.tasks().values()) == [[(A, "s1")]]
            start = planned.state((A, "s1")).position
            h.run(planned, {(A, "s1"): read(start, 2, tip=True, end=Position.after("3000"))})
            assert run.next_offset(planned, None, None) is planned  # s0 stays done: no second look
            assert len(h.kinesis.looks) - looks == 2


def test_streams_added_to_the_options_start_and_removed_ones_leave():
    kinesis = FakeKinesis({A: [shard("s0")], arn("b"): [shard("s0")], arn("c"): [shard("x")]})
    before = Harness(config("a", "c"), kinesis, Clock())
    planner = before.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    before.run(first)
    assert set(first.streams) == {A, arn("c")}
    # Restarted with b instead of c: same store, same checkpoint.
    after = Harness(config("a", "b"), kinesis, before.clock, before.store)
    second = after.planner().next_offset(SourceOffset.from_json(first.to_json()), None, None)
    assert set(second.streams) == {A, arn("b")}
    assert second.streams[arn("b")]["s0"].position == Position.trim_horizon()
    assert second.streams[A]["s0"].position == Position.after("1010")


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_shard_gone_from_the_listing_before_its_end_is_a_loss(fail_on_data_loss):
    kinesis = FakeKinesis({A: [shard("p", closed=True), shard("c1", "p"), shard("c2", "p")]})
    options = {"shardDiscoveryIntervalMs": "0", "failOnDataLoss": str(fail_on_data_loss).lower()}
    h = Harness(config("a", **options), kinesis, Clock())
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert list(first.tasks().values()) == [[(A, "p")]]  # children wait for their parent
    h.run(first)  # p read 10 records, not to its end
    kinesis.shards[A] = [shard("c1", "p"), shard("c2", "p")]  # p expired past retention
    h.clock.now += 1
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=r"p \(from after sequence number 1010"):
            planner.next_offset(first, None, None)
        return
    second = planner.next_offset(first, None, None)  # with failOnDataLoss=false the children start
    assert sorted(ref for refs in second.tasks().values() for ref in refs) == [(A, "c1"), (A, "c2")]
    assert second.streams[A]["p"].finished


def test_a_restarted_planner_derives_the_same_next_offset():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    logged = SourceOffset.from_json(first.to_json())
    a = planner.next_offset(logged, 100, None)
    b = h.planner().next_offset(logged, 100, None)
    assert {k: {s: v.position for s, v in states.items()} for k, states in a.streams.items()} == {
        k: {s: v.position for s, v in states.items()} for k, states in b.streams.items()
    }
    assert a.tasks() == b.tasks()


def test_a_closure_forces_one_listing_not_one_per_trigger():
    """A batch that read a shard to its end lists the stream once; the triggers after it (which see the
    same recorded ends until a batch is planned) wait for the discovery interval."""
    kinesis = FakeKinesis({A: [shard("p")]})
    h = Harness(config("a", shardDiscoveryIntervalMs="10000", idlePollIntervalMs="1000000"), kinesis, Clock())
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    kinesis.shards[A] = [shard("p", closed=True), shard("c1", "p"), shard("c2", "p")]
    h.run(first, {(A, "p"): read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())})
    second = planner.next_offset(first, None, None)
    assert sorted(ref for refs in second.tasks().values() for ref in refs) == [(A, "c1"), (A, "c2")]
    calls = kinesis.list_calls[A]
    for _ in range(50):  # the same start offset again and again (Spark's triggers while nothing is new)
        h.clock.now += 10
        planner.next_offset(first, None, None)
    assert kinesis.list_calls[A] == calls


def test_a_failed_forced_listing_is_tried_again():
    kinesis = FakeKinesis({A: [shard("p")]})
    h = Harness(config("a", shardDiscoveryIntervalMs="10000"), kinesis, Clock())
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first, {(A, "p"): read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())})
    kinesis.failures = 1  # the forced listing after the closure fails once
    kinesis.shards[A] = [shard("p", closed=True), shard("c1", "p")]
    assert planner.next_offset(first, None, None) is first  # nothing known to read yet
    h.clock.now += 10
    again = planner.next_offset(first, None, None)
    assert list(again.tasks().values()) == [[(A, "c1")]]


def test_tasks_that_never_ran_are_closed_and_their_shards_planned_again_first():
    """A foreachBatch that used only task 0 (df.show(), df.take(n)): task 1 recorded nothing."""
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert first.tasks() == {0: [(A, "s0")], 1: [(A, "s1")]}
    h.run(first, only={0})
    second = planner.next_offset(first, None, None)
    assert second.streams[A]["s0"].position == Position.after("1010")
    assert second.streams[A]["s1"].position == Position.trim_horizon()  # again from where it was
    assert second.tasks()[0] == [(A, "s1")]  # and first in line
    # A late attempt of the task that never ran loses to the driver's record: it reads nothing.
    late = TaskEnd(first.token, 0, 1, {(A, "s1"): read(Position.trim_horizon(), 10, tip=False)})
    winner = BatchEndLog(h.store, "mem://").write(late)
    assert winner.shards[(A, "s1")].unrun and winner.shards[(A, "s1")].reached == Position.trim_horizon()


def test_a_batch_none_of_whose_tasks_ran_is_planned_again():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first, only=set())  # foreachBatch returned without touching the DataFrame
    second = planner.next_offset(first, None, None)
    assert second.batch == 1
    assert {s.position for s in second.streams[A].values()} == {Position.trim_horizon()}
    assert len(second.tasks()) == 2


def test_missing_records_of_a_batch_not_known_to_be_planned_mean_a_cleaned_metadata_path():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    h.store.delete_folder(batch_folder(first.token, 0))  # someone cleaned metadataPath
    with pytest.raises(CheckpointMismatchError, match="changed or cleaned"):
        h.planner().next_offset(SourceOffset.from_json(first.to_json()), None, None)


def test_a_stream_recreated_since_the_checkpoint_fails_or_starts_over():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert first.created == {A: CREATED}
    h.run(first)
    logged = SourceOffset.from_json(first.to_json())
    # Deleted and re-created while the query was down: same ARN, a new creation time.
    h.kinesis.shards[A] = [shard("s0")]
    h.kinesis.created[A] = CREATED + 5000
    again = Harness(config_with_created(h.config, CREATED + 5000), h.kinesis, h.clock, h.store)
    with pytest.raises(DataLossError, match="re-created"):
        again.planner().next_offset(logged, None, None)
    lenient = Harness(
        config_with_created(h.config, CREATED + 5000, failOnDataLoss="false"), h.kinesis, h.clock, h.store
    )
    offset = lenient.planner().next_offset(logged, None, None)
    assert set(offset.streams[A]) == {"s0"}
    assert offset.streams[A]["s0"].position == Position.trim_horizon()  # the new stream from its start
    assert offset.created == {A: CREATED + 5000}
    with pytest.raises(DataLossError, match="re-created"):
        plan_tasks(logged, again.config)  # a replay of the logged batch after the restart
    assert plan_tasks(logged, lenient.config) == []  # ... or its shards are left out


def test_a_stream_recreated_while_the_query_runs_ends_it_clearly():
    h = one_stream(shardDiscoveryIntervalMs="0")
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    h.run(first)
    h.kinesis.created[A] = CREATED + 1
    with pytest.raises(StreamRecreatedError):
        planner.next_offset(first, None, None)


def available_now_over_one_shard():
    """An AvailableNow run (sleeps between listings skipped) over a one-shard stream, its first batch planned."""
    kinesis = FakeKinesis({A: [shard("p")]})
    h = Harness(config("a"), kinesis, Clock())
    planner = h.planner()
    planner.sleep = lambda _s: None
    planner.read_up_to(h.clock.now)
    return kinesis, h, planner, planner.next_offset(planner.initial_offset(), None, None)


def test_available_now_does_not_end_while_a_closed_shards_children_are_unlisted():
    """The listing a closure forces fails (or does not show the children ChildShards named): under
    AvailableNow no batch planned ends the run, so the planner lists again first."""
    kinesis, h, planner, first = available_now_over_one_shard()
    closed = read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())
    h.run(first, {(A, "p"): replace(closed, children=("c1",))})
    kinesis.failures = 2
    kinesis.shards[A] = [shard("p", closed=True), shard("c1", "p")]
    second = planner.next_offset(first, None, None)
    assert list(second.tasks().values()) == [[(A, "c1")]]


def test_available_now_lists_again_when_a_listing_lacks_the_children_a_closed_shard_named():
    """The forced listing answers, but from before the reshard reached it (ListShards is eventually
    consistent): without the children ChildShards named, it is not taken as complete."""
    kinesis, h, planner, first = available_now_over_one_shard()
    closed = read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())
    h.run(first, {(A, "p"): replace(closed, children=("c1",))})
    kinesis.shards[A] = [shard("p", closed=True), shard("c1", "p")]
    kinesis.lagging = [[shard("p", closed=True)]]
    second = planner.next_offset(first, None, None)
    assert list(second.tasks().values()) == [[(A, "c1")]]
    assert not kinesis.lagging  # the lagging listing was asked, and not believed


def test_a_shard_listed_closed_is_planned_closed():
    """ListShards' ending sequence number reaches the read (which then reads through empty pages to the
    shard's end instead of taking an empty page for the tip)."""
    kinesis = FakeKinesis({A: [shard("p", closed=True)]})
    planner = Harness(config("a"), kinesis, Clock()).planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert first.state((A, "p")).closed
    h = one_stream()
    planner = h.planner()
    assert not planner.next_offset(planner.initial_offset(), None, None).state((A, "s0")).closed


def test_a_record_limit_below_the_shard_count_plans_no_shard_without_budget():
    """One record for two shards: a batch reads one shard with a budget of one, never a shard with
    none (a budget of 0 reads without a limit); over two batches both shards get their turn."""
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), 1, None)
    planned = [s for s in first.streams[A].values() if s.task != -1]
    assert [s.max_records for s in planned] == [1]
    h.run(
        first,
        {
            ref: read(first.state(ref).position, 1, tip=False)
            for refs in first.tasks().values()
            for ref in refs
        },
    )
    second = planner.next_offset(first, 1, None)
    read_first = {ref for refs in first.tasks().values() for ref in refs}
    read_second = {ref for refs in second.tasks().values() for ref in refs}
    assert [second.state(ref).max_records for ref in read_second] == [1]
    assert read_first | read_second == {(A, "s0"), (A, "s1")}


def test_a_planner_restarted_after_several_batches_goes_on_from_the_last_recorded_ends():
    """A driver restarted at batch 3 (fresh caches, same metadataPath) plans batch 4 from batch 3's
    recorded ends, not from any earlier batch's."""
    h = one_stream()
    planner = h.planner()
    offset = planner.next_offset(planner.initial_offset(), None, None)
    for _batch in range(3):
        h.run(offset)
        offset = planner.next_offset(offset, None, None)
    assert offset.batch == 3
    ends = {(A, "s0"): Position.after("3300"), (A, "s1"): Position.after("3301")}
    h.run(offset, {ref: read(offset.state(ref).position, 7, tip=False, end=end) for ref, end in ends.items()})
    restarted = h.planner().next_offset(offset, None, None)
    assert restarted.batch == 4
    assert {sid: s.position for sid, s in restarted.streams[A].items()} == {
        "s0": Position.after("3300"),
        "s1": Position.after("3301"),
    }


def test_available_now_fails_rather_than_end_with_children_unread():
    kinesis, h, planner, first = available_now_over_one_shard()
    h.run(first, {(A, "p"): read(Position.trim_horizon(), 4, tip=False, end=Position.shard_end())})
    kinesis.failures = 100
    with pytest.raises(StreamAccessError, match="cannot finish"):
        planner.next_offset(first, None, None)


def test_the_lag_report_follows_the_recorded_ends():
    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    assert planner.lag.report()["streams"][A]["shardsLagUnknown"] == 2
    behind = replace(read(Position.trim_horizon(), 10, tip=False), millis_behind=4000)
    h.run(first, {(A, "s0"): behind})
    planner.next_offset(first, None, None)
    figures = planner.lag.report()["streams"][A]
    assert (figures["shardsBehind"], figures["maxMsBehindLatest"], figures["recordsRead"]) == (1, 4000, 20)
    assert figures["shardsLagUnknown"] == 1  # s1: its record says -1, the server did not tell
