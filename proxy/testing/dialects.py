"""Provider dialects of the chat endpoint: what each one adds to OpenAI's message rules.

A dialect is a wording for the shared violations (`chat_wording.WORDING`) plus two lists of extra
rules: schema checks that run before the pairing rules (a strict upstream rejects an unknown key
before it looks at the conversation) and semantic checks that run after them (PROTOCOL.md §8.2).
A dialect without API-level pairing checks (vLLM, PROTOCOL.md §2.1) skips the shared rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy import jsonio
from proxy.testing import rejections
from proxy.testing.chat_rules import USER_PART_TYPES, Violation
from proxy.testing.chat_wording import openai_text
from proxy.testing.rejections import Rejection
from proxy.testing.signing import GEMINI_BYPASS, Signer

Messages = Sequence[Mapping[str, Any]]
Rule = Callable[[Messages, Signer], Rejection | None]

# Message keys in OpenAI's request schema (PROTOCOL.md §1.1), for strict upstreams.
_ALLOWED_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "refusal", "audio", "tool_calls", "function_call"},
    "tool": {"role", "content", "tool_call_id"},
    "function": {"role", "name", "content"},
}
_CALL_KEYS = {"id", "type", "function", "custom"}


def _latest_user(messages: Messages) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def _native_index(messages: Messages, index: int) -> int:
    """The position of a message once system messages are hoisted and tool runs merged (0-based)."""
    turn, previous = -1, None
    for message in messages[: index + 1]:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        if not (role == "tool" and previous == "tool"):
            turn += 1
        previous = role
    return turn


def _tool_calls(message: Mapping[str, Any]) -> list[Any]:
    calls = message.get("tool_calls")
    return calls if message.get("role") == "assistant" and isinstance(calls, list) else []


# ---------------------------------------------------------------- schema rules (before pairing)

def strict_keys(messages: Messages, _: Signer) -> Rejection | None:
    """OpenAI's older strict validator: `Additional properties are not allowed` [OBS]."""
    for i, message in enumerate(messages):
        role = message.get("role")
        allowed = _ALLOWED_KEYS.get(role, set(message)) if isinstance(role, str) else set(message)
        found = _additional(message, allowed, f"messages.{i}")
        for j, call in enumerate(_tool_calls(message)):
            found = found or (_additional(call, _CALL_KEYS, f"messages.{i}.tool_calls.{j}")
                              if isinstance(call, Mapping) else None)
        if found is not None:
            return found
    return None


def _additional(obj: Mapping[str, Any], allowed: set[str], path: str) -> Rejection | None:
    extra = sorted(k for k in obj if k not in allowed)
    if not extra:
        return None
    names = ", ".join(repr(k) for k in extra)
    verb = "was" if len(extra) == 1 else "were"
    return rejections.openai(f"Additional properties are not allowed ({names} {verb} unexpected) - '{path}'")


def assistant_parts(messages: Messages, _: Signer) -> Rejection | None:
    """OpenAI checks an assistant's content parts against the user's list [OBS: replayed
    Anthropic `thinking` and Gemini `functionCall` parts refused with it]. Only the strict
    dialect applies it: the proxy forwards an uncompacted request's `thinking` parts as the
    client sent them (SPEC §7.3) and retries once without them on this answer (§7.4), while
    the lenient `openai` dialect's property tests assume such parts pass. Other dialects'
    answers to such parts are not recorded."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind not in USER_PART_TYPES:
                return openai_text(Violation("part_type", i, call=j, value=(kind, USER_PART_TYPES)))
    return None


def cerebras_reasoning(messages: Messages, _: Signer) -> Rejection | None:
    """Cerebras rejects replayed reasoning fields [OBS text; flat envelope MEM].

    PROTOCOL.md §4.1 records the rejection for `reasoning_content` only; rejecting
    `reasoning_details` in the same form is this fake's extension [UNVERIFIED]."""
    for i, message in enumerate(messages):
        for key in ("reasoning_content", "reasoning_details"):
            if key in message:
                path = f"messages.{i}.{message.get('role')}.{key}"
                return rejections.flat(f"{path}: property '{path}' is unsupported",
                                       type_="invalid_request_error", param="validation_error",
                                       code="wrong_api_format")
    return None


def legacy_reasoning(messages: Messages, _: Signer) -> Rejection | None:
    """DeepSeek R1's first API: "if the reasoning_content field is included in the sequence of
    input messages, the API will return a 400 error" (PROTOCOL.md §4.4, archived doc). The
    doc gives no text; this is the one DeepSeek was observed to send (quoted whole in public
    reports, e.g. the Berkeley function-calling leaderboard's DeepSeek handler), in DeepSeek's
    envelope. It names no message."""
    if any("reasoning_content" in message for message in messages):
        return rejections.deepseek(
            "The reasoning_content is an intermediate result for display purposes only and "
            "will not be included in the context for inference. Please remove the "
            "reasoning_content from your message to reduce network traffic.")
    return None


def json_arguments(messages: Messages, _: Signer) -> Rejection | None:
    """vLLM and SGLang parse `function.arguments` and refuse what is not JSON (issue reports
    such as vllm-project/vllm#48922; PROTOCOL.md does not record the rejection).

    PROTOCOL.md gives no provider text for this rejection: the message is THE FAKE'S OWN
    WORDING (it says so in the text); only the envelope is vLLM's (§1.4, [3P]). JSON that
    orjson refuses but the RFC allows (a lone surrogate escape) is accepted, as Python's
    parser does."""
    for i, message in enumerate(messages):
        for j, call in enumerate(_tool_calls(message)):
            function = call.get("function") if isinstance(call, Mapping) else None
            arguments = function.get("arguments") if isinstance(function, Mapping) else None
            if isinstance(arguments, str) and not _is_json(arguments):
                path = f"messages[{i}].tool_calls[{j}].function.arguments"
                return rejections.vllm(f"Fake upstream's own wording (no provider text is "
                                       f"documented): '{path}' is not valid JSON.")
    return None


def _is_json(text: str) -> bool:
    try:
        jsonio.loads(text)
    except jsonio.NestedTooDeep:
        return True  # maybe valid; too deep to tell, so not refused
    except jsonio.JSONDecodeError:
        return False
    return True


# ---------------------------------------------------------------- semantic rules (after pairing)

def deepseek_reasoning(messages: Messages, _: Signer) -> Rejection | None:
    """Thinking mode: every tool-call message must carry `reasoning_content`, past turns' too:
    the guide wants a tool-using turn's reasoning back "in all subsequent" requests [DOC]."""
    for message in messages:
        if _tool_calls(message) and not isinstance(message.get("reasoning_content"), str):
            return rejections.deepseek("The `reasoning_content` in the thinking mode must be passed "
                                       "back to the API.")
    return None


def kimi_reasoning(messages: Messages, _: Signer) -> Rejection | None:
    """Moonshot's Kimi thinking mode: an assistant message with tool calls must carry
    `reasoning_content` (PROTOCOL.md §4.1, text [OBS]). The index is the message's position in
    the request's `messages` (0-based, system included: a second request of system, user,
    assistant-with-calls is refused "at index 2" [OBS mastra-ai/mastra#12592,
    cloudwego/eino-ext#700]). Reports show the text in long sessions (index 32, 108) without
    saying whether past turns' calls are checked; this fake checks every one, as DeepSeek's
    guide asks. Whether an empty string satisfies Kimi is not recorded; the fake accepts one,
    as DeepSeek's validator does [OBS]. Envelope as Kimi's own endpoint answered it
    [OBS VicBilibily/GCMP#162]."""
    for i, message in enumerate(messages):
        if _tool_calls(message) and not isinstance(message.get("reasoning_content"), str):
            return rejections.kimi("thinking is enabled but reasoning_content is missing in "
                                   f"assistant tool call message at index {i}")
    return None


def gemini_signatures(messages: Messages, signer: Signer) -> Rejection | None:
    """Signatures must be ours; the first call of each current-turn step must carry one."""
    latest_user = _latest_user(messages)
    for i, message in enumerate(messages):
        for j, call in enumerate(_tool_calls(message)):
            signature = _thought_signature(call)
            if signature is None:
                if j == 0 and i > latest_user:
                    return _missing_signature(call, _native_index(messages, i) + 1)
                continue
            if signature not in GEMINI_BYPASS and not signer.thought_signature_valid(signature):
                return rejections.gemini("Corrupted thought signature.")  # [OBS]
    return None


def _thought_signature(call: Any) -> str | None:
    extra = call.get("extra_content") if isinstance(call, Mapping) else None
    google = extra.get("google") if isinstance(extra, Mapping) else None
    signature = google.get("thought_signature") if isinstance(google, Mapping) else None
    return signature if isinstance(signature, str) and signature else None


def _missing_signature(call: Any, position: int) -> Rejection:
    function = call.get("function") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else ""
    return rejections.gemini(  # [OBS]
        "Function call is missing a thought_signature in functionCall parts. This is required for "
        "tools to work correctly, and missing thought_signature may lead to degraded model "
        f"performance. Additional data, function call `default_api:{name}`, position {position}. "
        "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")


def mistral_order(messages: Messages, _: Signer) -> Rejection | None:
    """After a tool message only an assistant or another tool message may come [SRC
    mistralai/mistral-common@039465db `protocol/instruct/validator.py`
    `_validate_message_order`, which words the refusal]; the envelope [OBS] for a user message
    (datapizza-ai#98, onyx#6458) and assumed the same for the other roles."""
    for i in range(1, len(messages)):
        role = messages[i].get("role")
        if messages[i - 1].get("role") == "tool" and role not in ("assistant", "tool"):
            return rejections.flat(f"Unexpected role '{role}' after role 'tool'", mistral=True,
                                   type_="invalid_request_message_order", code="3230")
    return None


def openrouter_details(messages: Messages, signer: Signer) -> Rejection | None:
    """Claude with thinking enabled, through OpenRouter (PROTOCOL.md §4.3, §4.5, §8.2(e)).

    `reasoning_details` sent back must be exactly what was issued (signed per detail), and the
    last assistant message with tool calls after the latest user message (the current tool
    loop) must carry them: Anthropic wants the final assistant turn to start with its thinking
    block. Both rejections are Anthropic's texts [OBS], relayed in `metadata.raw` [OBS]."""
    for i, message in enumerate(messages):
        details = message.get("reasoning_details")
        if "reasoning_details" not in message or details is None:
            continue
        for j, detail in enumerate(details if isinstance(details, list) else [details]):
            if not signer.detail_valid(detail):
                where = f"messages.{_native_index(messages, i)}.content.{j}"
                raw = rejections.anthropic_body(f"{where}: Invalid `signature` in `thinking` block")
                return rejections.openrouter_wrapped(raw)
    return _loop_without_thinking(messages)


def _loop_without_thinking(messages: Messages) -> Rejection | None:
    latest_user = _latest_user(messages)
    loop = [i for i in range(latest_user + 1, len(messages)) if _tool_calls(messages[i])]
    if not loop or messages[loop[-1]].get("reasoning_details"):
        return None
    i = loop[-1]
    # PROTOCOL.md gives the text for a `tool_use` first block; when the message has text
    # before its calls, the fake names `text` instead (its own substitution, unverified).
    found = "text" if _has_text(messages[i].get("content")) else "tool_use"
    raw = rejections.anthropic_body(
        f"messages.{_native_index(messages, i)}.content.0.type: Expected `thinking` or "
        f"`redacted_thinking`, but found `{found}`. When `thinking` is enabled, a final "
        "`assistant` message must start with a thinking block (preceeding the lastmost set of "
        "`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
        "previous turns. To avoid this requirement, disable `thinking`. Please consult our "
        "documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking")
    return rejections.openrouter_wrapped(raw)


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content)
    return isinstance(content, list) and any(
        isinstance(p, Mapping) and p.get("type") == "text" and p.get("text") for p in content)


@dataclass(frozen=True)
class Dialect:
    wording: str = "openai"
    schema: tuple[Rule, ...] = ()
    semantic: tuple[Rule, ...] = ()
    pairing: bool = True  # the shared `chat_rules.find_violation` checks
    # `stream_options` only beside `stream: true` (OpenAI, Azure); others' answers unknown.
    options_need_stream: bool = False
    # `n` and the output caps refused out of range as OpenAI words it; others' answers unknown.
    integer_options: bool = False


DIALECTS: dict[str, Dialect] = {
    "openai": Dialect(options_need_stream=True, integer_options=True),
    "openai-strict": Dialect(schema=(strict_keys, assistant_parts), options_need_stream=True,
                             integer_options=True),
    "cerebras": Dialect(schema=(cerebras_reasoning,)),
    "deepseek-thinking": Dialect(wording="deepseek", semantic=(deepseek_reasoning,)),
    "deepseek-r1-legacy": Dialect(wording="deepseek", schema=(legacy_reasoning,)),
    "gemini": Dialect(wording="gemini", semantic=(gemini_signatures,)),
    "kimi-thinking": Dialect(semantic=(kimi_reasoning,)),
    "mistral": Dialect(wording="mistral", semantic=(mistral_order,)),
    "openrouter": Dialect(semantic=(openrouter_details,)),
    # No API-level adjacency validation (PROTOCOL.md §2.1); tool-call ids `chatcmpl-tool-<hex>`.
    "vllm": Dialect(wording="vllm", schema=(json_arguments,), pairing=False),
}
