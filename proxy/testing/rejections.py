"""The fake upstream's rejections: an HTTP status plus the exact error body a provider returns.

Every provider family wraps its errors differently (PROTOCOL.md §2, §3, §4): OpenAI and its
clones `{"error": {...}}`, Mistral and Cerebras a flat object, Anthropic `{"type": "error", ...}`,
Gemini's OpenAI-compatible endpoint a JSON *array*, OpenRouter the upstream's body as a string in
`metadata.raw`. The builders here are the only place those envelopes are spelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy import jsonio


@dataclass(frozen=True)
class Rejection:
    status: int
    body: Any  # the exact JSON body: a dict, or a list for Gemini

    def to_bytes(self) -> bytes:
        return jsonio.dumps(self.body)  # the texts may quote the client's strings


def openai(message: str, *, param: str | None = None, code: str | int | None = None,
           type_: str = "invalid_request_error", status: int = 400) -> Rejection:
    return Rejection(status, {"error": {"message": message, "type": type_, "param": param,
                                        "code": code}})


def deepseek(message: str) -> Rejection:
    return openai(message, code="invalid_request_error")


def kimi(message: str) -> Rejection:
    """Moonshot's envelope: no `param` or `code`, and a top-level `type` [OBS]."""
    return Rejection(400, {"error": {"type": "invalid_request_error", "message": message},
                           "type": "error"})


def vllm(message: str) -> Rejection:
    """vLLM's envelope: the exception class as `type`, the status as `code` (PROTOCOL.md §1.4 [3P])."""
    return openai(message, type_="BadRequestError", code=400)


def flat(message: str, *, type_: str, param: str | None = None, code: str | None = None,
         status: int = 400, mistral: bool = False) -> Rejection:
    """Mistral's and Cerebras's error object, which has no `error` wrapper."""
    body: dict[str, Any] = {"object": "error"} if mistral else {}
    body.update({"message": message, "type": type_, "param": param, "code": code})
    return Rejection(status, body)


def gemini(message: str, *, status_text: str = "INVALID_ARGUMENT", code: int = 400) -> Rejection:
    return Rejection(code, [{"error": {"code": code, "message": message, "status": status_text}}])


def anthropic_body(message: str, request_id: str = "req_fake0000000000000000") -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message},
            "request_id": request_id}


def anthropic(message: str) -> Rejection:
    return Rejection(400, anthropic_body(message))


def openrouter_wrapped(raw_body: Any, provider: str = "Anthropic") -> Rejection:
    """OpenRouter relays a provider's rejection as a string inside `metadata.raw`."""
    raw = jsonio.dumps_text(raw_body)
    return Rejection(400, {"error": {"message": "Provider returned error", "code": 400,
                                     "metadata": {"raw": raw, "provider_name": provider}}})
