"""What `.load()` checks before any query starts: the streams answer and the metadataPath takes records.

PySpark reports an error raised when a streaming query starts (in the planner process its source
runner starts) as a StreamingQueryException of well over a hundred lines, the connector's message
twice in the middle and PySpark's own `UnboundLocalError: ... 'reader'` last. An error raised while
Spark asks for the schema, at `.load()`, reaches the user as a short AnalysisException that ends with
the connector's message. So whatever can be checked without knowing whether the read is a streaming
one is checked here: the options (parsed before this runs), every stream (endpoint, region,
credentials, role, existence: one DescribeStreamSummary each) and, where one is given, the
metadataPath (a probe record written and removed). Query start checks them again (the stream may be
gone by then) along with what only a streaming read needs (a metadataPath at all).
"""

from __future__ import annotations

from ...aws.services import proxy_for
from ...errors import OptionError
from ...model import StreamIdentity
from ..options import SourceConfig
from ..state.store import open_store

STARTUP_ATTEMPTS = 2  # start-up checks fail in seconds on a wrong endpoint instead of retrying for minutes


def check_at_load(config: SourceConfig) -> None:
    stream_identities(config)
    if config.metadata_path:
        open_store(config.metadata_path, config.metadata_storage_options).check_writable()


def stream_identities(config: SourceConfig) -> list[StreamIdentity]:
    """Every stream reachable (endpoint, credentials, role, existence) and named once, failing fast
    with one clear message; each stream's identity (its ARN: what offsets key shards by)."""
    identities = [
        proxy_for(spec, agent="planner", max_attempts=STARTUP_ATTEMPTS).identity() for spec in config.streams
    ]
    arns = [identity.arn for identity in identities]
    for index, arn in enumerate(arns):
        if arn in arns[:index]:
            raise OptionError(
                "streams" if len(arns) > 1 else "streamName",
                f"names the stream {arn} twice",
                "Name each stream once.",
            )
    return identities
