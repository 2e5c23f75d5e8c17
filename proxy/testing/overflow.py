"""Context-overflow answers per provider, with the exact texts of PROTOCOL.md §3.

`chat_overflow` is what a chat endpoint answers when the prompt does not fit; `responses_overflow`
is OpenAI's Responses form, sent as an HTTP 400 or, in a stream, as an `error` event. The `ollama`
style is the odd one: no error at all, the prompt is silently cut to the window
(`silently_truncates`). Providers that count the requested completion (`max_tokens`,
`max_completion_tokens`) against the window (`counts_completion`) refuse a prompt that fits
when prompt plus completion does not, in their own words; OpenAI also names the tokens its
function definitions take.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.testing import rejections
from proxy.testing.rejections import Rejection

OVERFLOW_STYLES = ("openai", "responses", "anthropic", "llama.cpp", "vllm", "openrouter", "gemini",
                   "groq", "cerebras", "deepseek", "mistral", "ollama", "bedrock", "xai",
                   "moonshot", "lm-studio")
RESPONSES_TEXT = ("Your input exceeds the context window of this model. Please adjust your input "
                  "and try again.")


# The styles whose providers have a documented text for prompt + completion over the window.
_COUNTS_COMPLETION = frozenset({"openai", "anthropic", "vllm", "deepseek"})


@dataclass(frozen=True)
class Size:
    """What a request asks of the window: its prompt (function definitions included) and
    the completion it reserves."""

    prompt: int
    functions: int = 0
    completion: int = 0


def requested_completion(body: Mapping[str, Any]) -> int:
    """The completion a chat request reserves: `max_completion_tokens`, else `max_tokens`."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def counts_completion(style: str) -> bool:
    return style in _COUNTS_COMPLETION


def exceeds(style: str, size: Size, limit: int) -> bool:
    completion = size.completion if counts_completion(style) else 0
    return size.prompt + completion > limit


def silently_truncates(style: str) -> bool:
    return style == "ollama"


def responses_error() -> dict[str, Any]:
    return {"type": "invalid_request_error", "code": "context_length_exceeded",
            "message": RESPONSES_TEXT, "param": "input"}


def responses_overflow() -> Rejection:
    return rejections.openai(RESPONSES_TEXT, param="input", code="context_length_exceeded")


def chat_overflow(style: str, size: Size | int, limit: int) -> Rejection:
    builder = _BUILDERS.get(style)
    if builder is None:
        raise ValueError(f"unknown overflow style {style!r}; known: {', '.join(OVERFLOW_STYLES)}")
    size = size if isinstance(size, Size) else Size(size)
    completion_form = _COMPLETION_BUILDERS.get(style) if size.completion else None
    # vLLM refuses a prompt over the window before it looks at max_tokens ([SRC] renderer);
    # Anthropic is assumed to do the same [MEM]; OpenAI and DeepSeek name both in one text.
    if completion_form is not None and (size.prompt <= limit or style in ("openai", "deepseek")):
        return completion_form(size, limit)
    return builder(size, limit)


def _openai(size: Size, limit: int) -> Rejection:  # [OBS] both texts and their envelope
    head = (f"This model's maximum context length is {limit} tokens. However, your messages "
            "resulted in")
    if size.functions:
        text = (f"{head} {size.prompt} tokens ({size.prompt - size.functions} in the messages, "
                f"{size.functions} in the functions). Please reduce the length of the messages or "
                "functions.")
    else:
        text = f"{head} {size.prompt} tokens. Please reduce the length of the messages."
    return rejections.openai(text, param="messages", code="context_length_exceeded")


def _openai_completion(size: Size, limit: int) -> Rejection:
    # Text [OBS] (hao_chatgpt#4); envelope as the other overflow texts [MEM]. With function
    # definitions too, their tokens are counted in the messages' share [UNVERIFIED].
    return rejections.openai(
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{size.prompt + size.completion} tokens ({size.prompt} in the messages, {size.completion} "
        "in the completion). Please reduce the length of the messages or completion.",
        param="messages", code="context_length_exceeded")


def _anthropic_completion(size: Size, limit: int) -> Rejection:  # [OBS]
    return rejections.anthropic(f"input length and `max_tokens` exceed context limit: {size.prompt} "
                                f"+ {size.completion} > {limit}, decrease input length or "
                                "`max_tokens` and try again")


def _vllm_completion(size: Size, limit: int) -> Rejection:  # text [OBS], envelope [3P]
    return rejections.vllm(f"'max_tokens' or 'max_completion_tokens' is too large: "
                           f"{size.completion}. This model's maximum context length is {limit} "
                           f"tokens and your request has {size.prompt} input tokens "
                           f"({size.completion} > {limit} - {size.prompt}).")


def _responses(size: Size, limit: int) -> Rejection:
    return responses_overflow()


def _anthropic(size: Size, limit: int) -> Rejection:  # [OBS]
    return rejections.anthropic(f"prompt is too long: {size.prompt} tokens > {limit} maximum")


def _llama_cpp(size: Size, limit: int) -> Rejection:  # [OBS]
    return Rejection(400, {"error": {
        "code": 400, "message": f"request ({size.prompt} tokens) exceeds the available context "
                                f"size ({limit} tokens), try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": size.prompt, "n_ctx": limit}})


def _vllm(size: Size, limit: int) -> Rejection:  # text [SRC], envelope [3P]
    return rejections.openai(f"This model's maximum context length is {limit} tokens. However, your "
                             f"request has {size.prompt} input tokens. Please reduce the length of "
                             "the input messages.", type_="BadRequestError", code=400)


def _openrouter(size: Size, limit: int) -> Rejection:  # [OBS]
    return Rejection(400, {"error": {"message": (
        f"This endpoint's maximum context length is {limit} tokens. However, you requested about "
        f"{size.prompt} tokens ({size.prompt} of text input). Please reduce the length of either "
        'one, or use the "middle-out" transform to compress your prompt automatically.'),
        "code": 400}})


def _gemini(size: Size, limit: int) -> Rejection:  # [OBS]
    return rejections.gemini(f"The input token count ({size.prompt}) exceeds the maximum number of "
                             f"tokens allowed ({limit}).")


def _groq(size: Size, limit: int) -> Rejection:  # [OBS]
    return rejections.openai("Please reduce the length of the messages or completion.",
                             param="messages", code="context_length_exceeded")


def _cerebras(size: Size, limit: int) -> Rejection:
    # Text [OBS] (cline/cline#5140, anomalyco/opencode#1551); flat envelope and code [MEM].
    return rejections.flat(f"Please reduce the length of the messages or completion. Current length "
                           f"is {size.prompt} while limit is {limit}", type_="invalid_request_error",
                           param="messages", code="context_length_exceeded")


def _deepseek(size: Size, limit: int) -> Rejection:  # [3P]; also its completion form
    return rejections.deepseek(f"This model's maximum context length is {limit} tokens. However, you "
                               f"requested {size.prompt + size.completion} tokens ({size.prompt} in "
                               f"the messages, {size.completion} in the completion). Please reduce "
                               "the length of the messages or completion.")


def _mistral(size: Size, limit: int) -> Rejection:  # text [3P]; envelope as its other errors
    return rejections.flat(f"Prompt contains {size.prompt} tokens and 0 draft tokens, too large for "
                           f"model with {limit} maximum context length", mistral=True,
                           type_="invalid_request_error")


def _ollama(size: Size, limit: int) -> Rejection:
    # Only reached for a forced overflow: Ollama never says so; its runner's nested form [OBS].
    inner = (f'{{"error":{{"code":400,"message":"request ({size.prompt} tokens) exceeds the '
             f'available context size ({limit} tokens), try increasing it",'
             f'"type":"exceed_context_size_error"}}}}')
    return Rejection(400, {"error": inner})


def _bedrock(size: Size, limit: int) -> Rejection:
    # Text [OBS] (a ValidationException); the body is Bedrock's bare `{"message"}` [MEM].
    return Rejection(400, {"message": "The model returned the following errors: prompt is too "
                                      f"long: {size.prompt} tokens > {limit} maximum"})


def _xai(size: Size, limit: int) -> Rejection:  # text [OBS] cline/cline#3120; envelope [MEM]
    return rejections.openai(f"This model's maximum prompt length is {limit} but the request "
                             f"contains {size.prompt} tokens.")


def _moonshot(size: Size, limit: int) -> Rejection:
    # Text [3P]; envelope as Moonshot's other errors (`rejections.kimi`, [OBS]).
    return rejections.kimi(f"Invalid request: Your request exceeded model token limit: {limit}")


def _lm_studio(size: Size, limit: int) -> Rejection:
    # Text [3P] up to where PROTOCOL.md §3 quotes it (its rest is not recorded); envelope [MEM].
    # The "first N tokens" LM Studio keeps is its own policy: the whole prompt stands in here.
    return rejections.openai(f"Trying to keep the first {size.prompt} tokens when context the "
                             "overflows. However, the model is loaded with context length of "
                             f"only {limit} tokens, which is not enough.")


_COMPLETION_BUILDERS = {"openai": _openai_completion, "anthropic": _anthropic_completion,
                        "vllm": _vllm_completion, "deepseek": _deepseek}
_BUILDERS = {"openai": _openai, "responses": _responses, "anthropic": _anthropic,
             "llama.cpp": _llama_cpp, "vllm": _vllm, "openrouter": _openrouter, "gemini": _gemini,
             "groq": _groq, "cerebras": _cerebras, "deepseek": _deepseek, "mistral": _mistral,
             "ollama": _ollama, "bedrock": _bedrock, "xai": _xai, "moonshot": _moonshot,
             "lm-studio": _lm_studio}
