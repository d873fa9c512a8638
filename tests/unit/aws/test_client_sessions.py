"""The botocore sessions the connector makes (aws/client.py): one per settings in a process, whatever
its clients' retry budgets (a query's planning process is new for every query and makes two clients);
every session of a process shares one data loader, so the service model and endpoint files are parsed
once per process, not once per client; each session still decodes GetRecords bodies with the
connector's parser; a role's session too."""

from __future__ import annotations

from pyspark_kinesis.aws import client, gc_freeze
from pyspark_kinesis.aws.response_parser import ParserFactory
from pyspark_kinesis.config.aws_settings import AwsSettings

SETTINGS = AwsSettings(
    region="us-east-1", endpoint_url="http://127.0.0.1:9", access_key_id="a", secret_key="b"
)


def test_sessions_share_one_data_loader_and_keep_the_connectors_parser() -> None:
    first = client.session_for(SETTINGS)
    second = client.session_for(SETTINGS, max_attempts=2)
    loader = first.get_component("data_loader")
    assert second.get_component("data_loader") is loader
    role = client.session_for(
        AwsSettings(
            region="us-east-1",
            endpoint_url="http://127.0.0.1:9",
            access_key_id="a",
            secret_key="b",
            role_arn="arn:aws:iam::123456789012:role/reader",
        )
    )
    assert role.get_component("data_loader") is loader
    for session in (first, second, role):
        assert isinstance(session.get_component("response_parser_factory"), ParserFactory)


def test_one_session_per_settings_and_per_role_budget() -> None:
    assert client.session_for(SETTINGS) is client.session_for(SETTINGS, max_attempts=2)
    other = AwsSettings(
        region="us-west-2", endpoint_url="http://127.0.0.1:9", access_key_id="a", secret_key="b"
    )
    assert client.session_for(other) is not client.session_for(SETTINGS)
    role = AwsSettings(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        access_key_id="a",
        secret_key="b",
        role_arn="arn:aws:iam::123456789012:role/reader",
    )
    assert client.session_for(role, max_attempts=2) is client.session_for(role, max_attempts=2)
    assert client.session_for(role, max_attempts=2) is not client.session_for(role)  # its STS client's budget


def test_a_second_client_finds_the_service_model_already_parsed() -> None:
    made = client.kinesis_client(SETTINGS, max_attempts=3, agent="test-a")
    loader = client.session_for(SETTINGS).get_component("data_loader")
    assert made.meta.service_model.service_name == "kinesis"
    parsed = [key for key in loader._cache if "load_service_model" in str(key)]
    assert parsed  # (botocore's own cache, keyed by what was loaded)
    before = len(loader._cache)
    client.kinesis_client(SETTINGS, max_attempts=4, agent="test-b")
    assert len(loader._cache) == before  # nothing loaded again


class Collector:
    """gc's stand-in: counts collections and freezes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self) -> int:
        self.calls.append("collect")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")


def test_long_lived_objects_are_frozen_after_a_collection_once_per_new_client(monkeypatch) -> None:
    collector = Collector()
    monkeypatch.setattr(client, "gc", collector)
    monkeypatch.setattr(gc_freeze, "FREEZING", True)
    monkeypatch.setattr(client, "_frozen_with", -1)
    client.freeze_long_lived()
    assert collector.calls == ["collect", "freeze"]  # a worker's first task: collected, then frozen
    client.freeze_long_lived()
    assert collector.calls == ["collect", "freeze"]  # no client made since: nothing to do
    client.kinesis_client(SETTINGS, max_attempts=5, agent="test-freeze")
    client.freeze_long_lived()
    assert collector.calls == ["collect", "freeze"] * 2  # a client made since: frozen with it
    monkeypatch.setattr(gc_freeze, "FREEZING", False)  # PYSPARK_KINESIS_GC_FREEZE=0
    client.kinesis_client(SETTINGS, max_attempts=6, agent="test-freeze")
    client.freeze_long_lived()
    assert collector.calls == ["collect", "freeze"] * 2
