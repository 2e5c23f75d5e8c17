"""A client's chat-completions or Responses request, parsed and checked once.

The proxy needs the model (to route), `stream`, and the message list as entries of the internal
form with the client's exact bytes. Anything it cannot work with is a clear 400 in OpenAI's
error shape that never reaches upstream; everything else is left for upstream to judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.conversation import Api, Entries, entries_from
from proxy.errors import BadRequest
from proxy.jsonspan import ArraySpans, locate_array


@dataclass(frozen=True)
class Inbound:
    api: Api
    body: bytes
    doc: dict[str, Any]
    model: str
    stream: bool
    array_key: str  # "messages" or "input"
    entries: Entries | None  # None: no list to work on (Responses `input` as a string, or absent)
    spans: ArraySpans | None

    @property
    def stateful_upstream(self) -> bool:
        """A Responses request chained by `previous_response_id` keeps its state upstream."""
        return self.api is Api.RESPONSES and bool(self.doc.get("previous_response_id"))


def parse_json_body(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}. "
                         "Send a JSON object with Content-Type: application/json.") from None
    if not isinstance(doc, dict):
        raise BadRequest("The request body must be a JSON object.")
    return doc


def parse_inbound(api: Api, body: bytes) -> Inbound:
    doc = parse_json_body(body)
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("You must provide a model parameter.", param="model")
    stream = doc.get("stream") is True
    key = "messages" if api is Api.CHAT else "input"
    elements = doc.get(key)
    if api is Api.CHAT and not isinstance(elements, list):
        raise BadRequest("'messages' must be an array of message objects.", param="messages")
    if not isinstance(elements, list) or not elements:
        return Inbound(api, body, doc, model, stream, key, None, None)
    for i, element in enumerate(elements):
        if not isinstance(element, dict):
            raise BadRequest(f"Each item of '{key}' must be an object; item {i} is "
                             f"{type(element).__name__}.", param=f"{key}.[{i}]")
    spans = locate_array(body, key, elements)
    entries = entries_from(api, elements, spans.elements if spans else None)
    return Inbound(api, body, doc, model, stream, key, entries, spans)
