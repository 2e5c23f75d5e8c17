"""Hostile and odd input for the HTTP edge, as hypothesis strategies, and the oracle it is held to.

Bodies are drawn as bytes: a document drawn as data, then written in one of the styles clients
use (compact, spaced, sorted keys, every non-ASCII character escaped) or damaged the ways a
parser must survive (a BOM, trailing garbage, duplicate keys, NaN, huge numbers, lone
surrogates, deep nesting, bytes that are not UTF-8). `thread_turns` draws a thread's requests
where each turn shares, edits, truncates, reorders or re-serializes the one before, which is
what the delta parse (`proxy/reparse.py`) meets. `upstream_answers` draws what an upstream may
send back. `tests/edge_checks.py` holds what the answers are held to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

PATHS = {"chat": ("chat/completions", "messages"), "responses": ("responses", "input")}

_text = st.one_of(st.text(max_size=12), st.sampled_from(
    ["", "/compact", "\x00", "\ud800", "é", "🙂", '"', "\\", "\u2028", "messages", "input"]))
_number = st.one_of(st.integers(-3, 3), st.sampled_from([10 ** 30, -(2 ** 64), 1.5, 1e300]))
_scalar = st.one_of(st.none(), st.booleans(), _number, _text)
_json = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)), max_leaves=8)
_role = st.one_of(st.sampled_from(["system", "developer", "user", "assistant", "tool",
                                   "function", "critic"]), _json)
_call = st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.text(max_size=6), _json), "type": st.sampled_from(["function", "custom", 3]),
    "function": st.one_of(_json, st.fixed_dictionaries(
        {"name": _json}, optional={"arguments": st.one_of(st.text(max_size=20), _json)}))})
_chat_message = st.fixed_dictionaries({"role": _role}, optional={
    "content": st.one_of(_text, _json, st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "thinking", 1])},
        optional={"text": _json, "image_url": _json}), max_size=2)),
    "tool_calls": st.one_of(_json, st.lists(_call, max_size=2)),
    "tool_call_id": st.one_of(st.text(max_size=6), _json), "name": _json,
    "reasoning_content": _json})
_item = st.fixed_dictionaries({}, optional={
    "type": st.one_of(st.sampled_from(["message", "function_call", "function_call_output",
                                       "reasoning", "custom_tool_call", "item_reference"]), _json),
    "role": _role, "content": st.one_of(_text, _json), "id": _json,
    "call_id": st.one_of(st.text(max_size=6), _json), "name": _json, "arguments": _json,
    "output": _json, "input": _json, "summary": _json, "encrypted_content": _json})
_user = {"role": "user", "content": "Say hello."}


def elements(api: str, scalars: bool = True) -> st.SearchStrategy[Any]:
    """One element of the list: usually an object of odd fields, now and then (`scalars`) not
    an object, which the proxy refuses."""
    element = _chat_message if api == "chat" else _item
    return st.integers(0 if scalars else 1, 9).flatmap(
        lambda n: _scalar if n == 0 else st.just(_user) if n < 4 else element)


_ODD_FIELDS = {
    "chat": ["stream", "stream_options", "max_tokens", "max_completion_tokens", "tools",
             "metadata", "prompt_cache_key", "n", "temperature"],
    "responses": ["stream", "max_output_tokens", "tools", "instructions", "previous_response_id",
                  "conversation", "store", "include", "metadata", "prompt_cache_key"],
}


@st.composite
def documents(draw: st.DrawFn, api: str, elements_of: Any = None) -> dict[str, Any]:
    """A request object: a model (rarely odd), the list (rarely odd), other fields of any type."""
    key = PATHS[api][1]
    doc: dict[str, Any] = {"model": draw(_json) if _rarely(draw) else "gpt-4o"}
    listed = elements_of if elements_of is not None else draw(
        st.lists(elements(api), max_size=5))
    doc[key] = draw(_json) if _rarely(draw) else listed
    for name in draw(st.lists(st.sampled_from(_ODD_FIELDS[api]), max_size=3, unique=True)):
        doc[name] = draw(st.one_of(_json, st.sampled_from(
            [True, "true", 1, {"include_usage": "yes"}, [], None])))
    return doc


def _rarely(draw: st.DrawFn) -> bool:
    # Drawn, not `one_of`: hypothesis merges equal branches, so weights by repetition vanish.
    return draw(st.integers(0, 9)) == 0


STYLES = ("compact", "spaced", "sorted", "ascii", "indented")


def written(doc: Any, style: str) -> bytes:
    """`doc` as a client in `style` writes it; lone surrogates escaped, as JSON allows."""
    if style == "compact":
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    elif style == "spaced":
        text = json.dumps(doc, ensure_ascii=False)
    elif style == "sorted":
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    elif style == "indented":
        text = json.dumps(doc, indent=1, ensure_ascii=False)
    else:
        text = json.dumps(doc)
    return text.encode("utf-8", "backslashreplace")


_DAMAGE = ("none", "none", "none", "bom", "trailing", "duplicate_model", "duplicate_list",
           "nan", "big_int", "deep", "not_utf8", "cut", "nul")


def damaged(body: bytes, key: str, how: str) -> bytes:
    """`body` (a JSON object's bytes) damaged `how`: some still valid JSON, some not."""
    inner = body[body.index(b"{") + 1:]
    if how == "bom":
        return b"\xef\xbb\xbf" + body
    if how == "trailing":
        return body + b' {"x":1}'
    if how == "duplicate_model":
        return b'{"model":"gpt-4o-mini",' + inner
    if how == "duplicate_list":  # the parser keeps the last copy
        return body[:-1] + b',"%s":[{"role":"user","content":"the last copy"}]}' % key.encode()
    if how == "nan":
        return b'{"temperature":NaN,"top_p":-Infinity,' + inner
    if how == "big_int":
        return b'{"max_tokens":1' + b"0" * 40 + b"," + inner
    if how == "deep":
        return b'{"metadata":' + b"[" * 1000 + b"]" * 1000 + b"," + inner
    if how == "not_utf8":
        return b'{"user":"\xff\xfe\xc3",' + inner
    if how == "cut":
        return body[:len(body) // 2]
    if how == "nul":
        return b'{"user":"a\\u0000b\\ud800",' + inner
    return body


@st.composite
def request_bodies(draw: st.DrawFn, api: str) -> bytes:
    doc = draw(documents(api))
    body = written(doc, draw(st.sampled_from(STYLES)))
    return damaged(body, PATHS[api][1], draw(st.sampled_from(_DAMAGE)))


# ---------------------------------------------------------------- a thread's turns

_EDITS = ("append", "append", "append", "edit", "truncate", "reorder", "restyle", "same",
          "damage")


@dataclass(frozen=True)
class Turn:
    body: bytes
    edit: str  # how it came from the turn before


@st.composite
def thread_turns(draw: st.DrawFn, api: str, turns: int = 4) -> list[Turn]:
    """Requests of one thread, each the one before with its list (and maybe its style) edited."""
    key = PATHS[api][1]
    listed: list[Any] = [_user]
    style = draw(st.sampled_from(STYLES))
    doc = draw(documents(api, elements_of=listed))
    doc[key] = listed
    out = [Turn(written(doc, style), "first")]
    for _ in range(turns - 1):
        edit = draw(st.sampled_from(_EDITS))
        if edit == "append":
            listed = listed + draw(st.lists(elements(api, False), min_size=1, max_size=3))
        elif edit == "edit" and listed:
            listed = list(listed)
            listed[draw(st.integers(0, len(listed) - 1))] = draw(elements(api, False))
        elif edit == "truncate":
            listed = listed[:draw(st.integers(0, len(listed)))]
        elif edit == "reorder":
            listed = draw(st.permutations(listed))
        elif edit == "restyle":
            style = draw(st.sampled_from(STYLES))
        doc = {**doc, key: listed}
        body = written(doc, style)
        if edit == "damage":
            body = damaged(body, key, draw(st.sampled_from(_DAMAGE)))
        out.append(Turn(body, edit))
    return out


# ---------------------------------------------------------------- odd headers

_THREAD_IDS = st.one_of(st.text(max_size=10), st.sampled_from(
    ["a\x01b", "x" * 10240, "ünï", "\ud800", " ", "t/../x", "%00"]))


@st.composite
def header_lines(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    """Raw header lines (name, value bytes): repeated thread headers, credentials of every
    shape, content types with charsets, values that are not ASCII."""
    lines: list[tuple[bytes, bytes]] = []
    for thread in draw(st.lists(_THREAD_IDS, max_size=2)):
        lines.append((b"x-thread-id", _header_value(thread)))
    auth = draw(st.sampled_from([None, "", "Bearer", "Bearer ", "Bearer sk-a", "bearer sk-a",
                                 "Basic YTpi", "Bearer \xff", "sk-raw"]))
    if auth is not None:
        lines.append((b"authorization", _header_value(auth)))
    if draw(st.booleans()):
        lines.append((b"api-key", b"k2"))
    content_type = draw(st.sampled_from([None, "application/json", "text/plain", "",
                                         "application/json; charset=latin-1",
                                         "application/json; charset=utf-16",
                                         "multipart/form-data; boundary=x"]))
    if content_type is not None:
        lines.append((b"content-type", content_type.encode()))
    return lines


def _header_value(text: str) -> bytes:
    # Control characters other than tab are not allowed in a header value: the server's parser
    # refuses them (a plain 400 before any handler), which is tested on its own.
    return text.encode("utf-8", "surrogatepass").replace(b"\r", b"").replace(b"\n", b"")


# ---------------------------------------------------------------- odd upstream answers

@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    chunks: tuple[bytes, ...]  # written one by one (a stream when the type says so)


_usage = st.one_of(_json, st.fixed_dictionaries({}, optional={
    "prompt_tokens": _json, "completion_tokens": _json, "input_tokens": _json,
    "output_tokens": _json, "prompt_tokens_details": _json, "total_tokens": _json}))
_chat_answer = st.fixed_dictionaries({}, optional={
    "choices": st.one_of(_json, st.lists(st.fixed_dictionaries({}, optional={
        "message": st.one_of(_json, st.fixed_dictionaries({}, optional={
            "role": _json, "content": _json, "tool_calls": st.one_of(
                _json, st.lists(_call, max_size=2))})),
        "delta": _json, "index": _json, "finish_reason": _json}), max_size=2)),
    "usage": _usage, "output": st.one_of(_json, st.lists(_item, max_size=2)),
    "type": st.sampled_from(["response.completed", "response.created", "error",
                             "response.failed", "response.output_item.done"]),
    "response": _json, "error": _json})


@st.composite
def upstream_answers(draw: st.DrawFn) -> Answer:
    status = draw(st.sampled_from([200, 200, 200, 400, 404, 429, 500, 503]))
    if draw(st.booleans()):  # a whole body
        body = draw(st.one_of(_chat_answer.map(lambda v: json.dumps(v).encode()),
                              st.binary(max_size=40), st.just(b"[" * 3000)))
        kind = draw(st.sampled_from(["application/json", "text/plain", ""]))
        return Answer(status, kind, (body,))
    events = draw(st.lists(_chat_answer.map(lambda v: json.dumps(v).encode()), max_size=4))
    framing = draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r", b"\n"]))
    chunks = [b"data: " + event + framing for event in events]
    chunks += draw(st.lists(st.sampled_from(
        [b"data: [DONE]\n\n", b": comment\n\n", b"event: error\n", b"data: not json\n\n",
         b"\xff\xfe\n\n", b"data:", b"retry: x\n\n", b"id: \x00\n\n"]), max_size=3))
    split = draw(st.integers(0, 7))
    joined = b"".join(chunks)
    pieces = tuple(joined[i:i + split + 1] for i in range(0, len(joined), split + 1)) \
        if split < 7 else tuple(chunks)
    return Answer(status, "text/event-stream", pieces)
