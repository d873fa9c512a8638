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


# The ways `consumerType` can name (its choices are declared with the option, source/options.py: the
# planner's process never loads the executor's code). A third way is one PageSource class and an
# entry here, plus the option's choice (the shard-read tests add a toy one).
MODES: dict[str, Factory] = {"polling": _polling, "efo": _fan_out}


def source_for(mode: str, context: ReadContext) -> PageSource:
    """The page source of one shard read in `mode`."""
    try:
        factory = MODES[mode]
    except KeyError:
        raise ValueError(f"no way of reading is registered as {mode!r} (known: {sorted(MODES)})") from None
    return factory(context)
