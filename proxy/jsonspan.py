"""Where a top-level array and each of its elements sit in a request body, as byte spans.

The proxy replaces only `messages` (or `input`) and must send every untouched element and every
other field exactly as the client's bytes. `locate_array` finds those bytes. Most clients
serialize compactly, the way orjson does, so the fast path re-serializes each parsed element
and checks that it sits next in the body (a memcmp per element); a client with another style
(spaces, escaped unicode) takes the tokenizing scanner, slower but exact.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import orjson

from proxy import jsonio

_WS = b" \t\r\n"
_WS_RUN = re.compile(rb"[ \t\r\n]*")
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],:]')


class ArraySpans(NamedTuple):
    """`body[:start]` + `[` elements `]` + `body[end:]` rebuilds the body.

    A named tuple: one is made for every request, and a tuple is built in C."""

    start: int  # index of the array's `[`
    end: int  # index just past its `]`
    elements: tuple[bytes, ...]

    def splice(self, body: bytes, array: bytes) -> bytes:
        return body[:self.start] + array + body[self.end:]


def locate_array(body: bytes, key: str, parsed: Sequence[Any],
                 hints: Sequence[bytes] = ()) -> ArraySpans | None:
    """The spans of top-level `key`'s array, whose parsed value is `parsed`; None if absent.

    `hints` are the bytes the same elements had in an earlier request (the thread's previous
    one): an element found at its place with those exact bytes needs no serializing.
    """
    return _fast(body, key, parsed, hints) or _scan(body, key, len(parsed))


@lru_cache(maxsize=8)
def _array_under(key: str) -> re.Pattern[bytes]:
    return re.compile(re.escape(jsonio.dumps(key)) + rb"[ \t\r\n]*:[ \t\r\n]*\[")


def skip_ws(body: bytes, i: int) -> int:
    """The index of the first non-whitespace byte from `i` (at most `len(body)`)."""
    # Matched in C: a parse asks a few times per element, and most bodies have no space there.
    return _WS_RUN.match(body, i).end()  # type: ignore[union-attr]  # `*` always matches


def _skip_ws_back(body: bytes, i: int) -> int:
    while i >= 0 and body[i] in _WS:
        i -= 1
    return i


def _fast(body: bytes, key: str, parsed: Sequence[Any],
          hints: Sequence[bytes] = ()) -> ArraySpans | None:
    if not parsed:
        return None
    try:
        first_bytes = orjson.dumps(parsed[0])
    except TypeError:
        return None
    first = body.find(first_bytes)
    if first < 0 and hints:
        first = body.find(hints[0])
    if first < 0:
        return None
    start = _skip_ws_back(body, first - 1)
    if start < 0 or body[start] != ord("["):
        return None
    colon = _skip_ws_back(body, start - 1)
    key_bytes = jsonio.dumps(key)
    if colon < 0 or body[colon] != ord(":"):
        return None
    key_end = _skip_ws_back(body, colon - 1) + 1
    key_start = key_end - len(key_bytes)
    if body[key_start:key_end] != key_bytes:
        return None
    known = _known_prefix(body, first, hints, len(parsed))
    rest = following_elements(body, known[-1][1] if known else first, parsed[len(known):],
                              after_element=bool(known), hints=hints[len(known):])
    if rest is None:
        return None
    spans, i = known + rest[0], rest[1] - 1
    if body.find(first_bytes, i) >= 0:
        return None  # another copy of the list further on (nested?): only the scanner can tell
    opening = _array_under(key)
    if opening.search(body, 0, key_start) or opening.search(body, i + 1):
        # Another array under the same key, before or after (`metadata.messages`): the one
        # found may be that nested copy, and the client's own list one the fast path missed
        # (spaced differently). Only the scanner knows which is at the top level.
        return None
    # Slices of the body, not orjson's buffers: those carry kilobytes of spare capacity each.
    return ArraySpans(start, i + 1, tuple(body[a:b] for a, b in spans))


def following_elements(body: bytes, i: int, values: Sequence[Any], *, after_element: bool,
                       hints: Sequence[bytes] = ()) -> tuple[list[tuple[int, int]], int] | None:
    """The spans of `values` laid out one after another from `i` in compact JSON (each its
    orjson serialization, or `hints[k]`, the bytes it had before), comma-separated, up to the
    list's `]`; with the index just past that `]`. None when they are not found so.
    `after_element`: `i` is just past an element, so a comma comes first."""
    n = len(body)
    spans: list[tuple[int, int]] = []
    for k, value in enumerate(values):
        if k or after_element:
            i = skip_ws(body, i)
            if i >= n or body[i] != ord(","):
                return None
            i += 1
        i = skip_ws(body, i)
        # A JSON object ends where it ends: a hint matching here is this element, whole.
        if k < len(hints) and body.startswith(hints[k], i):
            element = hints[k]
        else:
            try:
                element = orjson.dumps(value)
            except TypeError:
                return None
            if not body.startswith(element, i):
                return None
        spans.append((i, i + len(element)))
        i += len(element)
    i = skip_ws(body, i)
    if i >= n or body[i] != ord("]"):
        return None
    return spans, i + 1


def _known_prefix(body: bytes, at: int, hints: Sequence[bytes],
                  count: int) -> list[tuple[int, int]]:
    """Spans of the leading elements that are the hints exactly, when the client separates
    elements with a bare comma: then one comparison covers them all (the common, compact case)."""
    usable = min(len(hints), count)
    while usable > 0:
        if body.startswith(b",".join(hints[:usable]), at):
            spans = []
            for hint in hints[:usable]:
                spans.append((at, at + len(hint)))
                at += len(hint) + 1
            return spans
        if usable <= 8:
            break  # an early element changed, or the client spaces its commas: the loop
        usable //= 2
    return []


def _scan(body: bytes, key: str, count: int) -> ArraySpans | None:
    """Tokenize the body at the top level; the last `key` array's elements, by `scan_elements`."""
    key_bytes = jsonio.dumps(key)
    depth = 0
    expecting_key = pending_key = False
    found: ArraySpans | None = None
    tokens = _TOKEN.finditer(body)
    while (match := next(tokens, None)) is not None:
        token = match.group()
        c = token[0]
        if c == 0x22:  # string
            if depth == 1 and expecting_key:
                pending_key = token == key_bytes or jsonio.loads(token) == key
                expecting_key = False
            continue
        if c == 0x3A:  # ':'
            continue
        if c == 0x2C:  # ','
            if depth == 1:
                expecting_key = True
            continue
        if c == 0x5B and depth == 1 and pending_key:  # the key's array: read it whole
            scanned = scan_elements(body, match.end())
            if scanned is None:
                return None
            found = ArraySpans(match.start(), scanned[1], tuple(scanned[0]))
            pending_key = False
            tokens = _TOKEN.finditer(body, scanned[1])
            continue
        if c in (0x7B, 0x5B):  # '{' '['
            depth += 1
            if depth == 1:
                expecting_key = c == 0x7B
            pending_key = False if depth == 2 else pending_key
            continue
        depth -= 1  # '}' or ']'
    if found is None or len(found.elements) != count:
        return None
    return found


def scan_elements(body: bytes, at: int) -> tuple[list[bytes], int] | None:
    """The elements of an array from `at` (just inside its `[`, or after a separator) to its
    `]`, as byte slices, and the index just past that `]`; None for anything else.

    Elements that are not objects, arrays or strings (numbers, literals) are not tokens here,
    so a list holding them is reported short and the caller falls back."""
    depth = 0
    elements: list[bytes] = []
    start = at
    for match in _TOKEN.finditer(body, at):
        c = match.group()[0]
        if c == 0x22:  # string
            if depth == 0:
                elements.append(match.group())
        elif c in (0x7B, 0x5B):  # '{' '['
            if depth == 0:
                start = match.start()
            depth += 1
        elif c in (0x7D, 0x5D):  # '}' ']'
            if depth == 0:
                return (elements, match.end()) if c == 0x5D else None
            depth -= 1
            if depth == 0:
                elements.append(body[start:match.end()])
    return None
