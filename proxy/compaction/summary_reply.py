"""Reading the summarizer's answer (SPEC §5): from an HTTP 200's JSON, the summary text, how the
answer ended, and whether the upstream refused the content inside it. Never raises.

A 200 is not always a summary. The upstream may refuse the conversation's content in it: the
model's `refusal` (a chat message's field, or a `refusal` content part of a chat or Responses
message), its content filter stopping the answer (chat `finish_reason: content_filter`, whose
content is null or, rarely, partial; Responses `status: incomplete` for `content_filter`), or a
failed response whose error is the content policy's. Or the answer may hold no summary: cut at
its output budget, a tool call, reasoning only, no choice or no output at all, a response not
finished. `postcheck.check_reply` turns each into a failure that says which.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from proxy.conversation import Api

# The codes a content policy refuses a request's content with, as an HTTP 400's `error.code`
# or in a 200's error object: OpenAI's `invalid_prompt` ("your prompt was flagged as
# potentially violating our usage policy"), Azure OpenAI's `content_filter` (the prompt
# "triggering ... content management policy"). Only these: any other 400 may be the proxy's
# own request at fault, the summarizer's failure.
CONTENT_REFUSED = frozenset({"invalid_prompt", "content_filter"})
# The code a model's own refusal (its answer's `refusal`) is passed on with.
MODEL_REFUSAL = "refusal"
_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)
# An upstream's status or reason worth quoting in a reason the client is shown: a short word.
_WORD = re.compile(r"[A-Za-z0-9_.:-]{1,40}")
_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details")


@dataclass(frozen=True)
class SummaryReply:
    text: str
    finish_reason: str | None  # "stop", "length", ... ; "error" when the body was unusable
    output_tokens: int | None = None
    # The code of a content refusal in the answer (`MODEL_REFUSAL`, or a `CONTENT_REFUSED`
    # one); None when it refused nothing.
    refused: str | None = None
    # Where the answer says so, in the upstream's field names (never its text): for a refusal,
    # an unfinished answer, an unreadable one.
    said: str = ""
    finished: bool = True  # False when the upstream says the answer did not end of itself
    held: str = ""  # what it held that is no summary: "a tool call", "only reasoning", ...


def read_reply(api: Api, body: bytes | Mapping[str, Any]) -> SummaryReply:
    """The summary text, why it ended and any refusal in it, from the summarizer's JSON
    answer. A refusal keeps none of the text beside it."""
    doc = _parse(body)
    if doc is None:
        return SummaryReply("", "error", said="not a JSON object")
    error = doc.get("error")
    if error:
        code = error.get("code") if isinstance(error, dict) else None
        if isinstance(code, str) and code in CONTENT_REFUSED:
            # Responses' failed status carries it (`Response.error.code` lists
            # `invalid_prompt`); a gateway may put a chat error in a 200 too. Whether a
            # non-background `POST /responses` answers so, rather than with a 400, is unsure.
            return SummaryReply("", "error", refused=code,
                                said=_joined(_status(doc), f"error.code: {code}"))
        return SummaryReply("", "error", said=_joined(_status(doc), "an error object"))
    reply = _read_responses(doc) if api is Api.RESPONSES else _read_chat(doc)
    return replace(reply, text=_THINK.sub("", reply.text).strip())


def _parse(body: bytes | Mapping[str, Any]) -> Mapping[str, Any] | None:
    if isinstance(body, Mapping):
        return body
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _read_chat(doc: Mapping[str, Any]) -> SummaryReply:
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return SummaryReply("", None, held="no choices")
    choice = choices[0]
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    finish = choice.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    tokens = _usage_count(doc, "completion_tokens")
    content = message.get("content")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return SummaryReply("", finish, tokens, MODEL_REFUSAL, "message.refusal")
    if _has_refusal_part(content):
        return SummaryReply("", finish, tokens, MODEL_REFUSAL, "a refusal content part")
    if finish == "content_filter":
        # Azure also annotates the choice (`content_filter_results`); what it lists stays here.
        return SummaryReply("", finish, tokens, "content_filter",
                            "finish_reason: content_filter")
    text = _text(content)
    if message.get("tool_calls") or message.get("function_call"):
        held = "a tool call"
    elif not text.strip() and any(message.get(key) for key in _REASONING_FIELDS):
        held = "only reasoning"
    else:
        held = ""
    return SummaryReply(text, finish, tokens, said=_field("finish_reason", finish),
                        finished=finish != "length", held=held)


def _read_responses(doc: Mapping[str, Any]) -> SummaryReply:
    output = doc.get("output")
    items = [i for i in (output if isinstance(output, list) else []) if isinstance(i, dict)]
    status = doc.get("status") or "completed"
    details = doc.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    said = _joined(_status(doc), _field("incomplete_details.reason", reason))
    tokens = _usage_count(doc, "output_tokens")
    messages = [i for i in items if i.get("type") == "message"]
    if any(_has_refusal_part(m.get("content")) for m in messages):
        return SummaryReply("", _responses_finish(status, reason), tokens, MODEL_REFUSAL,
                            "a refusal content part")
    if status == "incomplete" and reason == "content_filter":
        return SummaryReply("", "content_filter", tokens, "content_filter", said)
    texts = [_text(m.get("content")) for m in messages]
    text = "\n".join(t for t in texts if t)
    kinds = {str(i.get("type")) for i in items}
    if any(kind.endswith("_call") for kind in kinds):  # function_call, custom_tool_call, ...
        held = "a tool call"
    elif not text.strip():
        held = "only reasoning" if "reasoning" in kinds else "no output items" if not items else ""
    else:
        held = ""
    return SummaryReply(text, _responses_finish(status, reason), tokens, said=said,
                        finished=status == "completed", held=held)


def _responses_finish(status: Any, reason: Any) -> str:
    if status == "completed":
        return "stop"
    if status == "incomplete" and reason == "max_output_tokens":
        return "length"
    return str(reason or status)


def _status(doc: Mapping[str, Any]) -> str:
    return _field("status", doc.get("status"))


def _field(name: str, value: Any) -> str:
    return f"{name}: {value}" if isinstance(value, str) and _WORD.fullmatch(value) else ""


def _joined(*parts: str) -> str:
    return ", ".join(p for p in parts if p)


def _has_refusal_part(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "refusal" for p in content)


def _usage_count(doc: Mapping[str, Any], key: str) -> int | None:
    """A count the summarizer's upstream reported; None for anything but a whole number (the
    caller adds them up, and an upstream's odd answer must not break the compaction)."""
    usage = doc.get("usage")
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(p["text"] for p in content
                   if isinstance(p, dict) and p.get("type") in ("text", "output_text")
                   and isinstance(p.get("text"), str))
