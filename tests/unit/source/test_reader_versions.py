"""The stream reader on both shapes of PySpark's API (`spark_features`): PySpark 4.2+ hands `latestOffset`
the start and a read limit; 4.0/4.1 call it without arguments, and a restarted query's last logged
offset reaches the reader only as `partitions(X, X)` (Spark's `setLatestSeenOffset`). Planned by the
real planner over fakes (planner_fakes.py), no Spark."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from pyspark_kinesis import spark_features
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.readers import KinesisStreamReader
from pyspark_kinesis.source.state.offsets import SourceOffset
from tests.unit.planner_fakes import Harness, arn, one_stream, read

A = arn("a")


def reader_for(h: Harness) -> KinesisStreamReader:
    """A reader as a (re)started query's planner process has it (its constructor would ask AWS)."""
    reader = object.__new__(KinesisStreamReader)
    reader.config, reader.relay_key, reader._seen = h.config, b"", None
    reader._told_backlog = reader._available_now = reader._drained = False
    reader._planner = h.planner()
    return reader


def ends_after(h: Harness, offset_json: dict, seq: int) -> None:
    offset = SourceOffset.from_json(offset_json)
    h.run(
        offset,
        {
            ref: read(offset.state(ref).position, 3, tip=False, end=Position.after(str(seq)))
            for refs in offset.tasks().values()
            for ref in refs
        },
    )


def test_without_arguments_the_reader_plans_from_the_newest_offset_it_has_seen():
    h = one_stream(maxRecordsPerBatch="6")
    reader = reader_for(h)
    first = reader.latestOffset()
    assert first["batch"] == 0
    assert (
        sum(s.max_records for s in SourceOffset.from_json(first).streams[A].values()) == 6
    )  # the option's limit
    ends_after(h, first, 500)
    second = reader.latestOffset()
    assert second["batch"] == 1 and second["token"] == first["token"]
    assert {s.position for s in SourceOffset.from_json(second).streams[A].values()} == {Position.after("500")}


def test_a_restarted_query_goes_on_from_its_last_logged_offset():
    """Restarted, Spark 4.0/4.1 shows the reader its last logged offset as partitions(X, X), replays that
    batch, then asks for the next one without arguments: it follows X, not a new start."""
    h = one_stream()
    before = reader_for(h)
    first = before.latestOffset()
    ends_after(h, first, 500)
    second = before.latestOffset()
    restarted = reader_for(h)
    assert restarted.partitions(second, second) == []
    ends_after(h, second, 900)
    third = restarted.latestOffset()
    assert third["batch"] == 2 and third["token"] == first["token"]
    assert {s.position for s in SourceOffset.from_json(third).streams[A].values()} == {Position.after("900")}


def test_a_replayed_older_batch_does_not_move_the_reader_back():
    h = one_stream()
    reader = reader_for(h)
    first = reader.latestOffset()
    ends_after(h, first, 500)
    second = reader.latestOffset()
    reader.commit(first)
    assert reader._seen is not None and reader._seen.batch == second["batch"]


@pytest.mark.skipif(
    not spark_features.ADMISSION_CONTROL, reason="read limits reach Python sources from PySpark 4.2"
)
def test_with_arguments_the_read_limit_given_wins():
    h = one_stream(maxRecordsPerBatch="6")
    reader = reader_for(h)
    start = reader.initialOffset()
    planned = reader.latestOffset(start, spark_features.ReadMaxRows(2))
    assert (
        sum(s.max_records for s in SourceOffset.from_json(planned).streams[A].values() if s.task != -1) == 2
    )
    everything = reader_for(one_stream(maxRecordsPerBatch="6"))
    unbounded = everything.latestOffset(everything.initialOffset(), spark_features.ReadAllAvailable())
    assert all(s.max_records == -1 for s in SourceOffset.from_json(unbounded).streams[A].values())


def test_the_api_detection_matches_the_installed_pyspark():
    """A detection that breaks (a module renamed, an import that fails for another reason) would move
    every query onto the 4.0/4.1 paths silently: pinned to the installed version."""
    import pyspark
    from packaging.version import Version

    installed = Version(pyspark.__version__)
    assert (installed >= Version("4.2")) == spark_features.ADMISSION_CONTROL, installed
    assert (installed >= Version("4.1")) == spark_features.ARROW_STREAM_WRITER, installed


def behind(h: Harness, offset_json: dict, seq: int, millis: int) -> None:
    """Batch `offset_json` read 3 records of each shard and stopped `millis` behind the tip."""
    offset = SourceOffset.from_json(offset_json)
    h.run(
        offset,
        {
            ref: replace(
                read(offset.state(ref).position, 3, tip=millis == 0, end=Position.after(str(seq))),
                millis_behind=millis,
            )
            for refs in offset.tasks().values()
            for ref in refs
        },
    )


@pytest.mark.parametrize("millis", [0, 90_000])
def test_a_run_starting_from_a_batch_that_left_a_backlog_says_so_once(caplog, millis):
    """PySpark 4.0/4.1: an availableNow run reads one bounded batch; the next run's first planning
    warns (once) when that batch left shards behind, naming drainInOneBatch; not when it read to the tip."""
    h = one_stream(maxRecordsPerBatch="6")
    first = reader_for(h).latestOffset()
    behind(h, first, 500, millis)
    caplog.set_level(logging.WARNING, logger="pyspark_kinesis")
    run = reader_for(h)  # the next run: a new planner process, shown the last logged offset
    assert run.partitions(first, first) == []
    second = run.latestOffset()
    behind(h, second, 900, millis)
    run.latestOffset()
    said = [r.getMessage() for r in caplog.records if "drainInOneBatch=true" in r.getMessage()]
    if millis:
        assert len(said) == 1 and "2 shard(s)" in said[0] and "90.0 s" in said[0] and "Batch 0" in said[0]
    else:
        assert said == []


def test_no_backlog_word_under_drain_in_one_batch(caplog):
    h = one_stream(drainInOneBatch="true")
    first = reader_for(h).latestOffset()
    behind(h, first, 500, 90_000)
    caplog.set_level(logging.WARNING, logger="pyspark_kinesis")
    run = reader_for(h)
    assert run.partitions(first, first) == []
    run.latestOffset()
    assert not [r for r in caplog.records if "drainInOneBatch=true" in r.getMessage()]


def test_the_detected_api_matches_the_installed_pyspark():
    """The feature detection is pinned to the version: a detection that broke (an import renamed) must
    not silently move the connector onto the 4.0/4.1 paths, where it runs, only worse."""
    import pyspark

    from pyspark_kinesis import spark_features

    major, minor = (int(part) for part in pyspark.__version__.split(".")[:2])
    assert ((major, minor) >= (4, 2)) == spark_features.ADMISSION_CONTROL, pyspark.__version__
    assert ((major, minor) >= (4, 1)) == spark_features.ARROW_STREAM_WRITER, pyspark.__version__
