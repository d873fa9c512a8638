"""Enhanced fan-out consumers on kinesis-local: registering is idempotent and waits for ACTIVE, two
registrations of one name at once end with one consumer, a registration during a deregistration
waits it out and registers anew, and the CLI lists, registers and deregisters (never a query)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from pyspark_kinesis.aws import consumers
from tests.helpers import client, new_stream
from tests.integration.test_cli import as_json, cli

pytestmark = pytest.mark.kinesis


def _stream_arn(kinesis, name: str) -> str:
    return kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]


def test_a_consumer_is_registered_once_reused_and_registered_again_after_a_deregistration(kinesis_local):
    kinesis = client(kinesis_local.endpoint)
    arn = _stream_arn(kinesis, new_stream(kinesis, 1))
    name = f"c-{uuid.uuid4().hex[:8]}"
    assert consumers.describe(kinesis, arn, name) is None

    # Two callers at once (two queries starting, a retried task): both get the one ACTIVE consumer.
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _i: consumers.ensure_consumer(kinesis, arn, name, 60), range(2))
    assert first.status == second.status == consumers.ACTIVE
    assert first.arn == second.arn
    assert [c.arn for c in consumers.list_consumers(kinesis, arn)] == [first.arn]
    assert consumers.ensure_consumer(kinesis, arn, name, 60).arn == first.arn  # reused, not re-registered

    # A deregistration in flight: the next registration waits until it is gone, then registers anew.
    kinesis.deregister_stream_consumer(ConsumerARN=first.arn)
    again = consumers.ensure_consumer(kinesis, arn, name, 60)
    assert again.status == consumers.ACTIVE
    assert consumers.describe_arn(kinesis, again.arn) is not None
    consumers.deregister(kinesis, again, 60)
    assert consumers.list_consumers(kinesis, arn) == []
    consumers.deregister(kinesis, again, 60)  # already gone: fine


def test_the_cli_lists_registers_and_deregisters_consumers(kinesis_local):
    kinesis = client(kinesis_local.endpoint)
    stream = new_stream(kinesis, 1)
    endpoint = ("--endpoint-url", kinesis_local.endpoint)
    assert as_json("consumers", "list", stream, *endpoint) == []
    registered = as_json("consumers", "register", stream, "etl", *endpoint)
    assert registered["status"] == "ACTIVE" and registered["ConsumerName"] == "etl"
    assert (
        as_json("consumers", "register", stream, "etl", *endpoint)["ConsumerARN"] == registered["ConsumerARN"]
    )
    listed = as_json("consumers", "list", stream, *endpoint)
    assert [(c["ConsumerName"], c["status"]) for c in listed] == [("etl", "ACTIVE")]
    table = cli("consumers", "list", stream, *endpoint).stdout
    assert "etl" in table and "ACTIVE" in table and registered["ConsumerARN"][:40] in table
    gone = as_json("consumers", "deregister", stream, "etl", *endpoint)
    assert gone["status"] == "DEREGISTERED"
    assert as_json("consumers", "list", stream, *endpoint) == []
    missing = cli("consumers", "deregister", stream, "etl", *endpoint, ok=False)
    assert missing.exit_code == 1 and "no consumer named 'etl'" in missing.output
