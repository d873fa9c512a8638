"""boto3 clients built from AwsSettings, cached per process.

Executor Python workers are reused across batches, so a module-level cache keeps HTTP connections
(and credentials resolved through boto3's chain) alive from one batch to the next. Retries of
transient errors (throttling, 5xx, connection resets) are botocore's own retry modes.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

from ..options import AwsSettings

_lock = threading.Lock()
_clients: dict[tuple[AwsSettings, int | None], Any] = {}


def kinesis_client(settings: AwsSettings, *, max_attempts: int | None = None, pool: int = 32) -> Any:
    """A Kinesis client for these settings; `max_attempts` overrides the retry budget (start-up checks
    use a small one so that an unreachable endpoint fails the query in seconds, not minutes)."""
    key = (settings, max_attempts)
    with _lock:
        client = _clients.get(key)
        if client is None:
            session = boto3.session.Session(
                aws_access_key_id=settings.access_key_id,
                aws_secret_access_key=settings.secret_key,
                aws_session_token=settings.session_token,
                region_name=settings.region,
            )
            config = Config(
                retries={
                    "mode": settings.retry_mode,
                    "total_max_attempts": max_attempts or settings.max_attempts,
                },
                connect_timeout=settings.connect_timeout_ms / 1000.0,
                read_timeout=settings.read_timeout_ms / 1000.0,
                max_pool_connections=pool,
                user_agent_extra="pyspark-kinesis",
            )
            client = session.client("kinesis", endpoint_url=settings.endpoint_url, config=config)
            _clients[key] = client
        return client
