"""The local Kinesis servers' command lines (src/pyspark_kinesis/cli/local_kinesis.py), without starting
them: the account shard limit each is given (the wide-stream benchmark needs more than the default)."""

from __future__ import annotations

from pathlib import Path

from pyspark_kinesis.cli.local_kinesis import LocalKinesis


def test_each_server_enforces_the_shard_limit_it_is_given():
    root = Path("/nowhere")
    command, _env = LocalKinesis("kinesalite", port=1)._command(root)
    assert "shardLimit: 1000," in command[-1]
    command, _env = LocalKinesis("kinesalite", port=1, shard_limit=2_500)._command(root)
    assert "shardLimit: 2500," in command[-1]
    _command, env = LocalKinesis("kinesis-local", port=1, shard_limit=2_500)._command(root)
    assert env["SHARD_LIMIT"] == "2500"
