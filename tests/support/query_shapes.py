"""The query shapes users write over the Kinesis source, each with its batch oracle.

A shape builds a query from its inputs: one or two Kinesis sources (the same code serves a streaming
read and `spark.read`) and, for the mixed shape, Spark's `rate-micro-batch` source. Its oracle is the
same query run as a batch over everything put: the streaming output, folded as the output mode says
(append: every row once; update: each key's last value), must equal it row for row. Shapes that hold
state (a watermark and `dropDuplicates`, windows, a join, a Python stateful operator) make Spark run
no-data batches and commit offsets that did not move; shapes of two sources make batches only one
source has data for. Records are JSON with an event time of their own (`ts`, seconds), so watermarks
move with what is put, not with the wall clock: see `Records`.

Used by tests/integration/test_query_shapes.py (in-process), tests/integration/driver_app.py (a driver
the tests SIGKILL) and the chaos suite.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

BASE_TS = 1_767_225_600  # 2026-01-01T00:00:00Z: event times are BASE_TS + the record's number
FLUSH_TS = BASE_TS + 100_000  # a flush record's event time: moves every watermark past the data
CUTOFF_TS = BASE_TS + 50_000  # rows (windows) from here on are the flush records' own: not compared
RECORD_SCHEMA = "id BIGINT, key STRING, ts BIGINT"


@dataclass
class Records:
    """What a test puts on one stream: records numbered from `start`, every seventh put twice (a
    duplicate payload is two Kinesis records: the query sees both), and flush records."""

    tag: str
    next_id: int = 0
    payloads: list[bytes] = field(default_factory=list)

    def batch(self, count: int) -> list[tuple[bytes, str]]:
        out = []
        for n in range(self.next_id, self.next_id + count):
            body = json.dumps({"id": n, "key": f"k{n % 4}", "ts": BASE_TS + n}).encode()
            out.append((body, f"p{n % 8}"))
            if n % 7 == 3:
                out.append((body, f"p{n % 8}"))
        self.next_id += count
        return out

    def flush(self) -> list[tuple[bytes, str]]:
        """One record far ahead in event time: windows close, join state can go."""
        body = json.dumps({"id": -1, "key": "flush", "ts": FLUSH_TS}).encode()
        return [(body, "flush")]


def put_records(kinesis: Any, stream: str, records: Sequence[tuple[bytes, str]]) -> None:
    for i in range(0, len(records), 100):
        chunk = records[i : i + 100]
        response = kinesis.put_records(
            StreamName=stream, Records=[{"Data": d, "PartitionKey": k} for d, k in chunk]
        )
        assert response.get("FailedRecordCount", 0) == 0, "local Kinesis rejected records"


def parsed(df: Any) -> Any:
    """A Kinesis read's rows with the record's own fields and event time (`at`)."""
    from pyspark.sql import functions as F

    return (
        df.select(
            F.from_json(F.col("data").cast("string"), RECORD_SCHEMA).alias("r"),
            "shardId",
            "sequenceNumber",
            "subSequenceNumber",
        )
        .select("r.*", "shardId", "sequenceNumber", "subSequenceNumber")
        .withColumn("at", F.timestamp_seconds("ts"))
    )


def _stateless(inputs: dict[str, Any]) -> Any:
    return parsed(inputs["a"]).select("id", "shardId", "sequenceNumber", "subSequenceNumber")


def _drop_duplicates(inputs: dict[str, Any]) -> Any:
    return (
        parsed(inputs["a"]).withWatermark("at", "10 seconds").dropDuplicates(["id", "at"]).select("id", "ts")
    )


def _drop_duplicates_within(inputs: dict[str, Any]) -> Any:
    return (
        parsed(inputs["a"])
        .withWatermark("at", "10 seconds")
        .dropDuplicatesWithinWatermark(["id", "ts"])
        .select("id", "ts")
    )


def _drop_duplicates_batch(inputs: dict[str, Any]) -> Any:
    """A batch query has no watermark: `dropDuplicatesWithinWatermark` is `dropDuplicates` there."""
    return parsed(inputs["a"]).dropDuplicates(["id", "ts"]).select("id", "ts")


def _windows(inputs: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    return (
        parsed(inputs["a"])
        .withWatermark("at", "10 seconds")
        .groupBy(F.window("at", "5 seconds"), "key")
        .agg(F.count("*").alias("n"), F.sum("id").alias("ids"))
        .select(F.col("window.start").cast("long").alias("start"), "key", "n", "ids")
    )


def _join(inputs: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    a = parsed(inputs["a"]).withWatermark("at", "10 seconds").alias("a")
    b = parsed(inputs["b"]).withWatermark("at", "10 seconds").alias("b")
    return a.join(
        b,
        F.expr("a.id = b.id AND b.at BETWEEN a.at - INTERVAL 5 SECONDS AND a.at + INTERVAL 5 SECONDS"),
    ).select(
        F.col("a.id").alias("id"),
        F.col("a.sequenceNumber").alias("seq_a"),
        F.col("b.sequenceNumber").alias("seq_b"),
        F.col("a.subSequenceNumber").alias("sub_a"),
        F.col("b.subSequenceNumber").alias("sub_b"),
    )


def _union(inputs: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    def side(df: Any, name: str) -> Any:
        return parsed(df).select(
            F.lit(name).alias("src"), "id", "shardId", "sequenceNumber", "subSequenceNumber"
        )

    return side(inputs["a"], "a").unionByName(side(inputs["b"], "b"))


def _with_rate(inputs: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    kinesis = parsed(inputs["a"]).select(F.lit("kinesis").alias("src"), "id", "sequenceNumber")
    rate = inputs["rate"].select(
        F.lit("rate").alias("src"), F.col("value").alias("id"), F.lit("").alias("sequenceNumber")
    )
    return kinesis.unionByName(rate)


def _count_state(key: tuple, frames: Iterable[Any], state: Any) -> Iterable[Any]:
    import pandas as pd

    count = state.get[0] if state.exists else 0
    ids = state.get[1] if state.exists else 0
    for frame in frames:
        count += len(frame)
        ids += int(frame["id"].sum())
    state.update((count, ids))
    yield pd.DataFrame({"key": [key[0]], "n": [count], "ids": [ids]})


def _python_state(inputs: dict[str, Any]) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        parsed(inputs["a"])
        .select("key", "id")
        .groupBy("key")
        .applyInPandasWithState(
            _count_state,
            "key STRING, n LONG, ids LONG",
            "n LONG, ids LONG",
            "update",
            GroupStateTimeout.NoTimeout,
        )
    )


def _python_state_batch(inputs: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    return parsed(inputs["a"]).groupBy("key").agg(F.count("*").alias("n"), F.sum("id").alias("ids"))


@dataclass(frozen=True)
class Shape:
    """A query over `inputs` ("a", "b": Kinesis streams; "rate"), its output mode, how a row is keyed in
    update mode, the rows left out of the comparison (the flush records', the rate source's), and a
    batch form where the streaming one has none (a Python stateful operator)."""

    name: str
    inputs: tuple[str, ...]
    build: Callable[[dict[str, Any]], Any]
    mode: str = "append"
    key: tuple[str, ...] = ()
    stateful: bool = True
    batch_build: Callable[[dict[str, Any]], Any] | None = None
    compared: Callable[[dict[str, Any]], bool] = lambda row: (
        row.get("id", 0) >= 0 and row.get("src") != "rate"
    )
    # Whether its output needs a flush record to be complete (windows in append mode close only when
    # the watermark passes them). The flush comes alone, once everything else was read: records read
    # after it would be late, and dropped.
    flush: bool = False

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(i for i in self.inputs if i != "rate")

    def oracle(self, spark: Any, batch_inputs: dict[str, Any]) -> Counter:
        """The rows the same query gives as a batch over everything put."""
        build = self.batch_build or self.build
        return self.fold([[row.asDict() for row in build(batch_inputs).collect()]])

    def fold(self, batches: Iterable[list[dict[str, Any]]]) -> Counter:
        """The streaming output as a multiset of rows: every row (append), or each key's last row in
        batch order (update); rows the comparison leaves out dropped."""
        if self.mode == "append":
            return Counter(_frozen(row) for rows in batches for row in rows if self.compared(row))
        last: dict[tuple, dict[str, Any]] = {}
        for rows in batches:
            for row in rows:
                last[tuple(row[k] for k in self.key)] = row
        return Counter(_frozen(row) for row in last.values() if self.compared(row))


def _frozen(row: dict[str, Any]) -> tuple:
    return tuple(sorted(row.items()))


def _window_closed(row: dict[str, Any]) -> bool:
    return row["start"] < CUTOFF_TS and row["key"] != "flush"


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("stateless", ("a",), _stateless, stateful=False),
        Shape("dropDuplicates", ("a",), _drop_duplicates),
        Shape(
            "dropDuplicatesWithinWatermark",
            ("a",),
            _drop_duplicates_within,
            batch_build=_drop_duplicates_batch,
        ),
        Shape("windowAppend", ("a",), _windows, compared=_window_closed, flush=True),
        Shape("windowUpdate", ("a",), _windows, mode="update", key=("start", "key"), compared=_window_closed),
        Shape("join", ("a", "b"), _join),
        Shape("union", ("a", "b"), _union, stateful=False),
        Shape("withRate", ("a", "rate"), _with_rate, stateful=False),
        Shape(
            "pythonState",
            ("a",),
            _python_state,
            mode="update",
            key=("key",),
            batch_build=_python_state_batch,
            compared=lambda row: row["key"] != "flush",
        ),
    )
}
