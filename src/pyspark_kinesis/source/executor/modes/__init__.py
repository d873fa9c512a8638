"""Ways of reading a shard (`consumerType`), each a page source behind the one shard-read loop
(`shard_read`, `pages`). A mode is a factory from the read's `ReadContext` to its `PageSource`; the
modules load when a read first uses them, so a polling executor never loads fan-out's socket code.
"""

from __future__ import annotations

from collections.abc import Callable

from ..pages import PageSource, ReadContext

Factory = Callable[[ReadContext], PageSource]


def _polling(context: ReadContext) -> PageSource:
    from .polling import PollingPages

    return PollingPages(context)


def _fan_out(context: ReadContext) -> PageSource:
    from .fanout import FanOutPages

    return FanOutPages(context)


MODES: dict[str, Factory] = {"polling": _polling, "efo": _fan_out}


def register_mode(name: str, factory: Factory) -> None:
    """Add a way of reading under `name` (the value of `consumerType` that selects it)."""
    MODES[name] = factory


def source_for(mode: str, context: ReadContext) -> PageSource:
    """The page source of one shard read in `mode`."""
    try:
        factory = MODES[mode]
    except KeyError:
        raise ValueError(f"no way of reading is registered as {mode!r} (known: {sorted(MODES)})") from None
    return factory(context)
