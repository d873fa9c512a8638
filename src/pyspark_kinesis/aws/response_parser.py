"""botocore's response parsing, with GetRecords bodies handed to the connector's decoder (get_records.py)
and PutRecords answers read with orjson (put_body.py: what botocore's shape walk makes of them).

Apart from get_records.py so that a process that makes clients but reads no records (a query's
planner, started afresh for every query) does not load the decoder's pyarrow.compute, numpy and
msgspec: they load with the first GetRecords response parsed.
"""

from __future__ import annotations

from typing import Any

from botocore.parsers import JSONParser, ResponseParserFactory

from ..switches import STOCK_BOTOCORE
from . import put_body

OUTPUT_SHAPE = "GetRecordsOutput"
# DynamoDB Streams' GetRecords answer has a shape of the same name (a parser does not know its service):
# only Kinesis's has this member, and only Kinesis's bodies are the decoder's.
KINESIS_MEMBER = "MillisBehindLatest"


class _JSONParser(JSONParser):
    def _do_parse(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        if shape is not None and shape.name == OUTPUT_SHAPE and KINESIS_MEMBER in shape.members:
            from .get_records import decode

            return decode(response["body"])
        if shape is not None and shape.name == put_body.OUTPUT_SHAPE and not STOCK_BOTOCORE.on():
            parsed = put_body.decode_put_records(response["body"])
            inject = getattr(self, "_inject_response_metadata", None)  # (as botocore's own _do_parse)
            if inject is not None:
                inject(parsed, response["headers"])
            return parsed
        return super()._do_parse(response, shape)


class ParserFactory(ResponseParserFactory):
    """botocore's parser factory, with the JSON protocol's parser swapped for `_JSONParser`."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "json":
            return _JSONParser(**self._defaults)
        return super().create_parser(protocol_name)
