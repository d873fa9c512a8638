"""GetRecords responses decoded straight from the JSON body into columns.

botocore signs, sends and retries GetRecords (its credentials, SigV4, retry modes, connection pool),
but its generic parser walks every record through the service model, turns each timestamp into a
datetime and each payload into bytes one at a time: about 39 MB of payload per second per core,
while orjson + pybase64 do the same work at several times that (see docs/performance.md). So the
clients the connector builds carry a response-parser factory whose JSON parser hands GetRecords
bodies to `decode` and everything else (errors included) to botocore's own code.

A body that is not a complete GetRecords document (a connection cut mid-body) decodes to {}: it has
no "Records", and `KinesisProxy` asks again instead of reading it as "shard closed".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pybase64
from botocore.parsers import JSONParser, ResponseParserFactory

OUTPUT_SHAPE = "GetRecordsOutput"


@dataclass(slots=True)
class Records:
    """The records of one GetRecords response, column by column."""

    seqs: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # epoch seconds, as Kinesis sends them

    def __len__(self) -> int:
        return len(self.seqs)

    def any_starts_with(self, prefix: bytes) -> bool:
        """Whether some payload starts with `prefix` (a KPL aggregate's magic)."""
        return any(d.startswith(prefix) for d in self.data)


def decode(body: bytes) -> dict[str, Any]:
    """A GetRecords body -> {"Records": Records, "NextShardIterator", "MillisBehindLatest", "ChildShards"}."""
    try:
        doc = orjson.loads(body)
        raw = doc["Records"]
        records = Records(
            seqs=[r["SequenceNumber"] for r in raw],
            keys=[r["PartitionKey"] for r in raw],
            data=[pybase64.b64decode(r["Data"]) for r in raw],
            arrivals=[float(r["ApproximateArrivalTimestamp"]) for r in raw],
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return {}
    out: dict[str, Any] = {"Records": records}
    for key in ("NextShardIterator", "MillisBehindLatest", "ChildShards"):
        if doc.get(key) is not None:
            out[key] = doc[key]
    return out


class _JSONParser(JSONParser):
    def _do_parse(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        if shape is not None and shape.name == OUTPUT_SHAPE:
            return decode(response["body"])
        return super()._do_parse(response, shape)


class ParserFactory(ResponseParserFactory):
    """botocore's parser factory, with the JSON protocol's parser swapped for `_JSONParser`."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "json":
            return _JSONParser(**self._defaults)
        return super().create_parser(protocol_name)
