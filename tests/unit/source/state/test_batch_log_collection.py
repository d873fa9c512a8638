"""Which queries' folders the batch-end log collects as abandoned, and when a query counts as running
(src/pyspark_kinesis/source/state/batch_log.py), on a real local store with the module's clock pinned:
the live window's bound to the millisecond, every folder of a listing looked at (one skipped or kept
does not end the walk), a query that ran a batch kept; the checks' words and their less travelled ways."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from pyspark_kinesis.errors import CheckpointMismatchError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state import batch_log as batch_log_module
from pyspark_kinesis.source.state.batch_log import LIVE_FOR_S, BatchEndLog, batch_folder, task_key
from pyspark_kinesis.source.state.offsets import ShardEnd, TaskEnd

NOW_MS = 1_800_000_000_000
WINDOW_MS = int(LIVE_FOR_S * 1000)
STREAM = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
ELSEWHERE = {"host": "another-host", "pid": 1, "started": 1}  # (a process this host cannot look at)


@pytest.fixture
def log(tmp_path, monkeypatch) -> BatchEndLog:
    monkeypatch.setattr(batch_log_module.time, "time", lambda: NOW_MS / 1000)
    return BatchEndLog.open(str(tmp_path / "meta"))


def _query(
    log: BatchEndLog, token: str, beat_ms: int | None, *, batches: dict[int, bool] | None = None
) -> None:
    """A query's folder: its identity, a live record written at `beat_ms` by a process elsewhere, and
    batch folders (batch -> whether a task recorded an end in it)."""
    log.start_query(token, [STREAM])
    if beat_ms is not None:
        log.store.put_if_absent(f"{token}/live/{beat_ms:015d}.json", orjson.dumps(ELSEWHERE))
    for batch, recorded in (batches or {}).items():
        name = task_key(token, batch, 0) if recorded else f"{batch_folder(token, batch)}/planned.json"
        log.store.put_if_absent(name, b"{}")


def test_queries_quiet_for_the_live_window_are_collected_and_named(log):
    _query(log, "a-self", NOW_MS)  # (the caller itself, listed first)
    _query(log, "b-quiet", NOW_MS - WINDOW_MS)  # (quiet exactly the window: gone)
    _query(log, "c-never", None)
    assert log.collect_abandoned("a-self") == ["b-quiet", "c-never"]
    assert log.store.list_folders("") == ["a-self"]


def test_a_query_seen_within_the_window_is_kept_and_the_walk_goes_on(log):
    _query(log, "a-live", NOW_MS - WINDOW_MS + 1)
    _query(log, "b-quiet", NOW_MS - WINDOW_MS - 1)
    assert log.collect_abandoned("self") == ["b-quiet"]
    assert log.store.list_folders("") == ["a-live"]


def test_a_query_that_ran_a_batch_is_kept_and_the_walk_goes_on(log):
    _query(log, "a-ran", None, batches={0: True})
    _query(log, "b-later", None, batches={1: False})  # (a batch after 0: it ran one)
    _query(log, "c-planned", None, batches={0: False})  # (planned batch 0, killed before any task)
    assert log.collect_abandoned("self") == ["c-planned"]
    assert log.store.list_folders("") == ["a-ran", "b-later"]


def test_folders_that_are_not_queries_are_left_alone(log):
    log.store.put_if_absent("_probe/x.json", b"{}")  # (the connector's own folders start with "_")
    log.store.put_if_absent("not-a-query/x.json", b"{}")  # (no identity record)
    log.store.put_if_absent("stray/live/12345x.json", b"{}")  # (not a beat's name: not a beat)
    log.start_query("stray", [STREAM])
    _query(log, "_underscore", None)
    assert log.collect_abandoned("self") == ["stray"]  # (never beat: gone)
    assert log.store.list_folders("") == ["_probe", "_underscore", "not-a-query"]


def test_a_beat_gone_between_the_listing_and_its_read_says_nothing_of_its_process(log):
    assert not log._ended("other", NOW_MS)  # (the other query renewed it meanwhile: it runs)


def _beat_only(log: BatchEndLog, token: str, beat_ms: int) -> None:
    """`token`'s one live record, written at `beat_ms` by a process elsewhere."""
    for name in log.store.list_records(f"{token}/live"):
        log.store.delete(f"{token}/live/{name}")
    log.store.put_if_absent(f"{token}/live/{beat_ms:015d}.json", orjson.dumps(ELSEWHERE))


def test_another_query_keeps_the_path_until_its_window_passes_to_the_millisecond(log):
    _query(log, "other", NOW_MS - 5_000)
    with pytest.raises(CheckpointMismatchError, match=r"\(token other, last seen 5 s ago\)"):
        log.check_alone("self")
    _beat_only(log, "other", NOW_MS - WINDOW_MS + 1)
    with pytest.raises(CheckpointMismatchError, match=r"last seen 89 s ago"):
        log.check_alone("self")
    _beat_only(log, "other", NOW_MS - WINDOW_MS)
    log.check_alone("self")  # (quiet exactly the window: free)


def test_a_record_of_a_dropped_stream_is_skipped_and_the_check_goes_on(log):
    dropped = "arn:aws:kinesis:eu-west-1:123456789012:stream/gone"
    record = TaskEnd(
        "tok", 4, 1, {(STREAM, "s0"): ShardEnd(Position.after("9"), Position.after("9"))}, dropped=(dropped,)
    )
    starts = {(dropped, "s0"): Position.trim_horizon(), (STREAM, "s0"): Position.after("1")}
    with pytest.raises(
        CheckpointMismatchError, match="does not match the checkpoint for shard s0 of " + STREAM
    ):
        log.check(record, starts)


def test_given_names_are_the_notes_read(log):
    ref = (STREAM, "s0")
    log.note_losses("tok", 0, 1, {ref: ("gone",)})
    ends = {ref: ShardEnd(Position.trim_horizon(), Position.after("5"))}
    assert log.with_noted_losses("tok", 0, ends)[ref].losses == ("gone",)
    assert log.with_noted_losses("tok", 0, ends, frozenset())[ref].losses == ()  # (a listing without it)


class LosingStore:
    """A store that refuses to overwrite a record and then cannot read it."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return False

    def get(self, key: str) -> Any:
        return None


def test_a_store_that_loses_a_record_it_refused_to_overwrite_is_named(tmp_path):
    log = BatchEndLog(LosingStore(), "s3://bucket/meta")  # type: ignore[arg-type]
    with pytest.raises(CheckpointMismatchError) as caught:
        log.write(TaskEnd("tok", 3, 2, {}))
    assert str(caught.value) == (
        "The batch-end record of batch 3, task 2 under metadataPath 's3://bucket/meta' exists and cannot be "
        "read. metadataPath must be durable storage."
    )


def test_the_filesystems_options_reach_the_store(monkeypatch):
    opened = []
    monkeypatch.setattr(
        batch_log_module, "open_store", lambda location, options: opened.append((location, options))
    )
    BatchEndLog.open("s3://bucket/meta", {"anon": True})
    assert opened == [("s3://bucket/meta", {"anon": True})]


def test_a_beat_leaves_names_that_are_not_beats_alone(log):
    log.store.put_if_absent("tok/live/12345x.json", b"{}")
    kept = log.beat("tok")
    assert sorted(log.store.list_records("tok/live")) == sorted(["12345x.json", kept.rsplit("/", 1)[1]])


def test_a_query_whose_first_batch_spark_logged_is_never_collected(log):
    """Issue #61 item 9: a query stopped between Spark's log of its first batch and its first task's
    record lost its folder to the next query started on the same metadataPath, and its restart then
    failed (the batch's records gone). The driver marks the first batch logged when Spark asks for its
    tasks (`partitions`: `Ledger.check_logged_batch`)."""
    _query(log, "a-logged", None, batches={0: False})
    log.mark_logged("a-logged")
    _query(log, "b-planned", None, batches={0: False})
    assert log.collect_abandoned("self") == ["b-planned"]
    assert log.store.list_folders("") == ["a-logged"]


def test_the_driver_marks_the_first_batch_logged_when_spark_asks_for_its_tasks():
    from tests.unit.planner_fakes import logged, one_stream

    h = one_stream()
    planner = h.planner()
    first = planner.next_offset(planner.initial_offset(), None, None)
    folder = batch_folder(first.token, 0)
    assert f"{folder}/logged.json" not in h.store.data  # (planned: Spark may not log it)
    planner.check_logged_batch(logged(first))
    assert f"{folder}/logged.json" in h.store.data
    assert h.planner().ledger.log.collect_abandoned("another") == []
