"""A fake summarizer for the fake upstream: recognises the proxy's summarizer requests and answers.

It is faithful in one checkable way: every line of the material that contains `FACT:` comes
back in the summary (from the transcript and from a summary-so-far alike), so tests can plant
facts early in a session and check they survive any number of re-compactions. It can also be
told to fail, to cut its answer short, or to stall, like a real summarizer on a bad day, or to
answer a 200 that holds no usable summary (`SHAPES`), in the dialect it was asked in.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.testing.fake_upstream import FakeUpstream, Recorded
from proxy.testing.replies import Reply
from proxy.testing.usage import Counts, responses_usage

SIGNATURE = "You write the working memory of a long-running assistant conversation."
_FACT = re.compile(r"FACT:[^\n\"\\]*")
# A model's refusal: tests check none of it reaches the client, the log or a checkpoint.
REFUSAL_TEXT = "I'm sorry, but I can't help with summarizing this conversation."


def is_summarizer_request(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    if isinstance(body.get("instructions"), str):
        return body["instructions"].startswith(SIGNATURE)
    messages = body.get("messages")
    return (isinstance(messages, list) and bool(messages) and isinstance(messages[0], dict)
            and isinstance(messages[0].get("content"), str)
            and messages[0]["content"].startswith(SIGNATURE))


def material(body: dict[str, Any]) -> str:
    if isinstance(body.get("messages"), list):
        return "\n".join(str(m.get("content", "")) for m in body["messages"][1:])
    texts = []
    for item in body.get("input") or []:
        for part in item.get("content") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return "\n".join(texts)


@dataclass
class FakeSummarizer:
    """Install with `FakeSummarizer.install(fake)`; counts and records what it was asked."""

    fail: int = 0  # answer the next N requests with HTTP 500
    cut_short: int = 0  # answer the next N with finish_reason "length"
    hang: int = 0  # never answer the next N
    padding: int = 0  # extra words in each summary (to make one too big), past any output cap
    # Answer the next ones so, one each (`SHAPES`); None: this one as usual.
    shapes: list[str | None] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def install(cls, fake: FakeUpstream, **options: Any) -> FakeSummarizer:
        summarizer = cls(**options)
        previous = fake.responder

        def respond(recorded: Recorded) -> Reply | None:
            if is_summarizer_request(recorded.json):
                return summarizer.answer(recorded.json)
            return previous(recorded) if previous is not None else None

        fake.responder = respond
        return summarizer

    @property
    def calls(self) -> int:
        return len(self.requests)

    def answer(self, body: dict[str, Any]) -> Reply:
        self.requests.append(body)
        if self.hang:
            self.hang -= 1
            return Reply.hang()
        if self.fail:
            self.fail -= 1
            return Reply.error(500, {"error": {"message": "summarizer overloaded",
                                               "type": "server_error", "param": None,
                                               "code": None}})
        facts = sorted(set(m.strip() for m in _FACT.findall(material(body))))
        text = "## Facts to keep\n" + ("\n".join(f"- {f}" for f in facts) or "- none")
        text += "\n## Status\n- Work continues." + " padding" * self.padding
        shape = self.shapes.pop(0) if self.shapes else None
        if shape is not None:
            return shaped(shape, body, text)
        if self.cut_short:
            self.cut_short -= 1
            return Reply.length(text)
        # Padded past the request's cap, it is a summarizer that ignores the cap (or it would
        # be cut short, which `cut_short` asks for).
        return dataclasses.replace(Reply.text(text), ignores_cap=self.padding > 0)


@dataclass(frozen=True)
class _AsItIs(Reply):
    """A 200 whose body goes out exactly as given. The fake's endpoints send an error reply's
    body unrendered, with its status; their renderers make no refusal, no filtered answer."""

    @property
    def is_error(self) -> bool:
        return True


def shaped(shape: str, body: dict[str, Any], text: str) -> Reply:
    """The 200 answer of `shape` to the summarizer request `body`, in its dialect; `text` is
    the summary it would have written (a filtered or unfinished answer holds half or all of
    it: none of it may be kept)."""
    responses = isinstance(body.get("instructions"), str)
    made = (_RESPONSES if responses else _CHAT).get(shape)
    if made is None:
        raise ValueError(f"no {shape!r} answer over {'Responses' if responses else 'chat'}")
    return _AsItIs(status=200, body=made(body, text))


def _completion(body: dict[str, Any], message: dict[str, Any], finish: str | None,
                **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": None, "refusal": None,
                                      "annotations": [], **message},
              "logprobs": None, "finish_reason": finish, **extra}
    return {"id": "chatcmpl-fakeshape", "object": "chat.completion", "created": 1767225600,
            "model": body.get("model"), "choices": [choice],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 40, "total_tokens": 1040}}


def _response(body: dict[str, Any], output: list[dict[str, Any]], status: str = "completed",
              incomplete: str | None = None, error: Any = None) -> dict[str, Any]:
    return {"id": "resp_fakeshape", "object": "response", "created_at": 1767225600,
            "status": status, "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "model": body.get("model"), "output": output,
            "usage": responses_usage(Counts(prompt=1000, completion=40))}


def _message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": "msg_fakeshape", "type": "message", "status": "completed",
            "role": "assistant", "content": list(parts)}


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "text": text}


def _half(text: str) -> str:
    return text[: len(text) // 2]


_CALL = {"name": "read_file", "arguments": '{"path": "README.md"}'}
# Azure OpenAI annotates a filtered choice with what it flagged.
_AZURE_FILTERED = {"content_filter_results": {
    "hate": {"filtered": False, "severity": "safe"},
    "violence": {"filtered": True, "severity": "medium"}}}

_Made = Callable[[dict[str, Any], str], dict[str, Any]]
_CHAT: dict[str, _Made] = {
    # Structured outputs' refusal: content null, the model's words in `refusal`.
    "refusal": lambda b, t: _completion(b, {"refusal": REFUSAL_TEXT}, "stop"),
    # OpenAI, and Azure with its annotations: the content omitted or, rarely, partial.
    "content_filter": lambda b, t: _completion(b, {"content": _half(t)}, "content_filter",
                                               **_AZURE_FILTERED),
    "tool_call": lambda b, t: _completion(b, {"content": "Let me read the file first.",
                                              "tool_calls": [{"id": "call_fakeshape",
                                                              "type": "function",
                                                              "function": _CALL}]},
                                          "tool_calls"),
    # DeepSeek-style: all in `reasoning_content`, no answer.
    "reasoning_only": lambda b, t: _completion(b, {"content": "",
                                                   "reasoning_content": "Summarizing..."},
                                               "stop"),
    "no_output": lambda b, t: {**_completion(b, {}, "stop"), "choices": []},
}
_RESPONSES: dict[str, _Made] = {
    "refusal": lambda b, t: _response(b, [_message({"type": "refusal",
                                                    "refusal": REFUSAL_TEXT})]),
    "content_filter": lambda b, t: _response(b, [_message(_output_text(_half(t)))],
                                             "incomplete", "content_filter"),
    "tool_call": lambda b, t: _response(b, [{"id": "fc_fakeshape", "type": "function_call",
                                             "status": "completed",
                                             "call_id": "call_fakeshape", **_CALL}]),
    "reasoning_only": lambda b, t: _response(b, [{"id": "rs_fakeshape", "type": "reasoning",
                                                  "summary": []}]),
    "no_output": lambda b, t: _response(b, []),
    # Not finished, yet holding the whole text: only the status says it is not the answer.
    "unfinished": lambda b, t: _response(b, [_message(_output_text(t))], "in_progress"),
    # A failed response's error, here its content policy's (`Response.error.code`).
    "failed_invalid_prompt": lambda b, t: _response(
        b, [], "failed", error={"code": "invalid_prompt",
                                "message": "Invalid prompt: flagged as potentially violating "
                                           "our usage policy."}),
}
SHAPES = tuple(dict.fromkeys([*_CHAT, *_RESPONSES]))
