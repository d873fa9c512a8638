"""Option names of other Kinesis connectors, accepted as aliases of ours.

People move pipelines from AWS's spark-sql-kinesis-connector (options prefixed `kinesis.`) or from
Databricks' connector; where their option means the same as one of ours, its name works here too, so a
migration starts by changing the format name. A few values are converted (Databricks' durations like
"10s", rates in MB/s, awslabs' seconds); options without an equivalent are not aliased, and stay
rejected as unknown options (docs/migration.md says why, and is checked against this table by a test).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import OptionError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")
_UNIT_MS = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
    **dict.fromkeys(("h", "hour", "hours"), 3_600_000),
}


def duration_ms(option: str, text: str) -> str:
    """ "10s", "500ms", "1 minute" -> milliseconds, as the canonical option's text."""
    match = _DURATION.match(text.lower())
    if match is None or match.group(2) not in _UNIT_MS:
        raise OptionError(option, f"'{text}' is not a duration", "Write it with a unit, like 10s or 500ms.")
    return str(round(float(match.group(1)) * _UNIT_MS[match.group(2)]))


def seconds_ms(option: str, text: str) -> str:
    """A whole number of seconds -> milliseconds."""
    try:
        return str(round(float(text.strip()) * 1000))
    except ValueError:
        raise OptionError(option, f"'{text}' is not a number of seconds", "Give a number, like 10.") from None


def mb_per_second(option: str, text: str) -> str:
    """MB/s (Databricks' maxFetchRate) -> bytes per second (1 MB = 1,000,000 bytes)."""
    try:
        return str(round(float(text.strip()) * 1_000_000))
    except ValueError:
        raise OptionError(option, f"'{text}' is not a rate in MB/s", "Give a number, like 1.0.") from None


_AWSLABS_CONSUMER_TYPES = {"getrecords": "polling", "subscribetoshard": "efo"}


def awslabs_consumer_type(option: str, text: str) -> str:
    """awslabs' GetRecords / SubscribeToShard -> polling / efo."""
    found = _AWSLABS_CONSUMER_TYPES.get(text.strip().lower())
    if found is None:
        raise OptionError(
            option, f"'{text}' is not GetRecords or SubscribeToShard", "Give one of those (or consumerType)."
        )
    return found


@dataclass(frozen=True)
class Alias:
    canonical: str
    origin: str  # whose option name it is, for docs and messages
    convert: Callable[[str, str], str] | None = (
        None  # (alias as given, value) -> the canonical option's value
    )


AWSLABS = "awslabs spark-sql-kinesis-connector"
DATABRICKS = "Databricks"

ALIASES: dict[str, Alias] = {
    # AWS's connector: the same names under a `kinesis.` prefix, and a few of its own.
    "kinesis.streamName": Alias("streamName", AWSLABS),
    "kinesis.region": Alias("region", AWSLABS),
    "kinesis.kinesisRegion": Alias("region", AWSLABS),
    "kinesis.endpointUrl": Alias("endpointUrl", AWSLABS),
    "kinesis.startingPosition": Alias("startingPosition", AWSLABS),
    "kinesis.failOnDataLoss": Alias("failOnDataLoss", AWSLABS),
    "kinesis.maxFetchRecordsPerShard": Alias("maxRecordsPerShard", AWSLABS),
    "kinesis.maxFetchTimePerShardSec": Alias("maxFetchTimeMs", AWSLABS, seconds_ms),
    "kinesis.describeShardInterval": Alias("shardDiscoveryIntervalMs", AWSLABS, duration_ms),
    "kinesis.metadataPath": Alias("metadataPath", AWSLABS),
    "kinesis.stsRoleArn": Alias("roleArn", AWSLABS),
    "kinesis.stsSessionName": Alias("roleSessionName", AWSLABS),
    "kinesis.stsEndpointUrl": Alias("stsEndpointUrl", AWSLABS),
    "kinesis.awsAccessKeyId": Alias("awsAccessKeyId", AWSLABS),
    "kinesis.awsSecretKey": Alias("awsSecretKey", AWSLABS),
    "kinesis.consumerType": Alias("consumerType", AWSLABS, awslabs_consumer_type),
    "kinesis.consumerName": Alias("consumerName", AWSLABS),
    # Databricks' connector.
    "streamARN": Alias("streamName", DATABRICKS),
    "endpoint": Alias("endpointUrl", DATABRICKS),
    "initialPosition": Alias("startingPosition", DATABRICKS),
    "awsAccessKey": Alias("awsAccessKeyId", DATABRICKS),
    "roleExternalId": Alias("externalId", DATABRICKS),
    "stsEndpoint": Alias("stsEndpointUrl", DATABRICKS),
    "maxFetchDuration": Alias("maxFetchTimeMs", DATABRICKS, duration_ms),
    "shardFetchInterval": Alias("idlePollIntervalMs", DATABRICKS, duration_ms),
    "maxFetchRate": Alias("shardReadBytesPerSecond", DATABRICKS, mb_per_second),
    "shardsPerTask": Alias("maxShardsPerTask", DATABRICKS),
    "consumerMode": Alias("consumerType", DATABRICKS),
}
