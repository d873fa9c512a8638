"""Options declared once: key, kind, default, allowed values, secret or not, doc line.

A declaration is all a new option needs: parsing reads the value from it (`parse_declared`, for the
options that fill a config field as they are), the docs' option tables are generated from it
(`markdown_table`, checked against docs/ by a test), and so is `pyspark-kinesis options`. Options whose
value needs more than a number, a boolean or one of a few words (positions, JSON, ARNs) keep their own
parser beside the config they fill, and are still declared here for their key, docs and secrecy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError

INT, BOOL, TEXT = "int", "bool", "text"

# Keys of the options declared secret: no message or log line repeats their values (`is_secret`).
_SECRETS: set[str] = set()


@dataclass(frozen=True)
class Option:
    """One option. `default`: its value when not given (None: none); `shown`: the default as the docs
    show it when that is not the value itself ("(none)", "(one per shard)"); `choices`: the values
    allowed (case does not matter; parsed to the declared spelling); `field`: the config field a
    number, boolean or choice fills as it is ("": parsed by its own code)."""

    key: str
    doc: str
    default: Any = None
    shown: str = ""
    kind: str = TEXT
    minimum: int = 0
    choices: tuple[str, ...] = ()
    secret: bool = False
    field: str = ""

    def __post_init__(self) -> None:
        if self.secret:
            _SECRETS.add(self.key)

    @property
    def default_text(self) -> str:
        if self.shown:
            return self.shown
        if self.default is None:
            return "(none)"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)

    def parse(self, opts: Mapping[str, str]) -> Any:
        """The option's value from the folded options (see `option_values.fold`), checked."""
        from .option_values import bool_option, int_option

        if self.kind == INT:
            return int_option(opts, self.key, self.default, self.minimum)
        if self.kind == BOOL:
            return bool_option(opts, self.key, bool(self.default))
        raw = opts.get(self.key)
        if raw is None or not str(raw).strip():
            return self.default
        if not self.choices:
            return str(raw).strip()
        spelled = {c.lower(): c for c in self.choices}
        value = str(raw).strip()
        if value.lower() not in spelled:
            allowed = " or ".join(self.choices)
            raise OptionError(self.key, f"'{value}' is not {allowed}", f"Use {allowed}.")
        return spelled[value.lower()]


def is_secret(key: str) -> bool:
    return key in _SECRETS


def by_key(options: Iterable[Option]) -> dict[str, Option]:
    return {o.key: o for o in options}


def parse_declared(opts: Mapping[str, str], options: Iterable[Option]) -> dict[str, Any]:
    """field -> value for every declared option that fills a config field as it is."""
    return {o.field: o.parse(opts) for o in options if o.field}


def markdown_table(options: Iterable[Option]) -> str:
    """The rows of a docs page's option table (`| option | default | meaning |`)."""
    return "\n".join(f"| `{o.key}` | {o.default_text} | {o.doc} |" for o in options)
