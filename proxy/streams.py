"""What a response said, read from a stream of decoded events or from a whole JSON body.

`ChatStream` rebuilds the assistant message from chat deltas the way a client does: strings
are concatenated (content, refusal, reasoning text, tool-call arguments), objects merged, and
list elements merged by their `index` (tool calls, `reasoning_details`), so argument fragments
split mid-JSON and interleaved across calls come out whole. Identifiers (`id`, `type`, `name`,
`role`, `index`) are kept from their first delta, since some providers repeat them in every
chunk; `extra_content` (opaque signatures) is taken whole. It also tells the relay which chunk
is the usage-only one and spots mid-stream error frames. `ResponsesStream` collects the output
items of `response.output_item.done`, the terminal status and usage, and the last sequence number.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from enum import StrEnum
from operator import itemgetter
from typing import Any

from proxy.sse import SseEvent

# `dict` first: parsed JSON is dicts, and for a dict `isinstance` then answers in C, without
# the ABC's Python-level `__instancecheck__`; other mappings still pass.
_MAPPING = (dict, Mapping)

_KEEP_FIRST = frozenset({"id", "type", "name", "role", "index"})
_TAKE_WHOLE = frozenset({"extra_content"})
_TERMINAL = {"response.completed": "completed", "response.incomplete": "incomplete",
             "response.failed": "failed"}


class ChunkKind(StrEnum):
    DATA = "data"  # an ordinary chunk or event
    USAGE_ONLY = "usage_only"  # usage, no choices: hidden from a client that did not ask
    DONE = "done"  # chat `[DONE]`, or a Responses terminal event
    ERROR = "error"  # an error frame or event
    OTHER = "other"  # comments, keep-alives, anything that is not JSON


class _Text:
    """A string field's deltas, held as pieces and joined when the message is read: adding
    each piece to a str would copy all the text so far, quadratic in a long streamed argument."""

    __slots__ = ("pieces",)

    def __init__(self, first: str, second: str) -> None:
        self.pieces = [first, second]

    def text(self) -> str:
        joined = "".join(self.pieces)
        self.pieces = [joined]
        return joined


def merge_delta(acc: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """Fold one delta object into the accumulated one, in place; `joined` reads it."""
    for key, value in delta.items():
        old = acc.get(key)
        # The usual delta first, a piece of text for a field that already has some: only a
        # field that is neither kept-first nor taken whole ever holds a `_Text`.
        if old.__class__ is _Text and isinstance(value, str):
            old.pieces.append(value)
        elif value is None or old is not None and key in _KEEP_FIRST:
            continue
        elif old is None or key in _TAKE_WHOLE:
            acc[key] = _fresh(value)
        elif isinstance(old, dict) and isinstance(value, _MAPPING):
            merge_delta(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            _merge_list(old, value)
        elif isinstance(old, str) and isinstance(value, str):
            acc[key] = _Text(old, value)
        else:
            acc[key] = _fresh(value)


def joined(value: Any) -> Any:
    """A copy of what `merge_delta` accumulated, with its text pieces joined."""
    if isinstance(value, _Text):
        return value.text()
    if isinstance(value, dict):  # parsed JSON: a dict, never another mapping
        return {k: joined(v) for k, v in value.items()}
    if isinstance(value, list):
        return [joined(v) for v in value]
    return copy.deepcopy(value)


def _merge_list(acc: list[Any], delta: list[Any]) -> None:
    for element in delta:
        index = element.get("index") if isinstance(element, _MAPPING) else None
        target = _with_index(acc, index) if isinstance(index, int) else None
        if target is None:
            acc.append(_fresh(element))
        else:
            merge_delta(target, element)


def _with_index(acc: list[Any], index: int) -> dict[str, Any] | None:
    for element in acc:
        if isinstance(element, dict) and element.get("index") == index:
            return element
    return None


def _fresh(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, _MAPPING):
        out: dict[str, Any] = {}
        merge_delta(out, value)
        return out
    return copy.deepcopy(value) if isinstance(value, list) else value


def held_chars(value: Any) -> int:
    """The characters of text in what a stream accumulated, its text pieces joined on the way
    (each piece is an object beside its text: joined, the text alone stays held)."""
    total, stack = 0, [value]
    while stack:  # not recursive: parsed JSON may nest deeper than Python recurses
        value = stack.pop()
        if isinstance(value, _Text):
            total += len(value.text())
        elif isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            stack += value.values()
        elif isinstance(value, list):
            stack += value
    return total


class ChatStream:
    """Accumulates a chat completion stream, chunk by chunk."""

    forgotten = False  # the answer was dropped (`forget`): nothing more of it is rebuilt

    def __init__(self) -> None:
        self._choices: dict[int, dict[str, Any]] = {}
        self.finish_reasons: dict[int, str] = {}
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.done = False
        self.id: str | None = None
        self.model: str | None = None

    def feed(self, event: SseEvent) -> ChunkKind:
        chunk = event.json()
        # `[DONE]` is not JSON: only an event that did not parse can be the end.
        if chunk is None and event.done:
            self.done = True
            return ChunkKind.DONE
        return self.feed_json(chunk)

    def feed_json(self, chunk: Any) -> ChunkKind:
        if chunk.__class__ is dict and self.id and self.model and _next_text(self._choices, chunk):
            return ChunkKind.DATA
        if not isinstance(chunk, _MAPPING):
            return ChunkKind.OTHER
        if chunk.get("error"):
            self.error = _error_of(chunk["error"])
            return ChunkKind.ERROR
        if not self.id:
            self.id = _str(chunk.get("id"))
        if not self.model:
            self.model = _str(chunk.get("model"))
        usage = chunk.get("usage")
        choices = chunk.get("choices")
        # `is not None` first: most chunks say `"usage": null`, and for None the Mapping
        # check would run the ABC's Python-level `__instancecheck__`.
        if usage is not None and isinstance(usage, _MAPPING):
            self.usage = dict(usage)
            # `choices: []` as OpenAI sends it; some servers leave it out or null instead.
            if choices == [] or choices is None:
                return ChunkKind.USAGE_ONLY
        if isinstance(choices, list):
            for choice in choices:
                self._choice(choice)
        return ChunkKind.DATA

    def held_chars(self) -> int:
        return held_chars(self._choices)

    def forget(self) -> None:
        """Drop the answer rebuilt so far and rebuild no more of it; which choices came, their
        finish reasons, the usage and errors are still read."""
        self.forgotten = True
        self._choices = {index: {} for index in self._choices}

    def _choice(self, choice: Any) -> None:
        if not isinstance(choice, _MAPPING):
            return
        index = choice.get("index", 0)
        if not isinstance(index, int):
            index = 0
        acc = self._choices.setdefault(index, {})
        delta = choice.get("delta")
        # An empty delta adds nothing. (A forgotten answer's text fails the short way of
        # `_next_text`, its acc being empty: every chunk comes here.)
        if delta and isinstance(delta, _MAPPING) and not self.forgotten:
            merge_delta(acc, delta)
        finish = choice.get("finish_reason")
        if finish is not None and isinstance(finish, str):
            self.finish_reasons[index] = finish

    @property
    def finish_reason(self) -> str | None:
        return self.finish_reasons.get(0)

    @property
    def finished(self) -> bool:
        """Every choice that came has its `finish_reason`."""
        reasons = self.finish_reasons
        return bool(reasons) and reasons.keys() >= self._choices.keys()

    def messages(self) -> list[dict[str, Any]]:
        """Every choice's message, by index (more than one when the request asked `n` > 1)."""
        return [m for i in sorted(self._choices) if (m := self.message(i)) is not None]

    def message(self, index: int = 0) -> dict[str, Any] | None:
        """The assistant message as a client rebuilds it; None when nothing came for it."""
        acc = self._choices.get(index)
        if acc is None:
            return None
        message: dict[str, Any] = {"role": acc.get("role") or "assistant", "content": None}
        message.update({k: joined(v) for k, v in acc.items() if k != "role"})
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [_finished_call(c) for c in _by_index(calls)]
        return message


def _next_text(choices: dict[int, dict[str, Any]], chunk: dict[str, Any]) -> bool:
    """Take `chunk` when it is the usual one of a streamed answer: the next piece of the only
    choice's text, that text already under way, nothing else said (no error, usage, finish).
    It comes once per token, so it gets this short way; False sends it the general way, which
    folds it in the same and covers every other chunk. A lookup that fails raises rather than
    being checked first: that is the rare case."""
    try:
        (choice,) = chunk["choices"]
        delta = choice["delta"]
        text = delta["content"]
        index = choice.get("index", 0)
        pieces = choices[index]["content"]
    except (KeyError, TypeError, ValueError):
        return False
    if (text.__class__ is not str or pieces.__class__ is not _Text or index.__class__ is not int
            or len(delta) != 1 or choice.get("finish_reason") is not None
            or chunk.get("usage") is not None or chunk.get("error")):
        return False
    pieces.pieces.append(text)
    return True


def _by_index(elements: list[Any]) -> list[Any]:
    def position(pair: tuple[int, Any]) -> tuple[int, int]:
        n, element = pair
        index = element.get("index") if isinstance(element, _MAPPING) else None
        return (index if isinstance(index, int) else n, n)
    return [e for _, e in sorted(enumerate(elements), key=position)]


def _finished_call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    call = {k: v for k, v in call.items() if k != "index"}
    function = call.get("function")
    if isinstance(function, dict) and "name" in function:
        call["function"] = {"arguments": "", **function}
    return call


class ResponsesStream:
    """Accumulates a Responses API stream: output items, terminal status, usage, errors."""

    forgotten = False  # the output items were dropped (`forget`): no more are kept

    def __init__(self) -> None:
        self._items: dict[int, dict[str, Any]] = {}
        self.response: dict[str, Any] | None = None
        self.status: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.id: str | None = None
        self.sequence = -1  # the last event's `sequence_number`: an error frame takes the next

    def feed(self, event: SseEvent) -> ChunkKind:
        data = event.json()
        if not isinstance(data, _MAPPING):
            return ChunkKind.OTHER
        get = data.get
        sequence = get("sequence_number")
        if isinstance(sequence, int):
            self.sequence = sequence
        kind = get("type")
        if not isinstance(kind, str):
            kind = event.event
        if kind == "error":
            self.error = _error_of(get("error") or data)
            return ChunkKind.ERROR
        response = get("response")
        # Most events (the deltas) carry no response: `is not None` spares them the ABC check.
        if response is not None and isinstance(response, _MAPPING):
            self.id = self.id or _str(response.get("id"))
            if kind in _TERMINAL:
                return self._terminal(_TERMINAL[kind], response)
        if (kind == "response.output_item.done" and isinstance(get("item"), _MAPPING)
                and not self.forgotten):
            index = get("output_index")
            self._items[index if isinstance(index, int) else len(self._items)] = dict(data["item"])
        return ChunkKind.DATA

    def _terminal(self, status: str, response: Mapping[str, Any]) -> ChunkKind:
        self.response = dict(response)
        self.status = _str(response.get("status")) or status
        if isinstance(response.get("usage"), _MAPPING):
            self.usage = dict(response["usage"])
        if status == "failed" and isinstance(response.get("error"), _MAPPING):
            self.error = dict(response["error"])
            return ChunkKind.ERROR
        return ChunkKind.DONE

    def held_chars(self) -> int:
        return held_chars(self._items)

    def forget(self) -> None:
        """Drop the output items kept so far, and keep no more."""
        self.forgotten = True
        self._items = {}

    def output(self) -> list[dict[str, Any]]:
        """The output items, in order; from the final response when no item event came."""
        if self._items:
            return [self._items[i] for i in sorted(self._items)]
        return responses_output(self.response)


# ---------------------------------------------------------------- whole JSON bodies

def chat_message(body: Any, index: int = 0) -> dict[str, Any] | None:
    """The assistant message of choice `index` in a non-streaming chat completion."""
    choices = body.get("choices") if isinstance(body, _MAPPING) else None
    for n, choice in enumerate(choices if isinstance(choices, list) else ()):
        if isinstance(choice, _MAPPING) and choice.get("index", n) == index:
            message = choice.get("message")
            return dict(message) if isinstance(message, _MAPPING) else None
    return None


def one_choice(body: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """`chat_message(body)` and `usage_of(body)` of the usual answer (one choice, its message
    and the usage objects): a short way for what the proxy records of every answer; None for
    any other shape, which those read. Not copies: the body is parsed for this alone."""
    if type(body) is not dict:
        return None
    choices, usage = body.get("choices"), body.get("usage")
    if type(choices) is not list or len(choices) != 1 or type(usage) is not dict:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("index", 0) != 0:
        return None
    message = choice.get("message")
    return (message, usage) if type(message) is dict else None


def chat_messages(body: Any) -> list[dict[str, Any]]:
    """Every choice's message in a non-streaming chat completion, by index."""
    choices = body.get("choices") if isinstance(body, _MAPPING) else None
    found = []
    for n, choice in enumerate(choices if isinstance(choices, list) else ()):
        message = choice.get("message") if isinstance(choice, _MAPPING) else None
        index = choice.get("index", n) if isinstance(message, _MAPPING) else None
        if isinstance(index, int):
            found.append((index, dict(message)))
    return [message for _, message in sorted(found, key=itemgetter(0))]


def responses_output(body: Any) -> list[dict[str, Any]]:
    output = body.get("output") if isinstance(body, _MAPPING) else None
    return [dict(i) for i in output if isinstance(i, _MAPPING)] if isinstance(output, list) else []


def usage_of(body: Any) -> dict[str, Any] | None:
    usage = body.get("usage") if isinstance(body, _MAPPING) else None
    return dict(usage) if isinstance(usage, _MAPPING) else None


def _error_of(error: Any) -> dict[str, Any]:
    return dict(error) if isinstance(error, _MAPPING) else {"message": str(error)}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
