"""Errors the connector raises on purpose.

Every message names the option or resource at fault and says what to do, because the user sees it
through Spark's error wrapping, far from this code. Messages never contain secret option values.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = [
    "KinesisConnectorError",
    # at query start
    "CheckpointFormatError",
    "CheckpointMismatchError",
    "OptionError",
    "StreamAccessError",
    "StreamNotFoundError",
    "StreamRecreatedError",
    # while a query runs
    "CorruptRecordError",
    "DataLossError",
    "SinkWriteError",
    # the boundary with Spark
    "surfaced",
    "surfaced_rows",
]

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class KinesisConnectorError(Exception):
    """Base class: a problem the user can act on (bad option, missing stream, lost side records)."""


class OptionError(KinesisConnectorError, ValueError):
    """An option is missing, unknown or has an invalid value."""

    def __init__(self, option: str, problem: str, fix: str) -> None:
        self.option = option
        super().__init__(f"Kinesis option '{option}': {problem}. {fix}")


class StreamAccessError(KinesisConnectorError):
    """The stream cannot be reached: missing, endpoint down, or credentials refused."""


class StreamNotFoundError(StreamAccessError):
    """The stream does not exist: never created, deleted, or named wrongly."""


class StreamRecreatedError(StreamAccessError):
    """The stream was deleted and re-created under the same name (same ARN, new creation time)."""


class SchemaVersionNotFoundError(StreamAccessError):
    """The schema registry answered that it has no such schema version. When a record's header names
    it, that is the record's own fault (a decode error); any other registry failure (throttling, a
    broken connection, refused credentials) is not, and fails the task for Spark to retry."""


class CheckpointMismatchError(KinesisConnectorError):
    """The query's checkpoint and the batch-end records under metadataPath disagree."""


class CheckpointFormatError(CheckpointMismatchError):
    """An offset or a batch-end record in a format this version cannot read (written by a newer one)."""


class DataLossError(KinesisConnectorError):
    """Records a committed batch covered are no longer in the stream (past retention)."""


class CorruptRecordError(KinesisConnectorError):
    """A record that starts like a KPL aggregate does not parse, and onCorruptAggregate=fail."""


class SinkWriteError(KinesisConnectorError):
    """Records could not be written within maxRetryTimeMs, or a record is invalid."""


# -- the boundary with Spark ---------------------------------------------------------------------------
# Spark prints the traceback of what a method it calls raised, inside its own error, and PySpark prints
# that again: with the connector's frames and the errors chained inside (botocore's, the planner's), a
# one-line message came last after 30-50 lines. What the user can act on is the message, so an error
# of ours leaves the method Spark called without them (they go to the debug log).


def _bare(exc: KinesisConnectorError) -> None:
    # (then raised by a line of its own, with nothing after it: Python marks no part of that line)
    log.debug("%s (the trace Spark is not shown)", type(exc).__name__, exc_info=exc)
    exc.__cause__ = None
    exc.__suppress_context__ = True
    exc.with_traceback(None)


def surfaced(method: F) -> F:
    """A method Spark calls: a connector error leaves it as its message, without our frames or chain."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except KinesisConnectorError as exc:
            _bare(exc)
            raise exc from None

    return call  # type: ignore[return-value]


def surfaced_rows(method: F) -> F:
    """`surfaced` for a method that yields (a task's `read`/`write` input): the same, for each step."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
        try:
            yield from method(*args, **kwargs)
        except KinesisConnectorError as exc:
            _bare(exc)
            raise exc from None

    return call  # type: ignore[return-value]
