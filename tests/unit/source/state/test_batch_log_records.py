"""The batch-end log's records on a real local store: the identity record and what its checks say to
the operator, planned markers (what they hold, a batch planned again), collection of old batches, and
the `live` records that keep two queries off one metadataPath.

Written against mutation testing (bash scripts/mutation.sh 'pyspark_kinesis.source.state.batch_log.*'):
the integration tests reach these paths but rarely read the words of an error or the fields of a
marker."""

from __future__ import annotations

import logging
import re
import time

import orjson
import pytest

from pyspark_kinesis.errors import CheckpointMismatchError
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.state import batch_log as batch_log_module
from pyspark_kinesis.source.state.batch_log import BatchEndLog, offset_digest, planned_key, source_key
from pyspark_kinesis.source.state.offsets import ShardEnd, TaskEnd
from pyspark_kinesis.source.state.processes import this_process

STREAM = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
REF = (STREAM, "shardId-000000000000")


@pytest.fixture
def log(tmp_path) -> BatchEndLog:
    return BatchEndLog.open(str(tmp_path / "meta"))


def _words(text: str) -> str:
    return re.escape(text)


# -- identity -----------------------------------------------------------------------------------


def test_the_identity_record_holds_the_token_and_the_streams(log):
    log.start_query("tok", [STREAM])
    assert orjson.loads(log.store.get(source_key("tok"))) == {"token": "tok", "streams": [STREAM]}
    log.check_query("tok")
    assert log.location.endswith("meta")


def test_the_identity_record_says_where_each_stream_is_served_for_the_cli(log):
    """`pyspark-kinesis lag` reaches the query's streams where the query did, without being told: the
    region and endpoint are recorded (an endpoint's user:password part is not)."""
    from pyspark_kinesis.source.options import parse_options

    config = parse_options(
        {
            "streamName": STREAM,
            "region": "eu-west-1",
            "endpointUrl": "http://user:secret@127.0.0.1:4567",
            "metadataPath": "/m",
        },
        streaming=True,
    )
    (spec,) = config.streams
    assert spec.place() == {"region": "eu-west-1", "endpointUrl": "http://127.0.0.1:4567"}
    log.start_query("tok", [STREAM], {STREAM: spec.place()})
    assert log.recorded_where("tok") == {
        STREAM: {"region": "eu-west-1", "endpointUrl": "http://127.0.0.1:4567"}
    }
    assert b"secret" not in log.store.get(source_key("tok"))
    assert log.recorded_where("other") == {}


def test_no_records_for_this_checkpoint_says_what_to_do(log):
    with pytest.raises(CheckpointMismatchError) as caught:
        log.check_query("tok")
    assert str(caught.value) == (
        f"metadataPath '{log.location}' holds no records for this checkpoint (query token tok). Restart with "
        "the metadataPath the query was first started with, or start over with a new checkpointLocation. If "
        "an expiry rule (an S3 lifecycle rule) covers metadataPath, it deleted them: exclude that prefix from "
        "expiry."
    )


def test_another_querys_records_are_named_by_their_token(log):
    log.store.put_if_absent(source_key("tok"), orjson.dumps({"token": "other", "streams": []}))
    with pytest.raises(CheckpointMismatchError) as caught:
        log.check_query("tok")
    assert str(caught.value) == (
        f"The records under metadataPath '{log.location}' belong to another query (token other, not tok). "
        "Use the metadataPath of this query."
    )


def test_an_identity_record_expired_on_its_own_is_written_again_with_a_warning(log, caplog):
    log.mark_planned("tok", 4, {"batch": 4}, {"batch": 3})
    with caplog.at_level(logging.WARNING):
        log.check_query("tok", batch=4, streams=[STREAM])
    assert orjson.loads(log.store.get(source_key("tok"))) == {"token": "tok", "streams": [STREAM]}
    assert caplog.messages == [
        f"metadataPath '{log.location}': the query's identity record tok/source.json was gone (an expiry "
        "rule on the storage?) while its batch records are here: written again. Exclude metadataPath from "
        "expiry rules."
    ]
    log.store.delete(source_key("tok"))
    log.check_query("tok", batch=4)  # without the streams: an empty list
    assert orjson.loads(log.store.get(source_key("tok"))) == {"token": "tok", "streams": []}


# -- planned markers ----------------------------------------------------------------------------


def test_a_planned_marker_holds_when_from_where_and_the_offset(log):
    before = int(time.time() * 1000)
    assert log.mark_planned("tok", 7, {"batch": 7}, {"batch": 6}) == {"batch": 7}
    after = int(time.time() * 1000)
    record = orjson.loads(log.store.get(planned_key("tok", 7)))
    assert record["token"] == "tok" and record["batch"] == 7 and record["offset"] == {"batch": 7}
    assert record["from"] == offset_digest({"batch": 6}) and before <= record["at"] <= after
    planned = log.planned("tok", 7)
    assert planned is not None and (planned.at_ms, planned.offset) == (record["at"], {"batch": 7})
    assert planned.digest == offset_digest({"batch": 7})


def test_a_batch_planned_again_gets_its_first_offset_from_the_same_start_only(log):
    log.mark_planned("tok", 7, {"batch": 7, "end": 1}, {"batch": 6})
    assert log.mark_planned("tok", 7, {"batch": 7, "end": 2}, {"batch": 6}) == {"batch": 7, "end": 1}
    with pytest.raises(CheckpointMismatchError) as caught:
        log.mark_planned("tok", 7, {"batch": 7, "end": 3}, {"batch": 5})
    assert str(caught.value) == (
        f"Batch 7 was planned before under metadataPath '{log.location}' from another offset than the "
        "checkpoint now gives: the checkpoint was restored from another copy, or two queries share this "
        "metadataPath. Use this query's own checkpoint and metadataPath, or start over with a new "
        "checkpointLocation and metadataPath."
    )


def test_a_marker_of_an_older_version_has_no_offset_and_the_new_one_stands(log):
    log.store.put_if_absent(planned_key("tok", 2), orjson.dumps({"token": "tok", "batch": 2}))
    planned = log.planned("tok", 2)
    assert planned is not None and (planned.at_ms, planned.start_digest, planned.offset, planned.digest) == (
        0,
        None,
        None,
        None,
    )
    assert log.mark_planned("tok", 2, {"batch": 2}, {"batch": 1}) == {"batch": 2}
    assert log.planned("tok", 3) is None and not log.was_planned("tok", 3)


def test_the_offset_digest_ignores_key_order_and_is_32_hex_digits():
    first = offset_digest({"a": 1, "b": {"c": 2, "d": 3}})
    assert first == offset_digest({"b": {"d": 3, "c": 2}, "a": 1})
    assert re.fullmatch(r"[0-9a-f]{32}", first)


# -- task records -------------------------------------------------------------------------------


def test_a_record_for_another_shard_names_the_shard_and_its_stream(log):
    record = TaskEnd("tok", 3, 1, {})
    with pytest.raises(CheckpointMismatchError) as caught:
        log.check(record, {REF: Position.after("1")})
    assert str(caught.value) == (
        f"The batch-end record of batch 3, task 1 under metadataPath '{log.location}' does not match the "
        f"checkpoint for shard shardId-000000000000 of {STREAM}. metadataPath must belong to this query's "
        "checkpoint only."
    )


# -- collection ---------------------------------------------------------------------------------


def _batches(log: BatchEndLog, token: str) -> list[str]:
    return sorted(name for name in log.store.list_folders(token) if name.startswith("batch-"))


def test_collection_deletes_the_batches_below_and_only_once_per_bound(log):
    for batch in range(5):
        log.write(TaskEnd("tok", batch, 0, {REF: ShardEnd(Position.trim_horizon(), Position.after("1"))}))
    log.collect("tok", 3)
    assert _batches(log, "tok") == ["batch-000000000003", "batch-000000000004"]
    log.write(TaskEnd("tok", 1, 0, {}))  # written after the collection (a late attempt)
    log.collect("tok", 3)  # the same bound again: nothing to do
    assert "batch-000000000001" in _batches(log, "tok")
    log.collect("tok", 2)  # a lower bound: nothing either
    assert "batch-000000000001" in _batches(log, "tok")
    log.collect("tok", 4)
    assert _batches(log, "tok") == ["batch-000000000004"]


def test_collection_at_batch_zero_is_nothing(log):
    log.write(TaskEnd("tok", 0, 0, {}))
    log.collect("tok", 0)
    assert _batches(log, "tok") == ["batch-000000000000"]


# -- one running query per metadataPath ---------------------------------------------------------


def test_a_beat_keeps_only_the_newest_live_record(log):
    log.beat("tok")
    time.sleep(0.01)
    log.beat("tok")
    names = log.store.list_records("tok/live")
    assert len(names) == 1 and re.fullmatch(r"\d{15}\.json", names[0])
    assert orjson.loads(log.store.get(f"tok/live/{names[0]}")) == this_process()  # who beats
    now = int(time.time() * 1000)
    assert now - 5000 <= int(names[0][:-5]) <= now


def test_a_query_seen_recently_keeps_another_off(log, monkeypatch):
    log.beat("first")
    log.check_alone("first")  # itself
    with pytest.raises(CheckpointMismatchError) as caught:
        log.check_alone("second")
    assert re.fullmatch(
        _words(f"metadataPath '{log.location}' is in use by another running query (token first, last seen ")
        + r"0 s ago"
        + _words(
            "). Give every query its own metadataPath (they would share the same enhanced fan-out consumer "
            "and records folder). If that query has stopped, start again after 90 s (at once on the host it "
            "ran on)."
        ),
        str(caught.value),
    )
    later = time.time() + batch_log_module.LIVE_FOR_S + 1
    monkeypatch.setattr(batch_log_module.time, "time", lambda: later)
    log.check_alone("second")  # gone quiet: free


def test_folders_that_are_not_queries_and_queries_without_beats_do_not_count(log):
    log.store.put_if_absent("_probe/live/999999999999999.json", b"{}")
    log.start_query("old", [])  # a query that never beat (or whose beats are gone)
    log.store.put_if_absent("other/live/notanumber.json", b"{}")
    log.check_alone("tok")
