"""The read path with every tuning switch off (switches.py): stock botocore (its own data loader and
body reads), no `gc.freeze()`, in the driver's planner process and
the executors' workers alike (local[2]: they inherit the driver's environment). A query reads a
resharded stream exactly once, parents before children, as with the tunings on."""

from __future__ import annotations

import pytest

from tests.driver import config, output_rows, run_driver
from tests.helpers import assert_exactly_once, assert_shard_order, client, new_stream, open_shards, put, split

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

OFF = {
    "PYSPARK_KINESIS_STOCK_BOTOCORE": "1",
    "PYSPARK_KINESIS_GC_FREEZE": "0",
}


def test_a_query_with_every_tuning_switch_off_reads_exactly_once(kinesalite, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 200)
    split(kin, stream, open_shards(kin, stream)[0])
    expected += put(kin, stream, 200, 200)
    run_driver(config(kinesalite.endpoint, stream, tmp_path, trigger="availableNow"), env=OFF)
    rows = output_rows(tmp_path / "out")
    assert_exactly_once(rows, expected)
    assert_shard_order(rows)
