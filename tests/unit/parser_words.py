"""The JSON parser's own words for a text that does not parse: they differ between the orjson
versions the package allows, so a test of a message that quotes them asks orjson instead of pinning."""

from __future__ import annotations

import orjson


def orjson_words(text: str) -> str:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return str(exc)
    raise AssertionError(f"{text!r} is valid JSON")
