"""Secret option values never reach a log, Spark's event log, the checkpoint or metadataPath: a query
run with distinctive secret values at INFO log level, then everything it left behind searched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.driver import config, output_rows, run_driver
from tests.helpers import client, new_stream, put

pytestmark = [pytest.mark.kinesis, pytest.mark.spark]

ROLE = "arn:aws:iam::000000000000:role/kinesis-reader"
SECRETS = {
    "awsSecretKey": "S3CR3T-secret-key-7f3a9c",
    "sessionToken": "S3CR3T-session-token-51be2d",
    "externalId": "S3CR3T-external-id-c08e44",
    # Credentials of metadataPath's filesystem (unused by a local path, but handed over all the same).
    "metadataStorageOptions": '{"key": "local", "secret": "S3CR3T-storage-secret-9a17f2"}',
}
SECRET_VALUES = {name: value.split('"secret": "')[-1].rstrip('"}') for name, value in SECRETS.items()}


def files_under(*roots: Path) -> list[Path]:
    return [
        f
        for root in roots
        if root.exists()
        for f in ([root] if root.is_file() else root.rglob("*"))
        if f.is_file()
    ]


def test_secret_option_values_are_in_no_log_event_log_checkpoint_or_record(kinesalite, local_sts, tmp_path):
    kin = client(kinesalite.endpoint)
    stream = new_stream(kin, shards=2)
    expected = put(kin, stream, 0, 50)
    events = tmp_path / "events"
    events.mkdir()
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(events),
        "spark.eventLog.compress": "false",
    }
    cfg = config(kinesalite.endpoint, stream, tmp_path, trigger="availableNow", conf=conf, log_level="INFO")
    cfg["options"] |= {
        "awsAccessKeyId": "000000000000",
        **SECRETS,
        "roleArn": ROLE,
        "stsEndpointUrl": local_sts.endpoint,  # the reads go through the assumed role's credentials
    }
    run_driver(cfg, env={"PYSPARK_KINESIS_LOG_LEVEL": "DEBUG"})
    assert len(output_rows(tmp_path / "out")) == len(expected)  # the query ran and read everything
    log = Path(cfg["checkpoint"] + ".log")
    # The search can find what it looks for: the connector's own lines describe the stream and its role.
    assert f"through role {ROLE}" in log.read_text(errors="replace"), "the connector's log lines are missing"
    searched = files_under(log, events, tmp_path / "cp", tmp_path / "meta")
    assert any(f.stat().st_size > 10_000 for f in searched), "nothing of substance was searched"
    leaks = [
        f"{name} in {f}"
        for f in searched
        for name, value in SECRET_VALUES.items()
        if value.encode() in f.read_bytes()
    ]
    assert not leaks, leaks
