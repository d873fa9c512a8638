"""A pytest plugin of the mutation run (pyproject's [tool.mutmut] `pytest_add_cli_args`): every
per-process cache of the connector is emptied when a test session starts.

Why: mutmut runs each mutant's tests in a child forked from the process that ran the whole unit suite
once (its pass that finds which tests reach which function), so the child starts with everything that
pass cached. A mutant in code that runs only to fill a cache (a Protobuf converter made once per
message type, a client made once per settings) then never runs, and "survives" although tests pin
it. Only caches are emptied here, never registries filled at import (`formats._CODECS`)."""

from __future__ import annotations

import sys
from typing import Any

# Per-process caches held in module globals (a dict or an object with `clear`), by module. A name that
# no longer exists fails the session: the list must follow the code (tests/unit/tooling checks it too).
CACHES: dict[str, tuple[str, ...]] = {
    "pyspark_kinesis.aws.client": ("_clients",),
    "pyspark_kinesis.aws.kinesis": ("_same_stream_checked",),
    "pyspark_kinesis.aws.glue_registry": ("_versions",),
    "pyspark_kinesis.formats.glue": ("_ENCODERS",),
    "pyspark_kinesis.sink.writers": ("_LIMITS",),
    "pyspark_kinesis.source.executor.iterator_cache": ("ITERATORS",),
    "pyspark_kinesis.source.executor.pacing": ("PACER", "ITERATOR_PACER"),
    "pyspark_kinesis.values.protobuf_types": ("_converters",),
}


def empty_caches() -> list[str]:
    """Empty the caches above and every functools cache of a loaded connector module; returns what was
    emptied (module.name), for the test of this plugin."""
    emptied = []
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("pyspark_kinesis") or module is None:
            continue
        for attr, value in vars(module).items():
            if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", name) == name:
                value.cache_clear()
                emptied.append(f"{name}.{attr}")
        for attr in CACHES.get(name, ()):
            cache: Any = getattr(module, attr)
            cache.clear()
            emptied.append(f"{name}.{attr}")
    return emptied


def pytest_sessionstart(session: Any) -> None:
    empty_caches()
