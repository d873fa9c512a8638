"""Registering the data source under a name Spark does not already give another source.

Spark refuses a Python data source whose name a JVM source has (`DATA_SOURCE_ALREADY_EXISTS`), and a
platform may ship a JVM source named "kinesis" (Databricks Runtime does). A query written with the
name `register` returns runs under either name.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from .errors import KinesisConnectorError

log = logging.getLogger(__name__)
TAKEN = "DATA_SOURCE_ALREADY_EXISTS"


class NameTakenError(KinesisConnectorError):
    """The format name is another data source's in this Spark session."""


# Session -> {(source, name asked for): name registered}. A second call with the same session and
# arguments registers nothing: Spark warns "replaced a previously registered data source" for each
# call, and a project whose files each call register() (a Declarative Pipelines project's definitions
# files run in one process, with one session) filled its log with it.
_REGISTERED: weakref.WeakKeyDictionary[Any, dict[tuple[type, str | None], str]] = weakref.WeakKeyDictionary()


def register_as(spark: Any, source: type, name: str | None, default: str, fallback: str) -> str:
    """Register `source` as `name`, or (no name given) as `default` where that name is free, else as
    `fallback`; returns the name registered (once per session: see `_REGISTERED`)."""
    try:
        done = _REGISTERED.setdefault(spark, {})
    except TypeError:  # (a session object that takes no weak reference: registered every time)
        done = {}
    if (source, name) not in done:
        done[(source, name)] = _register_as(spark, source, name, default, fallback)
    return done[(source, name)]


def _register_as(spark: Any, source: type, name: str | None, default: str, fallback: str) -> str:
    if name is not None:
        _register(spark, source, name)
        return name
    try:
        _register(spark, source, default)
        return default
    except NameTakenError:
        log.warning(
            "Another data source is registered as %r in this Spark (Databricks Runtime ships its own Kinesis "
            "source under that name): pyspark-kinesis is registered as %r. Write queries with the name "
            "pyspark_kinesis.register() returns: format(%r).",
            default,
            fallback,
            fallback,
        )
        _register(spark, source, fallback)
        return fallback


def _register(spark: Any, source: type, name: str) -> None:
    named = source if name == source.name() else named_source(source, name)  # type: ignore[attr-defined]
    try:
        spark.dataSource.register(named)
    except Exception as exc:  # AnalysisException, classic or Spark Connect's
        if TAKEN not in str(exc) and getattr(exc, "getCondition", lambda: None)() != TAKEN:
            raise
        raise NameTakenError(
            f"The format name {name!r} is another data source's in this Spark session. Call "
            "pyspark_kinesis.register(spark) without a name (it picks a free one and returns it), or pass "
            "another name, and use the returned name in format(...)."
        ) from None


def named_source(source: type, name: str) -> type:
    """`source` under another format name: a subclass whose `name()` says so (Spark registers a data
    source class by what its `name()` returns, and pickles it to its Python workers). A subclass the
    package defines for that name is used as it is (it pickles by reference)."""
    defined: type
    for defined in source.__subclasses__():
        if defined.name() == name:  # type: ignore[attr-defined]
            return defined
    return type(f"{source.__name__}As_{name}", (source,), {"name": classmethod(lambda cls: name)})
