"""Credentials in free text: what `redact` removes from log messages and exception texts.

Structured fields are masked by name (`logs._drop_secrets`); text is different. aiohttp's parser
quotes the raw header line it refused (`b'Authorization: Bearer sk-...\\x01'`), or the first
100 bytes of a line too long to read, and any library may put a token in a message. So the text
of every record that did not come from the proxy's own events, and every exception text, goes
through here before it is written.
"""

from __future__ import annotations

import re

# A credential header's value runs to the end of its line: a real line break, or the `\r` or
# `\n` escape of a bytes repr. Quotes are part of it, so a value holding one is not cut short.
_HEADER_VALUE = re.compile(
    r"(?i)((?:proxy-)?authorization|(?:x-)?api[-_]key)(['\"]?\s*[:=]\s*)(?:[^\r\n\\]|\\[^rn])+")
_BEARER = re.compile(r"(?i)\b(bearer\s+)\S+")
_SK_KEY = re.compile(r"(?<![\w-])sk-[\w-]+")
# A URL's query may hold a key (`?key=...`, `&api-key=...`): every value in it goes.
_URL_QUERY = re.compile(r"(?i)(\bhttps?://[^\s?#'\"<>]*\?)([^\s#'\"<>]*)")
_QUERY_VALUE = re.compile(r"((?:^|&)[^=&]*=)[^&]*")
# aiohttp's LineTooLong quotes the start of the line without its header name: it can be any
# header's value, a key of any shape.
_TOO_LONG_EXCERPT = re.compile(r"(bytes when reading: ).+")


def redact(text: str) -> str:
    """`text` with credential header values, bearer tokens, `sk-` keys, URL query values and
    over-long line excerpts replaced by `***`."""
    text = _HEADER_VALUE.sub(r"\1\2***", text)
    text = _URL_QUERY.sub(_masked_query, text)
    text = _BEARER.sub(r"\1***", text)
    text = _SK_KEY.sub("sk-***", text)
    return _TOO_LONG_EXCERPT.sub(r"\1***", text)


def _masked_query(match: re.Match[str]) -> str:
    return match.group(1) + _QUERY_VALUE.sub(r"\1***", match.group(2))
