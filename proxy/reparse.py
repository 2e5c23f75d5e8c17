"""Parsing a thread's next request as a delta of its previous one.

An agent sends the whole conversation every turn, and each turn repeats the last one's bytes
and adds a few messages at the end. The previous request's entries already hold the parsed
form and exact bytes of that repeated part, so only what follows it needs JSON parsing.

Soundness rests on bytes alone. If the body starts with the previous body's bytes up to and
including its list's `[`, a JSON parser is at the same place in both: inside the top-level
object, at the start of that key's array. Each following element that is byte for byte a
previous element, separated only by whitespace and commas, leaves it at the same place again.
The rest (the new elements and every field after the list) is parsed for real, as the body with
the repeated elements cut out, which is valid JSON exactly when the body is. Anything that does
not fit returns None, and the caller parses the whole body as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add
from typing import Any

import orjson

from proxy import jsonio
from proxy.conversation import Api, Entries, entries_from
from proxy.errors import BadRequest
from proxy.inbound import Inbound, checked_fields
from proxy.jsonspan import ArraySpans, following_elements, scan_elements, skip_ws

_COMMA, _CLOSE = ord(","), ord("]")
# The very value a named tuple's own `__new__` makes, built in C: that one is a Python
# function, about twice the instructions (callgrind), and every reparse makes an `ArraySpans`.
_TUPLE_NEW = tuple.__new__
# The list's key, and as it reads in the body.
_LIST_KEYS = {Api.CHAT: ("messages", b'"messages"'), Api.RESPONSES: ("input", b'"input"')}


# Not a named tuple: its `__new__` is a Python function, and one is made for every request
# (twice the instructions of this class). Not frozen: a frozen `__init__` sets each field
# through `object.__setattr__`. Never mutated all the same.
@dataclass(slots=True)
class Known:
    """What a thread's previous request leaves for parsing the next one."""

    api: Api
    lead: bytes  # the body up to and including its list's `[`
    entries: Entries  # its entries, each with the client's bytes
    sources: tuple[bytes, ...]  # those bytes, and the parsed elements, as the request had them
    elements: tuple[dict[str, Any], ...]
    weight: int  # the bytes held: the lead and the elements' sources


def known_of(inbound: Inbound) -> Known | None:
    """What `inbound` leaves for its thread's next request; None when it has no located list."""
    if inbound.entries is None or inbound.spans is None or inbound.elements is None:
        return None
    return Known(inbound.api, inbound.body[:inbound.spans.start + 1], inbound.entries,
                 inbound.spans.elements, inbound.elements, inbound.spans.end)


def reparse(api: Api, body: bytes, known: Known) -> Inbound | None:
    """`body` parsed reusing `known`'s elements; None when it does not extend them cleanly."""
    if api is not known.api or not body.startswith(known.lead):
        return None
    reused, at = _repeated(body, len(known.lead), known.sources)
    if not reused:
        return None
    cut = known.lead + body[at:]
    try:
        doc = orjson.loads(cut)  # not through `jsonio.loads`: a frame less on every request
    except orjson.JSONDecodeError:
        try:
            doc = jsonio.loads(cut)  # what orjson refuses and JSON allows (lone surrogates)
        except ValueError:
            return None  # the whole-body parse words the error
    if not isinstance(doc, dict):
        return None
    key, quoted_key = _LIST_KEYS[api]
    fresh = doc.get(key)
    if not isinstance(fresh, list):
        return None
    spans = _fresh_spans(body, at, fresh)
    if spans is None or body.find(quoted_key, spans[1]) >= 0:
        return None  # a later copy of the key is the list a parser keeps: the slow path decides
    try:
        model, stream, _ = checked_fields(api, doc)  # the new elements are checked too
    except BadRequest:
        return None
    elements = known.elements[:reused] + tuple(fresh)
    doc[key] = list(elements)
    sources, end = spans
    # In C: a named tuple's own `__new__` is a Python function (see `_TUPLE_NEW`).
    located = _TUPLE_NEW(ArraySpans, (len(known.lead) - 1, end, known.sources[:reused] + sources))
    # Past an edited element the old entries may line up again: `entries_from` reuses those.
    entries = known.entries[:reused]
    if fresh:  # a retried turn has nothing new to build
        entries += entries_from(api, fresh, sources, known.entries[reused:])
    return Inbound(api, body, doc, model, stream, key, entries, located, elements, reused)


def _repeated(body: bytes, at: int, sources: Sequence[bytes]) -> tuple[int, int]:
    """How many leading elements repeat `sources`, and where the parse must go on.

    The position returned is just past the separator after the last repeated element (so the
    cut body reads `[` + the rest), or at the `]` when the list ends there.
    """
    n, count = len(body), 0
    resume = at
    if sources:
        # The usual turn of a compact client: every element repeated, then `]` or a new one.
        head = b",".join(sources)
        end = at + len(head)
        if end < n and body.startswith(head, at):
            if body[end] == _CLOSE:
                return len(sources), end
            if body[end] == _COMMA:
                after = skip_ws(body, end + 1)
                if after < n and body[after] != _CLOSE:
                    return len(sources), end + 1
    if len(sources) > 1:
        # Compact clients separate elements with a bare comma: one comparison covers all but
        # the last, which the loop checks with what follows it.
        head = b",".join(sources[:-1])
        after = skip_ws(body, at + len(head) + 1)
        if (body.startswith(head, at) and body.startswith(b",", at + len(head))
                and after < n and body[after] != _CLOSE):
            count, resume = len(sources) - 1, at + len(head) + 1
    for source in sources[count:]:
        i = skip_ws(body, resume)
        if not body.startswith(source, i):
            break
        i = skip_ws(body, i + len(source))
        if i >= n:
            break
        if body[i] == _CLOSE:
            return count + 1, i
        if body[i] != _COMMA:
            break
        after = skip_ws(body, i + 1)
        if after < n and body[after] == _CLOSE:
            break  # `[a,]` is not JSON: leave it to the whole-body parse to say so
        count, resume = count + 1, i + 1
    return count, resume


def _fresh_spans(body: bytes, at: int,
                 fresh: Sequence[object]) -> tuple[tuple[bytes, ...], int] | None:
    """The bytes of the new elements, which follow `at`, and the index just past the list's
    `]`: compact JSON is checked against its own serialization, any other style is scanned."""
    if not fresh and at < len(body) and body[at] == _CLOSE:
        return (), at + 1  # nothing new (a retried turn): what `following_elements` finds
    compact = _compact_spans(body, at, fresh) if fresh else None
    if compact is not None:
        return compact
    found = following_elements(body, at, fresh, after_element=False)
    if found is not None:
        return tuple(body[a:b] for a, b in found[0]), found[1]
    scanned = scan_elements(body, at)
    if scanned is None or len(scanned[0]) != len(fresh):
        return None
    return tuple(scanned[0]), scanned[1]


def _compact_spans(body: bytes, at: int,
                   fresh: Sequence[object]) -> tuple[tuple[bytes, ...], int] | None:
    """What `following_elements` finds when the new elements are their serializations joined
    by bare commas, then `]` (a compact client's turn): one comparison, not one per element.
    None for any other layout."""
    try:
        dumped = list(map(orjson.dumps, fresh))
    except TypeError:
        return None
    lengths = list(map(len, dumped))
    end = at + sum(lengths) + len(lengths) - 1
    if not (end < len(body) and body[end] == _CLOSE and body.startswith(b",".join(dumped), at)):
        return None
    # Slices of the body, as `following_elements` gives (each is the very bytes of its dump),
    # cut in C: each starts past the one before and its comma.
    starts = list(accumulate(map(add, lengths, repeat(1)), initial=at))
    return tuple(map(body.__getitem__, map(slice, starts, map(add, starts, lengths)))), end + 1
