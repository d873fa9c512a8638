"""The driver's look at an idle shard (`aws.tip_look.look_past_tip`) against a scripted client: what a
record, an empty page, a closed shard's end and a refused position each answer."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import EndpointConnectionError

from pyspark_kinesis.aws.get_records import Records
from pyspark_kinesis.aws.kinesis import KinesisProxy
from pyspark_kinesis.aws.tip_look import LOOK_PAGES
from pyspark_kinesis.config.aws_settings import AwsSettings
from pyspark_kinesis.config.stream_specs import StreamSpec
from pyspark_kinesis.model import Position
from tests.unit.scripted import THROTTLED, client_error, records

EMPTY = Records.from_lists([], [], [], [])
AFTER_4 = Position.after("4")


class Client:
    """GetShardIterator answers from `iterators` (an iterator, or an error to raise) in turn;
    GetRecords from `pages` (a page, or an error to raise); both record what they were asked."""

    def __init__(self, iterators: list[Any], pages: list[dict[str, Any]]) -> None:
        self.iterators, self.pages = iterators, pages
        self.asked: list[dict[str, Any]] = []
        self.read: list[dict[str, Any]] = []

    def get_shard_iterator(self, **args: Any) -> dict[str, Any]:
        self.asked.append(args)
        answer = self.iterators.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return {"ShardIterator": answer}

    def get_records(self, **args: Any) -> dict[str, Any]:
        self.read.append(args)
        answer = self.pages.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def proxy(client: Client) -> KinesisProxy:
    made = KinesisProxy(StreamSpec("orders", AwsSettings(region="us-east-1")), agent="planner")
    made._client = client
    return made


def test_a_record_or_a_closed_shards_end_is_news_an_empty_page_at_the_tip_is_not():
    page = {
        "Records": records([5], arrival=1_700_000_000.25),
        "NextShardIterator": "n",
        "MillisBehindLatest": 0,
    }
    answer = proxy(Client(["it"], [page])).look_past_tip("s", Position.after("4"), None)
    assert answer.news is True and answer.first_ms == 1_700_000_000_250  # (when the tip moved on)
    ended = {"Records": EMPTY, "MillisBehindLatest": 0}
    answer = proxy(Client(["it"], [ended])).look_past_tip("s", Position.after("4"), None)
    assert answer.news is True and answer.ended  # (at its tip for good: the look renews the tip)
    behind = {"Records": EMPTY, "NextShardIterator": "n", "MillisBehindLatest": 5}
    answer = proxy(Client(["it"], [behind])).look_past_tip("s", Position.after("4"), None)
    assert answer.news is True and not answer.ended and answer.first_ms == 0  # (records, arrived when?)
    empty = {"Records": EMPTY, "NextShardIterator": "next", "MillisBehindLatest": 0}
    answer = proxy(Client(["it"], [empty])).look_past_tip("s", Position.after("4"), None)
    assert answer.news is False and answer.iterator == "next"


def test_a_position_refused_as_an_unknown_sequence_number_is_looked_at_from_the_oldest_record():
    """Found by the simulation: a quiet shard whose last record aged out, on a service that refuses
    AFTER_SEQUENCE_NUMBER of a trimmed record, failed every look; a failed look lets the shard into a
    batch, and so an idle stream ran an empty batch every trigger."""
    refused = client_error(
        "InvalidArgumentException",
        "StartingSequenceNumber 4 is invalid: the sequence number is trimmed",
        "GetShardIterator",
    )
    empty = {"Records": EMPTY, "NextShardIterator": "next", "MillisBehindLatest": 0}
    client = Client([refused, "oldest"], [empty])
    answer = proxy(client).look_past_tip("s", Position.after("4"), None)
    assert answer.news is False and not answer.failure
    assert [a["ShardIteratorType"] for a in client.asked] == ["AFTER_SEQUENCE_NUMBER", "TRIM_HORIZON"]
    left = {"Records": records([9]), "NextShardIterator": "n", "MillisBehindLatest": 0}
    assert (
        proxy(Client([refused, "oldest"], [left])).look_past_tip("s", Position.after("4"), None).news is True
    )


def test_another_refusal_is_a_failed_look_that_lets_the_shard_in():
    denied = client_error("InvalidArgumentException", "something else", "GetShardIterator")
    answer = proxy(Client([denied], [])).look_past_tip("s", Position.after("4"), None)
    assert answer.news is True and "InvalidArgumentException" in answer.failure


def test_an_empty_page_that_cannot_tell_is_read_past_not_taken_for_the_tip():
    """DynamoDB Streams answers empty pages in the middle of a shard (its proxy says -1 behind): taken
    for "nothing new", an AvailableNow run ended with records put before its cutoff unread."""
    unsure = {"Records": EMPTY, "NextShardIterator": "n1", "MillisBehindLatest": -1}
    page = {"Records": records([5]), "NextShardIterator": "n2", "MillisBehindLatest": 0}
    assert proxy(Client(["it"], [unsure, dict(unsure), page])).look_past_tip("s", AFTER_4, None).news is True
    at_tip = {"Records": EMPTY, "NextShardIterator": "n3", "MillisBehindLatest": 0}
    answer = proxy(Client(["it"], [unsure, at_tip])).look_past_tip("s", AFTER_4, None)
    assert answer.news is False and answer.iterator == "n3"
    endless = proxy(Client(["it"], [dict(unsure) for _ in range(LOOK_PAGES)]))
    assert endless.look_past_tip("s", AFTER_4, None).news is None  # (told nothing: the batch reads it)


AT_TIP = {"Records": EMPTY, "NextShardIterator": "next", "MillisBehindLatest": 0}
EXPIRED = client_error("ExpiredIteratorException", "Iterator expired")


def test_a_look_asks_for_one_record_of_its_shard_and_renews_an_expired_iterator_once():
    client = Client(["fresh"], [EXPIRED, AT_TIP])
    answer = proxy(client).look_past_tip("shard-7", AFTER_4, "kept")
    assert answer.news is False and answer.iterator == "next"
    assert [r["ShardIterator"] for r in client.read] == ["kept", "fresh"]
    assert all(r["Limit"] == 1 for r in client.read)  # (one record: the look keeps none)
    assert [a["ShardId"] for a in client.asked] == ["shard-7"]
    twice = Client(["fresh"], [EXPIRED, EXPIRED])
    answer = proxy(twice).look_past_tip("shard-7", AFTER_4, "kept")
    assert answer.news is True and answer.failure.startswith("ExpiredIteratorException: ")
    assert len(twice.asked) == 1  # (obtained again once, not in a loop)


def test_refused_credentials_a_throttle_and_a_broken_connection_each_answer_as_they_mean():
    denied = client_error("AccessDeniedException", "not authorized")
    answer = proxy(Client([], [denied])).look_past_tip("s", AFTER_4, "kept")
    assert (answer.news, answer.denied) == (True, True) and answer.failure.startswith(
        "AccessDeniedException: "
    )
    answer = proxy(Client([], [THROTTLED])).look_past_tip("s", AFTER_4, "kept")
    assert (answer.news, answer.iterator, answer.failure) == (None, "kept", "")  # (told nothing: ask later)
    broken = EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    answer = proxy(Client([], [broken])).look_past_tip("s", AFTER_4, "kept")
    assert answer.news is True and not answer.denied
    assert answer.failure.startswith("EndpointConnectionError: ")
    other = client_error("ValidationException", "bad")
    answer = proxy(Client([], [other])).look_past_tip("s", AFTER_4, "kept")
    assert answer.news is True and not answer.denied and answer.failure.startswith("ValidationException: ")


def test_any_lag_is_news_and_a_page_that_cannot_tell_goes_on_from_its_own_iterator():
    behind = {"Records": EMPTY, "NextShardIterator": "n", "MillisBehindLatest": 1}
    assert proxy(Client(["it"], [behind])).look_past_tip("s", AFTER_4, None).news is True
    unsure = {"Records": EMPTY, "NextShardIterator": "n1", "MillisBehindLatest": -1}
    client = Client(["it"], [unsure, AT_TIP])
    proxy(client).look_past_tip("s", AFTER_4, None)
    assert [r["ShardIterator"] for r in client.read] == ["it", "n1"]


def test_the_oldest_record_is_asked_of_the_same_shard():
    refused = client_error("InvalidArgumentException", "sequence number is trimmed", "GetShardIterator")
    client = Client([refused, "oldest"], [AT_TIP])
    proxy(client).look_past_tip("shard-3", AFTER_4, None)
    assert [a["ShardId"] for a in client.asked] == ["shard-3", "shard-3"]
