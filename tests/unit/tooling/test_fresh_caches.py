"""The mutation run's cache-emptying plugin (tests/mutation/fresh_caches.py): each cache it names
exists, a session start empties them and the functools caches, and registries stay."""

from __future__ import annotations

import sys

from pyspark_kinesis import formats
from pyspark_kinesis.config.value_format import ValueFormat
from pyspark_kinesis.sink import writers
from pyspark_kinesis.values import glue_wire, protobuf_types
from tests.mutation import fresh_caches


def test_every_named_cache_exists_and_can_be_emptied():
    import pyspark_kinesis.aws.client
    import pyspark_kinesis.aws.glue_registry
    import pyspark_kinesis.aws.kinesis
    import pyspark_kinesis.formats.glue
    import pyspark_kinesis.source.executor.iterator_cache
    import pyspark_kinesis.source.executor.pacing  # noqa: F401 (loaded for the check below)

    for module, names in fresh_caches.CACHES.items():
        loaded = sys.modules[module]
        for name in names:
            assert callable(getattr(getattr(loaded, name), "clear", None)), f"{module}.{name}"


def test_a_session_start_empties_the_caches_and_keeps_the_registries():
    formats.codec_of(ValueFormat())  # (raw and glue registered on first use)
    codecs = dict(formats._CODECS)
    assert codecs
    protobuf_types._converters["descriptor"] = object()  # type: ignore[assignment]
    writers._LIMITS[("settings", "stream")] = 1
    glue_wire._version_text(bytes(16))
    assert glue_wire._version_text.cache_info().currsize > 0
    emptied = fresh_caches.empty_caches()
    assert protobuf_types._converters == {} and writers._LIMITS == {}
    assert glue_wire._version_text.cache_info().currsize == 0
    assert "pyspark_kinesis.values.glue_wire._version_text" in emptied
    assert codecs == formats._CODECS
