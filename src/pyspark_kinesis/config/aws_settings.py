"""How to reach one stream's Kinesis endpoint: region, endpoint, credentials, role, retries.

A plain value (pickled to executors, part of the client cache key) whose repr hides every secret.
The source's top-level options, each `streams` entry and the sink all go through `aws_settings`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionError
from .declared import INT, Option, by_key

# The options every AWS call takes, shared by the source and the sink.
AWS_OPTIONS: tuple[Option, ...] = (
    Option("region", "AWS region of the stream.", shown="AWS_REGION / profile region"),
    Option(
        "endpointUrl",
        "Kinesis endpoint, e.g. http://127.0.0.1:4567 for `pyspark-kinesis local start`.",
        shown="(AWS endpoint)",
    ),
    Option(
        "awsAccessKeyId", "Static access key id; use with awsSecretKey.", shown="(default chain)", secret=True
    ),
    Option("awsSecretKey", "Static secret key; never logged.", shown="(default chain)", secret=True),
    Option("sessionToken", "Session token for temporary static credentials; never logged.", secret=True),
    Option("roleArn", "IAM role to assume (STS AssumeRole) for Kinesis calls; refreshed before expiry."),
    Option("roleSessionName", "Session name of the assumed role.", default="pyspark-kinesis"),
    Option("externalId", "External id the role's trust policy asks for; never logged.", secret=True),
    Option(
        "stsEndpointUrl",
        "STS endpoint for AssumeRole (a VPC endpoint, a local STS).",
        shown="(AWS STS endpoint)",
    ),
    Option("retryMode", "botocore retry mode: legacy | standard | adaptive.", default="standard"),
    Option(
        "maxAttempts",
        "botocore total attempts per AWS call (first try included).",
        default=10,
        kind=INT,
        minimum=1,
    ),
    Option("connectTimeoutMs", "HTTP connect timeout for AWS calls.", default=5000, kind=INT, minimum=1),
    Option("readTimeoutMs", "HTTP read timeout for AWS calls.", default=30000, kind=INT, minimum=1),
)
_AWS = by_key(AWS_OPTIONS)

_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_SESSION_NAME = re.compile(r"^[\w+=,.@-]{2,64}$")


@dataclass(frozen=True)
class AwsSettings:
    """How to reach one stream's Kinesis endpoint. Pickled to executors; repr hides secrets."""

    region: str
    endpoint_url: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    role_arn: str | None = None
    role_session_name: str = _AWS["roleSessionName"].default  # (defaults: the declarations above)
    external_id: str | None = field(default=None, repr=False)
    sts_endpoint_url: str | None = None
    retry_mode: str = _AWS["retryMode"].default
    max_attempts: int = _AWS["maxAttempts"].default
    connect_timeout_ms: int = _AWS["connectTimeoutMs"].default
    read_timeout_ms: int = _AWS["readTimeoutMs"].default


def _url(option: str, value: str | None) -> str | None:
    url = (value or "").strip() or None
    if url is not None and not url.startswith(("http://", "https://")):
        raise OptionError(option, f"'{url}' is not an http(s) URL", "Write it like http://127.0.0.1:4567.")
    return url


def aws_settings(
    opts: Mapping[str, str], *, prefix: str = "", entry_keys: Collection[str] = ()
) -> AwsSettings:
    """Region, endpoint, credentials, role and retry settings. `opts` holds the top-level options merged
    with a `streams` entry's overrides; errors name an overridden key with `prefix` (streams[1].region)."""

    def name(key: str) -> str:
        return f"{prefix}{key}" if key in entry_keys else key

    region = opts.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or ""
    region = region.strip()
    if not region:
        raise OptionError(
            name("region"), "missing and no AWS_REGION is set", 'Set .option("region", "us-east-1").'
        )
    key_id, secret = opts.get("awsAccessKeyId"), opts.get("awsSecretKey")
    if bool(key_id) != bool(secret):
        raise OptionError(
            "awsAccessKeyId" if not key_id else "awsSecretKey",
            "static credentials need both awsAccessKeyId and awsSecretKey",
            "Set both, or neither to use the default credential chain.",
        )
    retry_mode = _AWS["retryMode"].parse(opts).lower()
    if retry_mode not in ("legacy", "standard", "adaptive"):
        raise OptionError(
            "retryMode", f"'{retry_mode}' is not a botocore retry mode", "Use standard or adaptive."
        )
    return AwsSettings(
        region=region,
        endpoint_url=_url(name("endpointUrl"), opts.get("endpointUrl")),
        access_key_id=key_id or None,
        secret_key=secret or None,
        session_token=opts.get("sessionToken") or None,
        **_role(opts, name),
        sts_endpoint_url=_url(name("stsEndpointUrl"), opts.get("stsEndpointUrl")),
        retry_mode=retry_mode,
        max_attempts=_AWS["maxAttempts"].parse(opts),
        connect_timeout_ms=_AWS["connectTimeoutMs"].parse(opts),
        read_timeout_ms=_AWS["readTimeoutMs"].parse(opts),
    )


def _role(opts: Mapping[str, str], name: Callable[[str], str]) -> dict[str, Any]:
    """The role to assume (roleArn) and what goes with it, checked; the options that only apply with
    a role are refused without one."""
    role = (opts.get("roleArn") or "").strip() or None
    if role is not None and not _ROLE_ARN.match(role):
        raise OptionError(
            name("roleArn"),
            f"'{role}' is not an IAM role ARN",
            "Write it like arn:aws:iam::123456789012:role/kinesis-reader.",
        )
    session_name = _AWS["roleSessionName"].parse(opts)
    if not _SESSION_NAME.match(session_name):
        raise OptionError(
            name("roleSessionName"),
            f"'{session_name}' is not a valid role session name",
            "Use 2-64 characters of letters, digits and _+=,.@-.",
        )
    external_id = opts.get("externalId") or None
    if external_id is not None and not 2 <= len(external_id) <= 1224:
        raise OptionError(
            name("externalId"), "must have 2 to 1224 characters", "Use the id the role owner gave."
        )
    if role is None and (external_id or opts.get("roleSessionName") or opts.get("stsEndpointUrl")):
        given = next(k for k in ("externalId", "roleSessionName", "stsEndpointUrl") if opts.get(k))
        raise OptionError(name(given), "only applies with roleArn", "Set roleArn too, or remove it.")
    return {"role_arn": role, "role_session_name": session_name, "external_id": external_id}
