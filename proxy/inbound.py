"""A client's chat-completions or Responses request, parsed and checked once.

The proxy needs the model (to route), `stream`, and the message list as entries of the internal
form with the client's exact bytes. Anything it cannot work with is a clear 400 in OpenAI's
error shape that never reaches upstream; everything else is left for upstream to judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from proxy import jsonio

from proxy.conversation import Api, Entries, Entry, entries_from
from proxy.conversation import CHAT as _CHAT, RESPONSES as _RESPONSES
from proxy.errors import BadRequest
from proxy.jsonspan import ArraySpans, locate_array


# Not frozen: one is built for every request and dropped with it, and a frozen
# `__init__` sets each field through `object.__setattr__`. Never mutated all the same.
@dataclass
class Inbound:
    api: Api
    body: bytes
    doc: dict[str, Any]
    model: str
    stream: bool
    array_key: str  # "messages" or "input"
    entries: Entries | None  # None until `with_entries`, or when there is no list to work on
    spans: ArraySpans | None
    elements: tuple[dict[str, Any], ...] | None = None  # the parsed list, when there is one
    reused: int = 0  # leading elements taken from the thread's previous request unparsed

    @property
    def upstream_state(self) -> str | None:
        """The field by which a Responses request keeps its state upstream, or None
        (PROTOCOL.md §6.1): `previous_response_id` chains a stored response, a non-null
        `conversation` names a server-side conversation. Either way calls and outputs the
        client answers may live only upstream, so the request is not ours to rebuild."""
        if self.api is not _RESPONSES:
            return None
        if self.doc.get("previous_response_id"):
            return "previous_response_id"
        if self.doc.get("conversation") is not None:
            return "conversation"
        return None

    @property
    def stateful_upstream(self) -> bool:
        # Asked of every request: a chat one, never stateful, is answered without the lookups.
        return self.api is _RESPONSES and self.upstream_state is not None


def parse_json_body(body: bytes) -> dict[str, Any]:
    try:
        doc = jsonio.loads(body)
    except jsonio.NestedTooDeep as exc:
        raise BadRequest(f"The request body cannot be parsed: {exc}.") from None
    except ValueError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}. "
                         "Send a JSON object with Content-Type: application/json.") from None
    if not isinstance(doc, dict):
        raise BadRequest("The request body must be a JSON object.")
    return doc


def parse_inbound(api: Api, body: bytes) -> Inbound:
    return checked_inbound(api, body, parse_json_body(body))


def checked_inbound(api: Api, body: bytes, doc: dict[str, Any]) -> Inbound:
    """The request `doc` (parsed from `body`) checked; entries not built yet."""
    model, stream, elements = checked_fields(api, doc)
    key = "messages" if api is _CHAT else "input"
    return Inbound(api, body, doc, model, stream, key, None, None, elements)


def checked_fields(api: Api,
                   doc: dict[str, Any]) -> tuple[str, bool, tuple[dict[str, Any], ...] | None]:
    """The model, `stream` and the list's elements (None without a non-empty list) of `doc`;
    a 400 for what the proxy cannot work with."""
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("You must provide a model parameter.", param="model")
    stream = doc.get("stream") is True
    key = "messages" if api is _CHAT else "input"
    elements = doc.get(key)
    if api is _CHAT and not isinstance(elements, list):
        raise BadRequest("'messages' must be an array of message objects.", param="messages")
    if not isinstance(elements, list) or not elements:
        return model, stream, None
    if not all(map(isinstance, elements, repeat(dict))):  # checked in C; the culprit named below
        i, element = next((i, e) for i, e in enumerate(elements) if not isinstance(e, dict))
        raise BadRequest(f"Each item of '{key}' must be an object; item {i} is "
                         f"{type(element).__name__}.", param=f"{key}.[{i}]")
    return model, stream, tuple(elements)


def with_entries(inbound: Inbound, previous: Sequence[Entry] = ()) -> Inbound:
    """The inbound request with its list as entries, reusing `previous` where bytes match.

    The thread's previous entries also locate this body's elements: a conversation grows at
    its end, so most elements are found by comparing bytes, not by serializing them again.
    """
    if inbound.elements is None:
        return inbound
    hints = [e.source for e in previous if e.source is not None]
    spans = locate_array(inbound.body, inbound.array_key, inbound.elements, hints)
    sources = spans.elements if spans else None
    entries = entries_from(inbound.api, inbound.elements, sources, previous)
    # Built directly: `dataclasses.replace` walks the fields in Python, ~300 steps a request.
    return Inbound(inbound.api, inbound.body, inbound.doc, inbound.model, inbound.stream,
                   inbound.array_key, entries, spans, inbound.elements, inbound.reused)


def leading_bytes(inbound: Inbound) -> list[bytes]:
    """The leading system/developer elements and the first user message, for a fingerprint."""
    out: list[bytes] = []
    instructions = inbound.doc.get("instructions")
    if inbound.api is _RESPONSES and isinstance(instructions, str):
        out.append(instructions.encode("utf-8", "surrogatepass"))
    for element in inbound.elements or ():
        # Canonical bytes, not the client's: the fingerprint must not depend on formatting.
        out.append(jsonio.dumps(element, sort_keys=True))
        if element.get("role") == "user":
            break
    return out
