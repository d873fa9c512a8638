"""botocore clients built from AwsSettings, cached per process.

Executor Python workers are reused across batches, so a module-level cache keeps HTTP connections
(and credentials resolved through the default chain, or an assumed role's) alive from one batch to the
next. Retries of transient errors (throttling, 5xx, connection resets) are botocore's own retry modes.
Their response bodies are read in one call (whole_body.py), not in botocore's 64 KB pieces.

botocore, not boto3: boto3 pins botocore to its own release, and s3fs (through aiobotocore) pins it
to another, so a package that needs boto3 breaks `pip check` beside s3fs in whichever order they are
installed. botocore alone fits any botocore that aiobotocore allows. A boto3 client is this same
botocore client; nothing is lost.

With a `roleArn`, each process assumes the role itself, lazily, through botocore's refreshable
credentials (`AssumeRoleCredentialFetcher` + `DeferredRefreshableCredentials`): they are renewed
before they expire, whatever the query's age, and never leave the process (nothing is pickled).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import threading
from typing import Any

import botocore.session
from botocore.config import Config
from botocore.credentials import AssumeRoleCredentialFetcher, DeferredRefreshableCredentials
from botocore.exceptions import NoCredentialsError

from ..config.aws_settings import AwsSettings
from ..switches import STOCK_BOTOCORE
from . import gc_freeze
from .model_loader import create_loader
from .put_body import encode_put_records
from .response_parser import ParserFactory
from .whole_body import read_bodies_whole

_lock = threading.Lock()
_clients: dict[tuple[AwsSettings, int | None, str], Any] = {}
_frozen_with = -1  # how many clients this process had when `freeze_long_lived` last froze
_loader_lock = threading.Lock()
_loader: Any = None  # botocore's data loader, shared by this process's sessions (see `_new_session`)
_fallen_back: set[str] = set()  # replacements this process runs without (`_stock`)
log = logging.getLogger(__name__)
_sessions_lock = threading.Lock()
_sessions: dict[tuple[AwsSettings, int | None], botocore.session.Session] = {}


def _stock(what: str, why: object) -> None:
    """Self-check: a botocore replacement whose private attributes are not what it expects falls back
    to botocore's own, with one log line per process and replacement (never an error: the connector
    works on stock botocore, only slower; PYSPARK_KINESIS_STOCK_BOTOCORE=1 says so for every one)."""
    if what not in _fallen_back:
        _fallen_back.add(what)
        log.warning(
            "botocore's own %s in this process (the connector's faster one does not fit this botocore: %s)",
            what,
            why,
        )


def _read_whole(client: Any) -> None:
    """A new client's bodies read in one call (whole_body.py), unless stock botocore is asked for or
    the client is not shaped as that expects (then botocore's own, said once: `_stock`)."""
    if not STOCK_BOTOCORE.on() and not read_bodies_whole(client):
        _stock("body reads", "the client's endpoint is not a botocore URLLib3Session")


def _config(settings: AwsSettings, max_attempts: int | None, pool: int, agent: str = "") -> Config:
    return Config(
        # The sink checks every record itself before a call (`sink.producing.invalid_reason`), and
        # botocore's generic check of each record's members cost it a fifth of its CPU (put_body.py).
        parameter_validation=agent != "sink" or STOCK_BOTOCORE.on(),
        retries={"mode": settings.retry_mode, "total_max_attempts": max_attempts or settings.max_attempts},
        connect_timeout=settings.connect_timeout_ms / 1000.0,
        read_timeout=settings.read_timeout_ms / 1000.0,
        max_pool_connections=pool,
        # Which part of the connector calls (driver-side planner, executor-side reader, sink), and from
        # which process, shows in the User-Agent, so CloudTrail (or a test's proxy) can tell that the
        # driver never reads, and which calls one process made.
        user_agent_extra=f"pyspark-kinesis/{agent or 'client'} pid/{os.getpid()}",
    )


def freeze_long_lived() -> None:
    """At the start of a task on an executor: move what the process holds for good (modules, clients and
    their service models) out of the garbage collector's way, once more each time a client was made.

    Why: PySpark's daemon runs a full `gc.collect()` after every task of a reused Python worker
    (pyspark/daemon.py), and a full collection walks every object the process holds: with PySpark,
    pyarrow, botocore and a client loaded, about 120,000 objects and 55 ms of CPU after every task,
    whatever the task read (16 shards' tasks of one record each: about 0.9 CPU-s a batch).
    `gc.freeze()` (CPython's API for exactly this) puts the objects alive now into a generation
    collections skip; cyclic garbage made later is collected as before, and the objects frozen here are
    ones the process keeps anyway (a client is cached for the process's life). It runs after a
    collection, so no garbage is frozen with them, and only when a client was made since the last time,
    so what a task leaves is never frozen batch after batch."""
    global _frozen_with
    if not gc_freeze.FREEZING:  # PYSPARK_KINESIS_GC_FREEZE=0 (spark.executorEnv.*)
        return
    with _lock:
        made = len(_clients)
    if made != _frozen_with:
        gc.collect()
        gc.freeze()
        _frozen_with = made


def _new_session() -> botocore.session.Session:
    """A botocore session whose clients decode GetRecords bodies with `get_records.decode`, sharing one
    data loader with the process's other sessions: a session's loader parses the service model and
    endpoint files (JSON, over a megabyte) for the clients it makes, and a process may hold several
    sessions (one per settings: streams in other regions or accounts, an assumed role's STS client).
    The loader is model_loader's (orjson's decoder, no listing of every service to find one), made
    from the first session's `data_path`, so it honours AWS_DATA_PATH as botocore's own does."""
    global _loader
    session = botocore.session.Session()
    if not STOCK_BOTOCORE.on():  # (PYSPARK_KINESIS_STOCK_BOTOCORE=1: botocore's own loader)
        with _loader_lock:
            if _loader is None:
                try:
                    _loader = create_loader(session.get_config_variable("data_path"))
                except Exception as exc:  # a botocore whose Loader is not what ConnectorLoader extends
                    _loader = False
                    _stock("data loader", exc)
            if _loader:
                session.register_component("data_loader", _loader)
    session.register_component("response_parser_factory", ParserFactory())
    return session


def session_for(settings: AwsSettings, max_attempts: int | None = None) -> botocore.session.Session:
    """A botocore session with the settings' credentials: static keys or the default chain, and on
    top of them the assumed role when `role_arn` is set. Its clients decode GetRecords bodies with
    `get_records.decode` (botocore does everything else).

    One session per settings in a process, whatever the clients' retry budgets (those are the
    clients' own `Config`): making a session registers botocore's hundred-odd event handlers and
    resolves the credential chain, and a query's planner process, new for every query, makes two
    clients (the start-up check's and the planner's). With a role, the budget is the session's too
    (its STS client's), so it is part of the key."""
    key = (settings, max_attempts if settings.role_arn else None)
    with _sessions_lock:
        session = _sessions.get(key)
        if session is None:
            session = _sessions[key] = _session_with_credentials(settings, max_attempts)
        return session


def _session_with_credentials(settings: AwsSettings, max_attempts: int | None) -> botocore.session.Session:
    base = _new_session()
    if settings.access_key_id and settings.secret_key:
        base.set_credentials(settings.access_key_id, settings.secret_key, settings.session_token)
    if settings.role_arn is None:
        return base
    source = base.get_credentials()
    if source is None:
        raise NoCredentialsError()
    extra: dict[str, Any] = {"RoleSessionName": settings.role_session_name}
    if settings.external_id:
        extra["ExternalId"] = settings.external_id
    fetcher = AssumeRoleCredentialFetcher(
        client_creator=functools.partial(
            base.create_client,
            region_name=settings.region,
            endpoint_url=settings.sts_endpoint_url,
            config=_config(settings, max_attempts, 2),
        ),
        source_credentials=source,
        role_arn=settings.role_arn,
        extra_args=extra,
    )
    core = _new_session()
    core._credentials = (
        DeferredRefreshableCredentials(  # botocore's documented pattern for refreshable credentials
            refresh_using=fetcher.fetch_credentials, method="assume-role"
        )
    )
    return core


def kinesis_client(
    settings: AwsSettings, *, max_attempts: int | None = None, pool: int = 32, agent: str = "client"
) -> Any:
    """A Kinesis client for these settings; `max_attempts` overrides the retry budget (start-up checks
    use a small one so that an unreachable endpoint fails the query in seconds, not minutes)."""
    key = (settings, max_attempts, agent)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = session_for(settings, max_attempts).create_client(
                "kinesis",
                region_name=settings.region,
                endpoint_url=settings.endpoint_url,
                config=_config(settings, max_attempts, pool, agent),
            )
            _read_whole(client)
            if agent == "sink" and not STOCK_BOTOCORE.on() and not encode_put_records(client):
                _stock("PutRecords encoding", "the client has no botocore serializer where expected")
            _clients[key] = client
        return client


def dynamodb_streams_client(
    settings: AwsSettings, *, max_attempts: int | None = None, agent: str = "client"
) -> Any:
    """A DynamoDB Streams client for these settings (a table's stream: `dynamodb_streams`), cached per
    process like the Kinesis clients; `endpointUrl` is the DynamoDB Streams endpoint there."""
    key = (settings, max_attempts, f"dynamodbstreams {agent}")
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = session_for(settings, max_attempts).create_client(
                "dynamodbstreams",
                region_name=settings.region,
                endpoint_url=settings.endpoint_url,
                config=_config(settings, max_attempts, 8, agent),
            )
            _read_whole(client)
            _clients[key] = client
        return client


def glue_client(settings: AwsSettings, endpoint_url: str | None = None) -> Any:
    """An AWS Glue client (the Schema Registry's API) with the stream's credentials and region; cached
    per process like the Kinesis clients."""
    key = (settings, None, f"glue {endpoint_url or ''}")
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = session_for(settings).create_client(
                "glue",
                region_name=settings.region,
                endpoint_url=endpoint_url,
                config=_config(settings, None, 4, "glue"),
            )
            _read_whole(client)
            _clients[key] = client
        return client
