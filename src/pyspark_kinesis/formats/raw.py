"""`valueFormat=raw`: the payload as it is. On read the rows are the Kinesis columns (`data` holds the
bytes); on write a row's `data` column (binary, or text written as UTF-8) is the payload."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql.types import BinaryType, DataType, StringType, StructField, StructType

from ..config.aws_settings import AwsSettings
from ..config.declared import Option
from ..config.value_format import ValueFormat
from ..errors import OptionError
from . import ValueEncoder


class RawCodec:
    """Bytes in, bytes out: nothing to look up, decode or encode."""

    payload_column = "data"
    read_options: tuple[Option, ...] = ()
    write_options: tuple[Option, ...] = ()

    def settings(self, opts: Mapping[str, str], *, writing: bool) -> None:
        return None

    def for_reading(self, value: ValueFormat, aws: AwsSettings) -> ValueFormat:
        return value

    def added_fields(self, value: ValueFormat, taken: frozenset[str]) -> list[StructField]:
        return []

    def decode(self, value: ValueFormat, aws: AwsSettings, batch: pa.RecordBatch) -> list[pa.Array]:
        return []

    def check_columns(self, fields: dict[str, DataType]) -> None:
        if "data" not in fields:
            raise OptionError(
                "data", "the DataFrame has no 'data' column", "Select the payload AS data (binary or string)."
            )
        if not isinstance(fields["data"], BinaryType | StringType):
            raise OptionError(
                "data", f"column 'data' is {fields['data'].simpleString()}", "Cast it to binary or string."
            )

    def for_writing(self, value: ValueFormat, aws: AwsSettings, schema: StructType) -> ValueFormat:
        return value

    def encoder(self, value: ValueFormat) -> ValueEncoder | None:
        return None
