"""The fake's small endpoints and request guards: auth, JSON parsing, models, embeddings, 404.

Texts are OpenAI's general errors, each [OBS] in client reports and fixtures that quote
OpenAI's answer whole (the missing key's, the bad JSON's, the incorrect key's with its mask,
the missing model's, the unknown URL's); the unknown model's on `GET /v1/models/{id}` is [3P]:
gateways' fixtures give its text, `model_not_found` code and 404.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from proxy import jsonio
from proxy.testing import rejections
from proxy.testing.reference_tokens import count_text
from proxy.testing.rejections import Rejection
from proxy.testing.sse import reject

if TYPE_CHECKING:
    from proxy.testing.fake_upstream import FakeUpstream, Recorded

EMBEDDING_DIMENSIONS = 1536
_MISSING_KEY = ("You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password "
                "field (with blank username) if you're accessing the API from your browser and are "
                "prompted for a username and password. You can obtain an API key from "
                "https://platform.openai.com/account/api-keys.")
_BAD_JSON = ("We could not parse the JSON body of your request. (HINT: This likely means you aren't "
             "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
             "sent was not valid JSON. If you have trouble figuring out how to fix this, please "
             "contact us through our help center at help.openai.com.)")


def check_auth(api_key: str | None, header: str | None) -> Rejection | None:
    if api_key is None:
        return None
    if not header or not header.startswith("Bearer ") or not header[7:].strip():
        return rejections.openai(_MISSING_KEY, status=401)
    presented = header[7:].strip()
    if presented == api_key:
        return None
    return rejections.openai(f"Incorrect API key provided: {_mask(presented)}. You can find your API "
                             "key at https://platform.openai.com/account/api-keys.",
                             code="invalid_api_key", status=401)


def _mask(key: str) -> str:
    """OpenAI's mask: the first eight characters and the last four, a star for each between
    [OBS: `sk-4sJHr***************************************w8ZP` for a 51-character key,
    chatanywhere/GPT_API_free#427]. A short value is quoted whole [OBS: "Incorrect API key
    provided: undefined.", jas3333/GPT-Helper#26]; where the mask starts is not recorded."""
    if len(key) <= 12:
        return key
    return key[:8] + "*" * (len(key) - 12) + key[-4:]


def parse_body(recorded: Recorded) -> dict[str, Any] | Rejection:
    """The request's JSON object with a `model`, or OpenAI's answer to a body without one."""
    if not isinstance(recorded.json, dict):
        return rejections.openai(_BAD_JSON)
    if not isinstance(recorded.json.get("model"), str) or not recorded.json["model"]:
        return rejections.openai("you must provide a model parameter")
    return recorded.json


async def not_found(request: web.Request) -> web.Response:
    return reject(rejections.openai(f"Invalid URL ({request.method} {request.path})", status=404))


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "fake-upstream"}


async def models(fake: FakeUpstream, request: web.Request) -> web.Response:
    data = [_model_card(name) for name in fake.model_names()]
    return web.json_response({"object": "list", "data": data}, dumps=_dumps)


async def model(fake: FakeUpstream, request: web.Request) -> web.Response:
    name = request.match_info["id"]
    if name in fake.model_names() or fake.limit_for(name) is not None:
        return web.json_response(_model_card(name), dumps=_dumps)
    return reject(rejections.openai(f"The model '{name}' does not exist", param="model",
                                    code="model_not_found", status=404))


async def embeddings(fake: FakeUpstream, request: web.Request) -> web.Response:
    body = parse_body(fake.recorded(request))
    if isinstance(body, Rejection):
        return reject(body)
    texts = _embedding_inputs(body.get("input"))
    if texts is None:
        return reject(rejections.openai("'input' is a required property", param="input"))
    requested = body.get("dimensions")
    dimensions = requested if isinstance(requested, int) and requested > 0 else EMBEDDING_DIMENSIONS
    as_base64 = body.get("encoding_format") == "base64"
    data = [{"object": "embedding", "index": i, "embedding": _encode(vector(t, dimensions), as_base64)}
            for i, t in enumerate(texts)]
    tokens = sum(count_text(t) for t in texts)
    return web.json_response({"object": "list", "data": data, "model": body["model"],
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, dumps=_dumps)


def _embedding_inputs(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        return [v if isinstance(v, str) else jsonio.dumps_text(v) for v in value]
    return None


def vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for `text`."""
    raw = b""
    counter = 0
    while len(raw) < dimensions * 4:
        raw += hashlib.blake2b(f"{counter}:{text}".encode(), digest_size=64).digest()
        counter += 1
    values = [v / 2**31 - 1.0 for v in struct.unpack(f"<{dimensions}I", raw[: dimensions * 4])]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _encode(values: list[float], as_base64: bool) -> Any:
    if not as_base64:
        return values
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def request_headers(fake: FakeUpstream) -> Mapping[str, str]:
    return {"x-request-id": "req_" + fake.ids.hex(32), "openai-processing-ms": "1"}
