"""What an AWS error means for the connector: retry it, re-obtain an iterator, or stop and tell the user.

botocore already retries throttling and 5xx within one call (its retry modes); these sets decide
what the connector's own loops do with the errors left after botocore gave up. They live here, beside
the code that makes the calls, so that no other layer needs to know AWS error codes.
"""

from __future__ import annotations

import builtins
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError
from urllib3.exceptions import HTTPError

from ..errors import KinesisConnectorError, StreamAccessError

# Worth another try after a pause: throttling, and the service's own transient failures.
RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "ThrottlingException",
        "KMSThrottlingException",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)

# The credentials (or the role behind them) were refused: retrying cannot help, the user must act.
CREDENTIAL_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "AccessDeniedException",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
    }
)

# Exceptions a Kinesis call may raise that the fetch loop inspects (everything else propagates).
CALL_ERRORS = (ClientError, ConnectionError, HTTPClientError)
# ...and those of an enhanced fan-out subscription's event stream (a connection that breaks mid-stream).
STREAM_ERRORS = (*CALL_ERRORS, HTTPError, OSError)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ClientError ('' for anything else)."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def is_retryable(exc: BaseException) -> bool:
    """A connection failure, throttling or a 5xx: the call may succeed if made again later."""
    if isinstance(exc, ConnectionError | HTTPClientError):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return error_code(exc) in RETRYABLE_CODES or status >= 500
    return False


def is_expired_iterator(exc: BaseException) -> bool:
    """The shard iterator is older than 5 minutes (or unknown to the server): obtain a new one."""
    return error_code(exc) == "ExpiredIteratorException"


def is_not_found(exc: BaseException) -> bool:
    """The stream, or one of its shards, does not exist (deleted, or a shard past retention)."""
    return error_code(exc) == "ResourceNotFoundException"


def is_future_timestamp(exc: BaseException) -> bool:
    """GetShardIterator AT_TIMESTAMP refused because the time is ahead of the service's clock (a start
    pinned by a driver whose clock runs ahead, or a user's timestamp not reached yet)."""
    if error_code(exc) != "InvalidArgumentException":
        return False
    message = str(exc.response.get("Error", {}).get("Message", "")).lower()  # type: ignore[attr-defined]
    return "future" in message or "greater than the current" in message


def is_foreign_sequence_number(exc: BaseException) -> bool:
    """A sequence number the shard does not know: from another stream of the same name (deleted and
    re-created), or of a record that aged out (DynamoDB Streams says so by name: TrimmedDataAccess)."""
    if error_code(exc) == "TrimmedDataAccessException":
        return True
    if error_code(exc) not in ("InvalidArgumentException", "ResourceNotFoundException"):
        return False
    message = str(exc.response.get("Error", {}).get("Message", "")).lower()  # type: ignore[attr-defined]
    return "sequencenumber" in message.replace(" ", "") or "sequence number" in message


# -- errors across the fan-out agent's socket --------------------------------------------------------
def encode_error(exc: BaseException) -> tuple[str, Any, str]:
    """An exception as plain values (botocore's exceptions do not all survive pickling)."""
    if isinstance(exc, ClientError):
        return ("client", exc.response, exc.operation_name)
    if isinstance(exc, KinesisConnectorError):
        return ("connector", str(exc), "")
    if isinstance(exc, OSError | HTTPError | BotoCoreError):
        return ("broken", f"{exc.__class__.__name__}: {exc}", "")
    return ("fatal", f"{exc.__class__.__name__}: {exc}", "")


def decode_error(encoded: tuple[str, Any, str]) -> Exception:
    """What `encode_error` made, as the reader handles it: a ClientError is the service's answer, a
    ConnectionError a broken subscription (subscribe again), a StreamAccessError the user's to fix."""
    kind, value, operation = encoded
    if kind == "client":
        return ClientError(value, operation)
    if kind == "connector":
        return StreamAccessError(value)
    if kind == "broken":
        return builtins.ConnectionError(f"enhanced fan-out subscription broken: {value}")
    return RuntimeError(f"the enhanced fan-out agent failed: {value}")
