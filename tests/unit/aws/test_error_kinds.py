"""What an AWS error means to the connector (aws/error_kinds.py), told from botocore's own exception
objects: retry, obtain a new iterator, a start ahead of the service's clock, a sequence number of
another stream or past retention, and errors carried across the fan-out agent's socket as plain
values and back."""

from __future__ import annotations

import builtins

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from urllib3.exceptions import ProtocolError

from pyspark_kinesis.aws import error_kinds
from pyspark_kinesis.errors import StreamAccessError, StreamNotFoundError


def client_error(code: str | None, message: str | None = None, status: int | None = None) -> ClientError:
    response: dict = {}
    if code is not None:
        response["Error"] = {"Code": code} | ({"Message": message} if message is not None else {})
    if status is not None:
        response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, "GetRecords")


def test_the_error_code_is_a_client_errors_own_and_empty_otherwise():
    assert error_kinds.error_code(client_error("ExpiredIteratorException")) == "ExpiredIteratorException"
    assert error_kinds.error_code(client_error(None)) == ""  # (an answer without its Error member)
    assert error_kinds.error_code(ClientError({"Error": {}}, "GetRecords")) == ""
    assert error_kinds.error_code(ValueError("x")) == ""


@pytest.mark.parametrize("code", sorted(error_kinds.RETRYABLE_CODES))
def test_throttling_and_the_services_own_failures_are_retried(code):
    assert error_kinds.is_retryable(client_error(code, status=400))


def test_a_status_from_500_up_is_retried_and_below_is_not():
    assert error_kinds.is_retryable(client_error("Whatever", status=500))
    assert not error_kinds.is_retryable(client_error("ValidationException", status=499))
    assert not error_kinds.is_retryable(client_error("ValidationException"))  # (no status: not a 5xx)
    assert not error_kinds.is_retryable(ClientError({}, "GetRecords"))


def test_broken_connections_are_retried_and_anything_else_is_not():
    assert error_kinds.is_retryable(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    assert error_kinds.is_retryable(ReadTimeoutError(endpoint_url="http://127.0.0.1:9"))
    assert not error_kinds.is_retryable(ValueError("a bug, not a network"))


def test_a_start_ahead_of_the_services_clock_is_told_by_either_wording():
    future = error_kinds.is_future_timestamp
    assert future(client_error("InvalidArgumentException", "The timestamp is in the Future"))
    assert future(client_error("InvalidArgumentException", "Timestamp is greater than the current time"))
    assert not future(client_error("InvalidArgumentException", "Invalid ShardIteratorType"))
    assert not future(client_error("InvalidArgumentException"))  # (no message)
    assert not future(client_error("ValidationException", "in the future"))


def test_a_sequence_number_the_shard_does_not_know_is_told_by_code_and_message():
    foreign = error_kinds.is_foreign_sequence_number
    assert foreign(client_error("TrimmedDataAccessException"))
    assert foreign(client_error("InvalidArgumentException", "Invalid StartingSequenceNumber for shard"))
    assert foreign(client_error("ResourceNotFoundException", "Sequence number 4900 not found"))
    assert foreign(client_error("InvalidArgumentException", "bad sequence  number"))  # (two spaces)
    assert not foreign(client_error("InvalidArgumentException", "Invalid ShardIteratorType"))
    assert not foreign(client_error("InvalidArgumentException"))  # (no message)
    assert not foreign(client_error("ValidationException", "sequence number"))
    assert not foreign(ValueError("sequence number"))


def test_errors_cross_the_agents_socket_as_plain_values_and_come_back_as_the_reader_handles_them():
    throttled = client_error("ProvisionedThroughputExceededException", "slow down", 400)
    encoded = error_kinds.encode_error(throttled)
    assert encoded == ("client", throttled.response, "GetRecords")
    back = error_kinds.decode_error(encoded)
    assert isinstance(back, ClientError) and back.response == throttled.response
    assert back.operation_name == "GetRecords"

    gone = StreamNotFoundError("stream s was deleted")
    assert error_kinds.encode_error(gone) == ("connector", "stream s was deleted", "")
    refused = error_kinds.decode_error(("connector", "stream s was deleted", ""))
    assert isinstance(refused, StreamAccessError) and str(refused) == "stream s was deleted"

    reset = ProtocolError("Connection reset by peer")
    assert error_kinds.encode_error(reset) == ("broken", "ProtocolError: Connection reset by peer", "")
    broken = error_kinds.decode_error(error_kinds.encode_error(OSError("reset")))
    assert isinstance(broken, builtins.ConnectionError)
    assert str(broken) == "enhanced fan-out subscription broken: OSError: reset"

    assert error_kinds.encode_error(ValueError("bug")) == ("fatal", "ValueError: bug", "")
    fatal = error_kinds.decode_error(("fatal", "ValueError: bug", ""))
    assert type(fatal) is RuntimeError and str(fatal) == "the enhanced fan-out agent failed: ValueError: bug"
