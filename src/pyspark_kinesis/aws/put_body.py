"""PutRecords requests encoded, and their answers decoded, by the connector instead of botocore.

Why: for one 500-record call of 1 KB records botocore spends about 4 ms validating the parameters (a
walk over every record's members), 10 ms serializing them (its generic JSON serializer, a shape lookup
and a standard-library base64 per record) and 4 ms parsing the answer (a shape walk per record's
result): the sink's CPU per MB was below a plain boto3 loop's, which pays the same (docs/performance.md,
"The sink's CPU per MB written"). The sink builds every record itself and checks what Kinesis would
refuse before a call (`sink.producing.invalid_reason`), so none of that generic work tells it anything:
the records are encoded with orjson and pybase64 (under 1 ms) and the answer read with orjson (about 0.1
ms), into exactly what botocore would have made of them.

Only the sink's client gets it (`client.kinesis_client(..., agent="sink")`), built with
`parameter_validation=False`: botocore's serializer is then the client's `_serializer` itself, which
`encode_put_records` wraps. A botocore whose client has no such attribute keeps its own (said once);
PYSPARK_KINESIS_STOCK_BOTOCORE=1 keeps botocore's own validation, serializer and parser.
"""

from __future__ import annotations

from typing import Any

import orjson
import pybase64

OPERATION, OUTPUT_SHAPE = "PutRecords", "PutRecordsOutput"
_MEMBERS = ("PartitionKey", "ExplicitHashKey")


def _record(record: dict[str, Any]) -> dict[str, Any]:
    data = record["Data"]
    out = {"Data": pybase64.b64encode(data.encode() if isinstance(data, str) else data).decode()}
    for member in _MEMBERS:
        if member in record:
            out[member] = record[member]
    return out


class PutRecordsSerializer:
    """botocore's serializer for every operation but PutRecords, whose records are encoded here: the
    request is botocore's own for the call without its records (method, path, headers, the stream's
    name or ARN), with the records put into its body."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def serialize_to_request(self, parameters: dict[str, Any], operation_model: Any) -> dict[str, Any]:
        if operation_model.name != OPERATION:
            return self._inner.serialize_to_request(parameters, operation_model)
        request = self._inner.serialize_to_request({**parameters, "Records": []}, operation_model)
        body = orjson.loads(request["body"])
        body["Records"] = [_record(r) for r in parameters["Records"]]
        request["body"] = orjson.dumps(body)
        return request


def encode_put_records(client: Any) -> bool:
    """Give the client the connector's PutRecords encoding; False (client unchanged) when its
    serializer is not where or what this expects."""
    inner = getattr(client, "_serializer", None)
    if inner is None or not callable(getattr(inner, "serialize_to_request", None)):
        return False
    if type(inner).__name__ == "ParamValidationDecorator":  # (validation on: the records must reach it)
        return False
    client._serializer = PutRecordsSerializer(inner)
    return True


def decode_put_records(body: bytes) -> dict[str, Any]:
    """A PutRecords answer as botocore parses it: its members are strings and one integer, so the JSON
    is the parsed value once its nulls are left out as botocore leaves them out (some servers answer
    `"ErrorCode": null` for a record written)."""
    parsed: dict[str, Any] = orjson.loads(body) if body else {}
    parsed = {k: v for k, v in parsed.items() if v is not None}
    if isinstance(parsed.get("Records"), list):
        parsed["Records"] = [{k: v for k, v in r.items() if v is not None} for r in parsed["Records"]]
    return parsed
