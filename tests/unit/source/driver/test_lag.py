"""The lag report that Spark's progress shows, from batch-end records, and the helpers that read it."""

from __future__ import annotations

import json
from types import SimpleNamespace

from pyspark_kinesis import metrics
from pyspark_kinesis.model import Position
from pyspark_kinesis.source.driver.lag import LagTracker
from pyspark_kinesis.source.state.offsets import ShardEnd

ARN = "arn:aws:kinesis:us-east-1:000000000000:stream/orders"
OTHER = "arn:aws:kinesis:eu-west-1:000000000000:stream/clicks"


def end(behind: int, records: int = 10, nbytes: int = 100) -> ShardEnd:
    pos = Position.after("1")
    return ShardEnd(start=pos, reached=pos, records=records, bytes=nbytes, millis_behind=behind)


def test_nothing_is_reported_before_a_batch_was_planned():
    assert LagTracker().report() is None


def test_per_stream_max_average_and_shards_behind():
    lag = LagTracker()
    lag.update(
        3,
        {(ARN, "s0"): end(0), (ARN, "s1"): end(1200, 5, 50), (ARN, "s2"): end(600), (OTHER, "c0"): end(0)},
        {ARN: ["s0", "s1", "s2", "s3"], OTHER: ["c0"]},
    )
    report = lag.report()
    assert report["batch"] == 3
    orders = report["streams"][ARN]
    assert orders == {
        "shards": 4,
        "shardsBehind": 2,
        "shardsLagUnknown": 1,  # s3: not read yet
        "maxMsBehindLatest": 1200,
        "avgMsBehindLatest": 600,
        "recordsRead": 25,
        "bytesRead": 250,
        "shardsWithDataLoss": 0,
        "misplacedUserRecordsDropped": 0,
    }
    assert report["streams"][OTHER]["shardsBehind"] == 0
    # Only integers and strings: what Spark accepts from reportLatestOffset().
    assert all(isinstance(v, int) for s in report["streams"].values() for v in s.values())


def test_a_shard_not_read_in_the_last_batch_keeps_its_last_lag_and_a_finished_one_leaves():
    lag = LagTracker()
    lag.update(1, {(ARN, "s0"): end(5000), (ARN, "s1"): end(700)}, {ARN: ["s0", "s1"]})
    lag.update(2, {(ARN, "s1"): end(0, 3, 30)}, {ARN: ["s0", "s1"]})
    figures = lag.report()["streams"][ARN]
    assert (figures["maxMsBehindLatest"], figures["shardsBehind"], figures["recordsRead"]) == (5000, 1, 3)
    lag.update(3, {(ARN, "s1"): end(0, 0, 0)}, {ARN: ["s1"]})  # s0 read to its end: pruned
    figures = lag.report()["streams"][ARN]
    assert (figures["shards"], figures["maxMsBehindLatest"], figures["shardsBehind"]) == (1, 0, 0)


def test_what_a_batch_read_counts_shards_it_read_to_their_end_and_the_losses_it_went_on_past():
    """A shard read to its end leaves the offset in the same planning step that reports its batch: its
    records and a loss its read went on past (failOnDataLoss=false) still count for that batch."""
    lag = LagTracker()
    pos = Position.after("1")
    gone = ShardEnd(start=pos, reached=Position.shard_end(), records=7, bytes=70, losses=("aged out",))
    lossy = ShardEnd(start=pos, reached=pos, records=2, bytes=20, losses=("one", "two"), misplaced=3)
    lag.update(4, {(ARN, "s0"): gone, (ARN, "s1"): lossy, (ARN, "s2"): end(0)}, {ARN: ["s1", "s2"]})
    figures = lag.report()["streams"][ARN]
    assert figures["misplacedUserRecordsDropped"] == 3  # KPL user records outside their shard's range
    assert (figures["recordsRead"], figures["bytesRead"]) == (19, 190)
    assert (figures["shards"], figures["shardsWithDataLoss"]) == (2, 2)
    lag.update(5, {(ARN, "s1"): end(0, 1, 10)}, {ARN: ["s1", "s2"]})  # the next batch lost nothing
    assert lag.report()["streams"][ARN]["shardsWithDataLoss"] == 0


def test_an_older_batch_does_not_overwrite_a_newer_one():
    lag = LagTracker()
    lag.update(5, {(ARN, "s0"): end(0)}, {ARN: ["s0"]})
    lag.update(4, {(ARN, "s0"): end(9000)}, {ARN: ["s0"]})
    assert lag.report()["streams"][ARN]["maxMsBehindLatest"] == 0


def test_the_helpers_find_the_report_among_other_sources_in_every_form():
    lag = LagTracker()
    lag.update(0, {(ARN, "s0"): end(300)}, {ARN: ["s0"]})
    progress = {
        "batchId": 1,
        "sources": [
            {"description": "KafkaV2[Subscribe[x]]", "latestOffset": json.dumps({"x": {"0": 5}})},
            {"description": "kinesis", "latestOffset": json.dumps(lag.report())},
            {"description": "rate", "latestOffset": None},
        ],
    }
    for form in (progress, json.dumps(progress)):
        rows = metrics.lag_rows(form)
        assert [(r["streamName"], r["maxMsBehindLatest"], r["batch"]) for r in rows] == [("orders", 300, 0)]

    class Query:  # what StreamingQuery offers
        lastProgress = progress

    assert metrics.lag(Query())[ARN]["shardsBehind"] == 1
    assert metrics.lag(None) == {}
    assert metrics.lag({"sources": []}) == {}


def test_prometheus_text_escapes_labels_and_skips_missing_figures():
    rows = {
        'q"1': [
            {"streamArn": "arn:a/o", "streamName": "o\\x\n", "maxMsBehindLatest": 7, "shardsBehind": None}
        ]
    }
    text = metrics.prometheus_text(rows)
    assert (
        'pyspark_kinesis_max_ms_behind_latest{query="q\\"1",stream="o\\\\x\\n",stream_arn="arn:a/o"} 7'
        in text
    )
    assert "shards_behind" not in text
    assert metrics.prometheus_text({}) == ""


def test_the_listener_keeps_the_last_lag_per_query_and_writes_the_file(tmp_path):
    lag = LagTracker()
    lag.update(0, {(ARN, "s0"): end(300)}, {ARN: ["s0"]})
    path = tmp_path / "lag.prom"
    listener = metrics.LagListener(prometheus_file=str(path))
    progress = {"name": "etl", "sources": [{"latestOffset": json.dumps(lag.report())}]}
    listener.publish(progress)
    listener.publish({"name": "other", "sources": []})  # no Kinesis source: nothing published
    assert listener.published == 1
    text = path.read_text()
    assert text == listener.text()
    assert 'pyspark_kinesis_max_ms_behind_latest{query="etl",stream="orders",' in text
    assert 'pyspark_kinesis_shards_with_data_loss{query="etl",stream="orders",' in text
    assert list(tmp_path.iterdir()) == [path]  # the temporary file was renamed, not left behind


def test_a_failing_publisher_never_raises_into_spark(caplog):
    report = {"v": 1, "batch": 0, "streams": {ARN: {"shards": 1, "maxMsBehindLatest": 1}}}
    event = SimpleNamespace(progress={"name": "etl", "sources": [{"latestOffset": json.dumps(report)}]})
    listener = metrics.LagListener(prometheus_file="/nonexistent-dir/lag.prom")
    listener.onQueryProgress(event)
    assert "could not publish" in caplog.text


def test_on_pyspark_4_0_and_4_1_the_figures_come_from_the_batch_end_records(tmp_path):
    """There the progress carries the source's offset as `latestOffset` (no lag report, and it must not
    be taken for one); with metadataPath the listener computes the planner's figures from the records
    of the batch the progress names."""
    from tests.unit.planner_fakes import Harness, arn, one_stream, read

    h: Harness = one_stream()
    planner = h.planner()
    offset = planner.next_offset(planner.initial_offset(), None, None)
    ends = {
        ref: replace_behind(read(offset.state(ref).position, 7, tip=False), behind)
        for ref, behind in zip(
            sorted(r for refs in offset.tasks().values() for r in refs), (0, 900), strict=True
        )
    }
    h.run(offset, ends)
    from pyspark_kinesis.source.state.batch_log import BatchEndLog

    stored = BatchEndLog.open(str(tmp_path / "meta"))  # the records, as a query would have left them
    for task in offset.tasks():
        stored.write(BatchEndLog(h.store, "mem://").read(offset.token, offset.batch, task))
    text = json.dumps(offset.to_json())
    progress = {
        "batchId": 0,
        "sources": [{"description": "kinesis", "latestOffset": text, "endOffset": text}],
    }
    assert metrics.lag(progress) == {}  # an offset is not a lag report
    recorded = metrics.RecordedLag(str(tmp_path / "meta"))
    figures = metrics.lag(progress, recorded)[arn("a")]
    assert (
        figures["maxMsBehindLatest"] == 900 and figures["shardsBehind"] == 1 and figures["recordsRead"] == 14
    )
    listener = metrics.LagListener(metadata_path=str(tmp_path / "meta"))
    listener.publish(progress)
    assert listener.published == 1 and "pyspark_kinesis_max_ms_behind_latest" in listener.text()


def replace_behind(shard_end: ShardEnd, behind: int) -> ShardEnd:
    from dataclasses import replace

    return replace(shard_end, millis_behind=behind)
