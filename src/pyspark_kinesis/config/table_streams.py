"""Which of the options' streams a stream ARN belongs to, when a table named by name has had several.

A DynamoDB table whose stream is disabled and enabled again gets a new stream with a new ARN, and
ARNs are the streams' identities in offsets and batch-end records. The user named the table, not a
stream: every stream the table has had is that entry's, so a query follows the table from one stream
to the next (`source.driver.stream_set`) and its executors find the spec of a stream that was not the
table's when the query started. A stream named by ARN is that stream only, and a Kinesis stream has
one ARN for its name's lifetime (a re-created one is told apart by its creation time instead).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .stream_specs import DYNAMODB, StreamSpec


def _parts(arn: str) -> tuple[str, str, str] | None:
    """(region, account, table) of a DynamoDB stream ARN, None for anything else."""
    head, sep, rest = arn.partition(":table/")
    fields = head.split(":")
    if not sep or "/stream/" not in rest or len(fields) != 5 or fields[2] != "dynamodb":
        return None
    return fields[3], fields[4], rest.split("/stream/", 1)[0]


def follows_table(spec: StreamSpec) -> bool:
    """Whether `spec` names a DynamoDB table by name: a query follows it from stream to stream."""
    return spec.service == DYNAMODB and not spec.by_arn


def _follows(spec: StreamSpec, key: str) -> bool:
    """Whether `key` is a stream of the table `spec` names by name (same table, region and account)."""
    if not follows_table(spec):
        return False
    parts = _parts(key)
    if parts is None:
        return False
    mine = _parts(spec.arn) if spec.arn else None
    return parts[0] == spec.aws.region and parts[2] == spec.name and (mine is None or mine[1] == parts[1])


def owner_of(specs: Iterable[StreamSpec], key: str) -> StreamSpec | None:
    """The options' entry stream `key` belongs to: the one with that ARN, else the table named by name
    whose stream it is (or was). None when the options no longer name it."""
    specs = tuple(specs)
    exact = next((spec for spec in specs if spec.arn == key), None)
    return exact or next((spec for spec in specs if _follows(spec, key)), None)


def spec_of(specs: Iterable[StreamSpec], key: str) -> StreamSpec | None:
    """The spec to read stream `key` with: its entry's, with `key` as its ARN. Another stream of a table
    has no creation time learned at query start (a DynamoDB stream is never re-created under its ARN)."""
    owner = owner_of(specs, key)
    if owner is None or owner.arn == key:
        return owner
    return replace(owner, arn=key, created_ms=None)
