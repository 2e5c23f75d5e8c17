"""What the fake model answers: a `Reply`, scripted by a test or computed by a responder.

A reply is data, rendered by the chat or the Responses renderer in the requested dialect and
stream mode. Besides text and tool calls it can fail the way real upstreams fail: an error
status, a context overflow, a connection that dies mid-stream, an error frame inside a stream,
or no answer at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

DIE_TEXT = "This answer is long enough to be cut off in the middle by the fake upstream."
# OpenAI's generic 500 body [OBS github/gh-models#98: text, type, null param and code]; as the
# frame of a stream that fails midway it is [3P]: other fakes' fixtures send it so.
SERVER_ERROR = {"error": {"message": "The server had an error while processing your request. "
                                     "Sorry about that!", "type": "server_error", "param": None,
                          "code": None}}


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # a JSON string (function) or free-form input (custom tool)
    id: str | None = None  # chosen by the fake when None
    custom: bool = False


def call(name: str, arguments: str | Mapping[str, Any] = "{}", *, id: str | None = None,
         custom: bool = False) -> Call:
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return Call(name, text, id, custom)


@dataclass(frozen=True)
class Reply:
    content: str | None = None
    calls: tuple[Call, ...] = ()
    reasoning: str | None = None
    finish_reason: str | None = None
    status: int = 200
    body: Any = None  # the exact error body when status >= 400
    forced_overflow: bool = False
    die_after: int | None = None  # stream: chunks sent before the connection is aborted
    error_after: int | None = None  # stream: chunks sent before an error frame
    error_frame: Any = None
    hang_after: int | None = None  # stream: chunks sent before going silent; non-stream: silent
    # Written whole past the request's output cap, as an upstream that ignores `max_tokens` does.
    ignores_cap: bool = False

    # ------------------------------------------------------------ constructors

    @classmethod
    def text(cls, content: str, *, reasoning: str | None = None) -> Reply:
        return cls(content=content, reasoning=reasoning)

    @classmethod
    def tool_calls(cls, *calls: Call, content: str | None = None,
                   reasoning: str | None = None) -> Reply:
        if not calls:
            raise ValueError("a tool-call reply needs at least one call")
        return cls(content=content, calls=calls, reasoning=reasoning)

    @classmethod
    def repeating(cls, message: Mapping[str, Any]) -> Reply:
        """The reply that gives back a recorded chat assistant `message` (its text and calls),
        for replaying a recorded conversation turn by turn."""
        calls = [call(c["custom"]["name"], c["custom"]["input"], id=c["id"], custom=True)
                 if c.get("type") == "custom" else
                 call(c["function"]["name"], c["function"]["arguments"], id=c["id"])
                 for c in message.get("tool_calls") or ()]
        if calls:
            return cls.tool_calls(*calls, content=message.get("content"))
        return cls.text(message.get("content") or "")

    @classmethod
    def length(cls, content: str) -> Reply:
        """An answer cut short by `max_tokens` (`finish_reason: length`)."""
        return cls(content=content, finish_reason="length")

    @classmethod
    def error(cls, status: int, body: Any) -> Reply:
        return cls(status=status, body=body)

    @classmethod
    def overflow(cls) -> Reply:
        """The context-overflow error of the fake's overflow style, whatever the prompt size."""
        return cls(forced_overflow=True)

    @classmethod
    def die(cls, after: int = 2, content: str = DIE_TEXT) -> Reply:
        return cls(content=content, die_after=after)

    @classmethod
    def stream_error(cls, after: int = 1, error: Any = None, content: str = DIE_TEXT) -> Reply:
        return cls(content=content, error_after=after, error_frame=error or SERVER_ERROR)

    @classmethod
    def hang(cls, after: int | None = None, content: str = DIE_TEXT) -> Reply:
        return cls(content=content, hang_after=after if after is not None else 0)

    def with_reasoning(self, text: str) -> Reply:
        return dataclasses.replace(self, reasoning=text)

    # ------------------------------------------------------------ reading

    @property
    def is_error(self) -> bool:
        return self.status >= 400

    def finish(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.calls else "stop"
