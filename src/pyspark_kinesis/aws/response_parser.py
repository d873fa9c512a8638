"""botocore's response parsing, with GetRecords bodies handed to the connector's decoder (get_records.py).

Apart from get_records.py so that a process that makes clients but reads no records (a query's
planner, started afresh for every query) does not load the decoder's pyarrow.compute, numpy and
msgspec: they load with the first GetRecords response parsed.
"""

from __future__ import annotations

from typing import Any

from botocore.parsers import JSONParser, ResponseParserFactory

OUTPUT_SHAPE = "GetRecordsOutput"


class _JSONParser(JSONParser):
    def _do_parse(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        if shape is not None and shape.name == OUTPUT_SHAPE:
            from .get_records import decode

            return decode(response["body"])
        return super()._do_parse(response, shape)


class ParserFactory(ResponseParserFactory):
    """botocore's parser factory, with the JSON protocol's parser swapped for `_JSONParser`."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "json":
            return _JSONParser(**self._defaults)
        return super().create_parser(protocol_name)
