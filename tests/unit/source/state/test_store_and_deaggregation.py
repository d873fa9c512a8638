from __future__ import annotations

import threading

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator

from pyspark_kinesis.errors import OptionError
from pyspark_kinesis.kpl import deaggregate
from pyspark_kinesis.source.state.store import FsspecStore, LocalStore, open_store


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_first_writer_wins_under_a_race(tmp_path, kind):
    store = LocalStore(str(tmp_path)) if kind == "local" else FsspecStore(f"memory://race-{tmp_path.name}")
    winners = []
    barrier = threading.Barrier(8)

    def attempt(i):
        barrier.wait()
        if store.put_if_absent("tok/batch-000000000001/task-00000.json", f"attempt {i}".encode()):
            winners.append(i)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert store.get("tok/batch-000000000001/task-00000.json") == f"attempt {winners[0]}".encode()
    assert store.list_folders("tok") == ["batch-000000000001"]
    store.delete_folder("tok/batch-000000000001")
    assert store.get("tok/batch-000000000001/task-00000.json") is None


def test_open_store_picks_the_backend(tmp_path):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    assert isinstance(open_store("memory://x"), FsspecStore)


def test_unwritable_location_is_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OptionError, match="metadataPath"):
        LocalStore(str(blocker / "sub")).check_writable()


def test_deaggregation_matches_the_reference_aggregator():
    aggregator = RecordAggregator()
    users = [
        (f"key-{i}", None if i % 3 else str(i * 1000), f"payload-{i}".encode() * (i + 1)) for i in range(50)
    ]
    for key, hash_key, data in users:
        aggregator.add_user_record(key, data, hash_key)
    _pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    assert deaggregate(blob) == users


def test_plain_and_corrupt_records_pass_through():
    assert deaggregate(b"just a record") is None
    aggregator = RecordAggregator()
    aggregator.add_user_record("k", b"v")
    _pk, _ehk, blob = aggregator.clear_and_get().get_contents()
    assert deaggregate(blob[:-1] + bytes([blob[-1] ^ 1])) is None  # checksum mismatch
