"""Every `PYSPARK_KINESIS_*` switch is declared once (switches.py): docs/operations.md's table is the
declarations, no module reads such a variable by its own name, and the stock-botocore switch gives
clients botocore's own data loader and body reads (tests/integration/test_switches.py reads a stream
with every tuning switch off)."""

from __future__ import annotations

import re
from pathlib import Path

from botocore.httpsession import URLLib3Session

from pyspark_kinesis import switches
from pyspark_kinesis.aws import client
from pyspark_kinesis.aws.model_loader import ConnectorLoader
from pyspark_kinesis.aws.response_parser import ParserFactory
from pyspark_kinesis.aws.whole_body import WholeBodySession
from pyspark_kinesis.config.aws_settings import AwsSettings

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_table_of_switches_is_the_declarations():
    page = (ROOT / "docs" / "operations.md").read_text()
    assert switches.markdown_table() in page


def test_no_module_reads_a_switch_by_its_own_name():
    """A `PYSPARK_KINESIS_` name in an environment read outside switches.py is a switch nobody
    declared (and so nobody documented)."""
    read = re.compile(r"environ(?:\.get)?[\[(]\s*[\"']PYSPARK_KINESIS_")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "pyspark_kinesis").rglob("*.py")
        if path.name != "switches.py" and read.search(path.read_text())
    ]
    assert offenders == []
    keys = [s.key for s in switches.SWITCHES]
    assert len(keys) == len(set(keys)) and all(k.startswith("PYSPARK_KINESIS_") for k in keys)


def test_a_switch_reads_its_environment_or_its_default(monkeypatch):
    monkeypatch.delenv(switches.GC_FREEZE.key, raising=False)
    assert switches.GC_FREEZE.on()
    monkeypatch.setenv(switches.GC_FREEZE.key, " 0 ")
    assert not switches.GC_FREEZE.on()
    monkeypatch.setenv(switches.STOCK_BOTOCORE.key, "")  # (set but empty: its default, off)
    assert not switches.STOCK_BOTOCORE.on()
    monkeypatch.setenv(switches.GC_FREEZE.key, "")
    assert switches.GC_FREEZE.on()
    monkeypatch.setenv(switches.LOG_LEVEL.key, "debug ")
    assert switches.LOG_LEVEL.value() == "debug"


def test_stock_botocore_gives_new_clients_botocores_own_loader_and_body_reads(monkeypatch):
    settings = AwsSettings(
        region="us-east-1", endpoint_url="http://127.0.0.1:9", access_key_id="stock", secret_key="b"
    )
    monkeypatch.setenv(switches.STOCK_BOTOCORE.key, "1")
    monkeypatch.setattr(client, "_sessions", {})
    monkeypatch.setattr(client, "_clients", {})
    made = client.kinesis_client(settings, agent="stock")
    assert type(made._endpoint.http_session) is URLLib3Session
    session = client.session_for(settings)
    assert not isinstance(session.get_component("data_loader"), ConnectorLoader)
    # (GetRecords bodies still reach the connector's decoder: that is the read path, not a tuning)
    assert isinstance(session.get_component("response_parser_factory"), ParserFactory)
    monkeypatch.setenv(switches.STOCK_BOTOCORE.key, "0")
    monkeypatch.setattr(client, "_sessions", {})
    monkeypatch.setattr(client, "_clients", {})
    tuned = client.kinesis_client(settings, agent="stock")
    assert isinstance(tuned._endpoint.http_session, WholeBodySession)
    assert isinstance(client.session_for(settings).get_component("data_loader"), ConnectorLoader)


def test_a_replacement_that_does_not_fit_this_botocore_falls_back_with_one_log_line(monkeypatch, caplog):
    """The self-check: ConnectorLoader failing to build (botocore's Loader changed) or a client whose
    endpoint is not the expected session (whole-body reads cannot wrap it) leaves botocore's own in
    place, logged once per process and replacement, and the client still works."""
    import logging

    settings = AwsSettings(
        region="us-east-1", endpoint_url="http://127.0.0.1:9", access_key_id="fallback", secret_key="b"
    )
    monkeypatch.delenv(switches.STOCK_BOTOCORE.key, raising=False)
    for name, value in (("_sessions", {}), ("_clients", {}), ("_loader", None), ("_fallen_back", set())):
        monkeypatch.setattr(client, name, value)

    def broken(_path):
        raise TypeError("Loader.__init__() got an unexpected keyword argument 'file_loader'")

    monkeypatch.setattr(client, "create_loader", broken)
    monkeypatch.setattr(client, "read_bodies_whole", lambda made: False)
    with caplog.at_level(logging.WARNING, logger=client.__name__):
        made = client.kinesis_client(settings, agent="one")
        client.kinesis_client(settings, agent="two")
        client.session_for(AwsSettings(region="eu-west-1", access_key_id="fallback", secret_key="b"))
    assert made.meta.region_name == "us-east-1"
    assert not isinstance(client.session_for(settings).get_component("data_loader"), ConnectorLoader)
    assert [m.split(" (")[0] for m in caplog.messages] == [
        "botocore's own data loader in this process",
        "botocore's own body reads in this process",
    ]
