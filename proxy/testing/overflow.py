"""Context-overflow answers per provider, with the exact texts of PROTOCOL.md §3.

`chat_overflow` is what a chat endpoint answers when the prompt does not fit; `responses_overflow`
is OpenAI's Responses form, sent as an HTTP 400 or, in a stream, as an `error` event. The `ollama`
style is the odd one: no error at all, the prompt is silently cut to the window
(`silently_truncates`).
"""

from __future__ import annotations

from typing import Any

from proxy.testing import rejections
from proxy.testing.rejections import Rejection

OVERFLOW_STYLES = ("openai", "responses", "anthropic", "llama.cpp", "vllm", "openrouter", "gemini",
                   "groq", "cerebras", "deepseek", "mistral", "ollama")
RESPONSES_TEXT = ("Your input exceeds the context window of this model. Please adjust your input "
                  "and try again.")


def silently_truncates(style: str) -> bool:
    return style == "ollama"


def responses_error() -> dict[str, Any]:
    return {"type": "invalid_request_error", "code": "context_length_exceeded",
            "message": RESPONSES_TEXT, "param": "input"}


def responses_overflow() -> Rejection:
    return rejections.openai(RESPONSES_TEXT, param="input", code="context_length_exceeded")


def chat_overflow(style: str, tokens: int, limit: int) -> Rejection:
    builder = _BUILDERS.get(style)
    if builder is None:
        raise ValueError(f"unknown overflow style {style!r}; known: {', '.join(OVERFLOW_STYLES)}")
    return builder(tokens, limit)


def _openai(tokens: int, limit: int) -> Rejection:  # [OBS]
    return rejections.openai(f"This model's maximum context length is {limit} tokens. However, your "
                             f"messages resulted in {tokens} tokens. Please reduce the length of the "
                             "messages.", param="messages", code="context_length_exceeded")


def _responses(tokens: int, limit: int) -> Rejection:
    return responses_overflow()


def _anthropic(tokens: int, limit: int) -> Rejection:  # [OBS]
    return rejections.anthropic(f"prompt is too long: {tokens} tokens > {limit} maximum")


def _llama_cpp(tokens: int, limit: int) -> Rejection:  # [OBS]
    return Rejection(400, {"error": {
        "code": 400, "message": f"request ({tokens} tokens) exceeds the available context size "
                                f"({limit} tokens), try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": tokens, "n_ctx": limit}})


def _vllm(tokens: int, limit: int) -> Rejection:  # text [SRC], envelope [3P]
    return rejections.openai(f"This model's maximum context length is {limit} tokens. However, your "
                             f"request has {tokens} input tokens. Please reduce the length of the "
                             "input messages.", type_="BadRequestError", code=400)


def _openrouter(tokens: int, limit: int) -> Rejection:  # [OBS]
    return Rejection(400, {"error": {"message": (
        f"This endpoint's maximum context length is {limit} tokens. However, you requested about "
        f"{tokens} tokens ({tokens} of text input). Please reduce the length of either one, or use "
        'the "middle-out" transform to compress your prompt automatically.'), "code": 400}})


def _gemini(tokens: int, limit: int) -> Rejection:  # [OBS]
    return rejections.gemini(f"The input token count ({tokens}) exceeds the maximum number of "
                             f"tokens allowed ({limit}).")


def _groq(tokens: int, limit: int) -> Rejection:  # [OBS]
    return rejections.openai("Please reduce the length of the messages or completion.",
                             param="messages", code="context_length_exceeded")


def _cerebras(tokens: int, limit: int) -> Rejection:  # text [OBS]; flat envelope and code [MEM]
    return rejections.flat(f"Please reduce the length of the messages or completion. Current length "
                           f"is {tokens} while limit is {limit}", type_="invalid_request_error",
                           param="messages", code="context_length_exceeded")


def _deepseek(tokens: int, limit: int) -> Rejection:  # [3P]
    return rejections.deepseek(f"This model's maximum context length is {limit} tokens. However, you "
                               f"requested {tokens} tokens ({tokens} in the messages, 0 in the "
                               "completion). Please reduce the length of the messages or completion.")


def _mistral(tokens: int, limit: int) -> Rejection:  # text [3P]; envelope as its other errors
    return rejections.flat(f"Prompt contains {tokens} tokens and 0 draft tokens, too large for model "
                           f"with {limit} maximum context length", mistral=True,
                           type_="invalid_request_error")


def _ollama(tokens: int, limit: int) -> Rejection:
    # Only reached for a forced overflow: Ollama never says so; its runner's nested form [OBS].
    inner = (f'{{"error":{{"code":400,"message":"request ({tokens} tokens) exceeds the available '
             f'context size ({limit} tokens), try increasing it","type":"exceed_context_size_error"}}}}')
    return Rejection(400, {"error": inner})


_BUILDERS = {"openai": _openai, "responses": _responses, "anthropic": _anthropic,
             "llama.cpp": _llama_cpp, "vllm": _vllm, "openrouter": _openrouter, "gemini": _gemini,
             "groq": _groq, "cerebras": _cerebras, "deepseek": _deepseek, "mistral": _mistral,
             "ollama": _ollama}
