"""Parsing single option values (numbers, booleans, positions) and folding option names.

Shared by the source, its per-stream entries and the sink, so that every option gets the same
checks and the same kind of message: which option, what was wrong, what to write instead.
Spark hands options over case-insensitively (keys may arrive lower-cased), so lookups fold case.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from datetime import UTC, datetime

from ..errors import OptionError
from ..model import Position
from .aliases import ALIASES
from .declared import is_secret

# Options Spark itself passes along with the user's, accepted and ignored: `load(path)` and `save(path)`
# give `path`; `writeStream.queryName(...)` and Spark Declarative Pipelines' sinks give `queryName`.
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})


def shown(option: str, value: object) -> str:
    """How a message names a value the user gave: itself, or only its kind where it is declared a
    secret (`declared.Option.secret`)."""
    if is_secret(option):
        return f"a {type(value).__name__} (value not shown: a secret)"
    return repr(value)


def fold(options: Mapping[str, str], known: Mapping[str, object], what: str) -> dict[str, str]:
    """Map user keys to canonical option names, other connectors' names included (see `aliases`);
    reject unknown ones with a suggestion, and an option given twice under two names. The advice names
    the CLI's listing, not a docs/ page: a pip user has the package, not the repository's docs."""
    lower = {k.lower(): k for k in known}
    aliases = {name.lower(): alias for name, alias in ALIASES.items() if alias.canonical in known}
    folded: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low in SPARK_OPTIONS:
            continue
        canonical = lower.get(low)
        if canonical is None and low in aliases:
            alias = aliases[low]
            canonical = alias.canonical
            value = alias.convert(key, value) if alias.convert and value is not None else value
        if canonical is None:
            guess = difflib.get_close_matches(low, [*lower, *aliases], n=1)
            name = lower.get(guess[0]) or aliases[guess[0]].canonical if guess else None
            hint = (
                f"Did you mean '{name}'?"
                if name
                else f"`pyspark-kinesis options` lists the {what}'s options (with the cli extra installed)."
            )
            raise OptionError(
                key,
                f"this option is not known to the kinesis {what} (Spark hands option names in lower case)",
                hint,
            )
        if canonical in folded and folded[canonical] != value:
            raise OptionError(
                key,
                f"sets the same as '{given_as[canonical]}', which is also given, with another value",
                f"Give only one of them ('{canonical}' is this connector's name).",
            )
        folded[canonical] = value
        given_as[canonical] = key
    return folded


def parse_time(option: str, text: str) -> int:
    """ISO-8601 -> epoch milliseconds; naive times are taken as UTC (Kinesis keeps UTC)."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            option,
            f"'{text}' is not an ISO-8601 timestamp",
            "Write it like AT_TIMESTAMP:2026-01-31T12:00:00Z.",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_position(option: str, text: str, *, allow_trim: bool = True) -> Position:
    """Parse a startingPosition/endingPosition value into a Position."""
    value = text.strip()
    upper = value.upper()
    if upper == "LATEST":
        return Position.latest()
    if upper in ("TRIM_HORIZON", "EARLIEST") and allow_trim:
        return Position.trim_horizon()
    if upper.startswith(("AT_TIMESTAMP:", "AT_TIMESTAMP ")):  # the space: awslabs' spelling
        return Position.at_timestamp(parse_time(option, value[len("AT_TIMESTAMP") + 1 :]))
    allowed = (
        "LATEST, TRIM_HORIZON or AT_TIMESTAMP:<ISO-8601>"
        if allow_trim
        else "LATEST or AT_TIMESTAMP:<ISO-8601>"
    )
    raise OptionError(option, f"unknown position '{value}'", f"Use {allowed}.")


def int_option(opts: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = opts.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(name, f"'{raw}' is not a whole number", f"Give an integer >= {minimum}.") from None
    if value < minimum:
        raise OptionError(name, f"{value} is below the minimum {minimum}", f"Give an integer >= {minimum}.")
    return value


def bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(name, f"'{raw}' is not a boolean", "Use true or false.")
