"""What `service=dynamodb` changes in a source's options: a DynamoDB table's stream is read by the same
source (issue #66), so the options mean what they mean for Kinesis, with these differences only.

- `streamName`/`streams` name tables (or their streams' ARNs), not Kinesis streams (`config.stream_specs`).
- The rows default to the change columns (`valueFormat=dynamodb`, see `formats.dynamodb`) after the
  Kinesis columns that mean something for a table's stream (`kinesisColumns`): a change has no
  partition key, no KPL sub-sequence number, and its payload is read into the change columns.
- DynamoDB Streams has no enhanced fan-out: consumerType=efo and the consumer options are refused.
- A quiet shard is looked at every `IDLE_POLL_MS` by default, not 500 ms: the service answers empty pages
  mid-shard, so a look takes up to three GetRecords to say "nothing new" (`aws.tip_look.look_past_tip`),
  and three every 500 ms would pass the service's five reads per second of a shard.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import OptionError

# The Kinesis columns a table's change carries, in the rows' order (approximateArrivalTimestamp holds
# the change's ApproximateCreationDateTime; streamArn the stream's ARN, whose table is tableName).
DYNAMODB_COLUMNS = "shardId,sequenceNumber,approximateArrivalTimestamp,streamArn"
_NOT_FOR_TABLES = ("consumerName", "consumerArn", "fanOutRelay")
IDLE_POLL_MS = 1500  # (up to 3 GetRecords a look: 2 calls per second of an idle shard, as Kinesis's 500 ms)


def for_dynamodb(opts: Mapping[str, str]) -> dict[str, str]:
    """The options with a table's stream's defaults; an option that cannot apply is an OptionError."""
    if (opts.get("consumerType") or "polling").strip().lower() != "polling":
        raise OptionError(
            "consumerType",
            "DynamoDB Streams has no enhanced fan-out (service=dynamodb reads with GetRecords)",
            "Remove consumerType.",
        )
    for key in _NOT_FOR_TABLES:
        if key in opts:
            raise OptionError(
                key, "applies to Kinesis enhanced fan-out only", f"Remove {key} for service=dynamodb."
            )
    out = dict(opts)
    out.setdefault("valueFormat", "dynamodb")
    out.setdefault("kinesisColumns", DYNAMODB_COLUMNS)
    out.setdefault("idlePollIntervalMs", str(IDLE_POLL_MS))
    return out
