"""Message identity as properties, over both APIs (SPEC §3, §10).

An echo is what a client sends back of an element it was given, in the ways SPEC §3 lists:
keys in another order (at every level), nulls dropped or added, content as a string or as one
text part (for Responses also an `input` message without `"type": "message"`), provider
reasoning fields kept, added or dropped (on calls too: Gemini's signature). An echo has the
element's id; an element that says something else (role, text, name, a call's id, name or
arguments, the call a result answers) has another. A Responses item with an `id` is that id,
whatever else its echo changed. Over a whole list, the occurrence counter keeps ids distinct
and a list's ids do not change as it grows.

Each digest is taken both ways the proxy takes it: from a fresh parse (no client bytes) and
through one shared `Identities` that caches by the client's bytes, so a cache mixing two
elements up fails too.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api, entry_from
from proxy.identity import Identities

Element = dict[str, Any]

SHARED = Identities()  # one cache for every example: an entry must never get another's digest
_text = st.text(st.characters(codec="utf-8"), max_size=12)
_IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "low"}}
# The private reasoning a provider adds to a chat message (PROTOCOL.md §4): none of it is
# what the message says.
_REASONING: dict[str, Any] = {
    "reasoning_content": "Let me think.",
    "reasoning": "Plain thought.",
    "reasoning_details": [{"type": "reasoning.encrypted", "data": "gAAAAB", "index": 0}],
    "thinking_blocks": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
    "provider_specific_fields": {"thought_signatures": ["c2ln"]},
}
_SIGNATURE = {"google": {"thought_signature": "c2lnbmF0dXJl"}}


def digests(api: Api, element: Element) -> tuple[str, str]:
    """The element's id from a fresh parse, and through the shared cache by its bytes."""
    fresh = Identities().digest(entry_from(api, element))
    cached = SHARED.digest(entry_from(api, element, orjson.dumps(element)))
    return fresh, cached


# ---------------------------------------------------------------- elements

@st.composite
def _chat_call(draw: st.DrawFn, n: int) -> Element:
    if draw(st.integers(0, 4)) == 0:
        return {"id": f"call_{n}", "type": "custom", "custom": {"name": "apply_patch", "input": draw(_text)}}
    arguments = orjson.dumps({"path": draw(_text), "n": draw(st.integers(-9, 2**40))}).decode()
    return {"id": f"call_{n}", "type": "function",
            "function": {"name": draw(st.sampled_from(("read_file", "grep", "bash"))), "arguments": arguments}}


@st.composite
def chat_messages(draw: st.DrawFn) -> Element:
    # Mostly assistant messages: the ones clients echo, with calls and reasoning to vary.
    role = draw(st.sampled_from(("system", "developer", "user", "tool") + ("assistant",) * 4))
    message: Element = {"role": role}
    if role == "assistant":
        calls = [draw(_chat_call(n)) for n in range(draw(st.integers(0, 3)))]
        message["content"] = draw(st.none() | _text) if calls else draw(_text)
        if calls:
            message["tool_calls"] = [{**c, "extra_content": _SIGNATURE} if draw(st.booleans()) else c
                                     for c in calls]
        if draw(st.booleans()):
            message["refusal"] = None
        message |= {k: v for k, v in _REASONING.items() if draw(st.booleans())}
    elif role == "tool":
        message |= {"tool_call_id": f"call_{draw(st.integers(0, 9))}", "content": draw(_text)}
    elif role == "user" and draw(st.integers(0, 3)) == 0:
        message["content"] = [{"type": "text", "text": draw(_text)}, _IMAGE]
    else:
        message["content"] = draw(_text)
    if role in ("user", "system") and draw(st.integers(0, 3)) == 0:
        message["name"] = draw(st.sampled_from(("alice", "bob")))
    return message


@st.composite
def responses_items(draw: st.DrawFn, with_id: bool | None = None) -> Element:
    kind = draw(st.sampled_from(("message", "function_call", "custom_tool_call", "function_call_output")))
    if kind == "message":
        role = draw(st.sampled_from(("system", "developer", "user", "assistant")))
        part = {"type": "output_text", "text": draw(_text), "annotations": []} if role == "assistant" \
            else {"type": "input_text", "text": draw(_text)}
        item: Element = {"type": "message", "role": role, "content": [part]}
    elif kind == "function_call_output":
        item = {"type": kind, "call_id": f"call_{draw(st.integers(0, 9))}", "output": draw(_text)}
    elif kind == "custom_tool_call":
        item = {"type": kind, "call_id": f"call_{draw(st.integers(0, 9))}", "name": "apply_patch",
                "input": draw(_text)}
    else:
        item = {"type": kind, "call_id": f"call_{draw(st.integers(0, 9))}",
                "name": draw(st.sampled_from(("read_file", "grep"))),
                "arguments": orjson.dumps({"path": draw(_text)}).decode()}
    if with_id if with_id is not None else draw(st.booleans()):
        item["id"] = f"{'msg' if kind == 'message' else 'fc'}_{draw(st.integers(0, 10**6))}"
    return item


apis_elements = st.one_of(st.tuples(st.just(Api.CHAT), chat_messages()),
                          st.tuples(st.just(Api.RESPONSES), responses_items()))


# ---------------------------------------------------------------- echoes

@st.composite
def _reordered(draw: st.DrawFn, value: Any) -> Any:
    if isinstance(value, dict):
        keys = draw(st.permutations(list(value)))
        return {k: draw(_reordered(value[k])) for k in keys}
    if isinstance(value, list):
        return [draw(_reordered(v)) for v in value]
    return value


@st.composite
def _content_form(draw: st.DrawFn, content: Any, part_type: str) -> Any:
    """The same content as sent, as a string, or as one text part."""
    if isinstance(content, list) and len(content) == 1 and content[0].get("type") == part_type:
        text = content[0]["text"]
    elif isinstance(content, str):
        text = content
    else:
        return content  # no single text: nothing to swap
    return draw(st.sampled_from((content, text, [{"type": part_type, "text": text}])))


@st.composite
def _nulls(draw: st.DrawFn, element: Element, optional: tuple[str, ...]) -> Element:
    out = {k: v for k, v in element.items() if v is not None or draw(st.booleans())}
    for key in optional:
        if key not in out and draw(st.integers(0, 3)) == 0:
            out[key] = None
    return out


@st.composite
def chat_echo(draw: st.DrawFn, message: Element) -> Element:
    echo = draw(_nulls(message, ("name", "refusal", "function_call", "audio", "content")))
    if "content" in echo:
        echo["content"] = draw(_content_form(echo["content"], "text"))
    for key, value in _REASONING.items():  # each one dropped if it was there, else added
        if draw(st.booleans()):
            echo = {k: v for k, v in echo.items() if k != key} if key in echo else {**echo, key: value}
    if isinstance(echo.get("tool_calls"), list):
        echo["tool_calls"] = [_toggled_signature(c) if draw(st.booleans()) else c for c in echo["tool_calls"]]
    return draw(_reordered(echo))


@st.composite
def responses_echo(draw: st.DrawFn, item: Element) -> Element:
    echo = draw(_nulls(item, ("status", "name")))
    if echo.get("type") == "message":
        part_type = "output_text" if echo.get("role") == "assistant" else "input_text"
        echo["content"] = draw(_content_form(echo["content"], part_type))
        if "id" not in echo and draw(st.booleans()):
            del echo["type"]  # an `EasyInputMessage`: role and content only
    if "output" in echo:
        echo["output"] = draw(_content_form(echo["output"], "input_text"))
    return draw(_reordered(echo))


def _toggled_signature(call: Element) -> Element:
    if "extra_content" in call:
        return {k: v for k, v in call.items() if k != "extra_content"}
    return {**call, "extra_content": _SIGNATURE}


def echo_of(api: Api, element: Element) -> st.SearchStrategy[Element]:
    return chat_echo(element) if api is Api.CHAT else responses_echo(element)


# ---------------------------------------------------------------- what a message says

_ROLES = ("system", "developer", "user", "assistant", "tool")


def _suffixed(text: Any) -> str:
    return f"{text if isinstance(text, str) else ''}!"


def chat_changes(message: Element) -> dict[str, Element]:
    """The message saying something else, in each way SPEC §3 counts that applies to it."""
    content, calls = message.get("content"), message.get("tool_calls") or []
    out = {
        "text": {**message, "content": [{**content[0], "text": _suffixed(content[0]["text"])},
                                        *content[1:]] if isinstance(content, list) else _suffixed(content)},
        "name": {**message, "name": _suffixed(message.get("name"))},
        **{f"role {r}": {**message, "role": r} for r in _ROLES if r != message["role"]},
    }
    if message["role"] == "tool":
        out["tool_call_id"] = {**message, "tool_call_id": _suffixed(message["tool_call_id"])}
    if message["role"] == "assistant":
        out["call added"] = {**message, "tool_calls": [*calls, {
            "id": "call_new", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]}
    for k, call in enumerate(calls):
        out[f"call {k} dropped"] = {**message, "tool_calls": calls[:k] + calls[k + 1:]}
        for way, changed in _call_changes(call).items():
            out[f"call {k} {way}"] = {**message, "tool_calls": [*calls[:k], changed, *calls[k + 1:]]}
    return out


def _call_changes(call: Element) -> dict[str, Element]:
    body_key = "custom" if call["type"] == "custom" else "function"
    body = call[body_key]
    fields = ("name", "input") if body_key == "custom" else ("name", "arguments")
    return {"id": {**call, "id": _suffixed(call["id"])},
            **{f: {**call, body_key: {**body, f: _suffixed(body[f])}} for f in fields}}


def responses_changes(item: Element) -> dict[str, Element]:
    item = {k: v for k, v in item.items() if k != "id"}  # an id would decide alone
    out = {f: {**item, f: _suffixed(item[f])}
           for f in ("call_id", "name", "arguments", "input", "output") if f in item}
    if item["type"] == "message":
        part = item["content"][0]
        out["text"] = {**item, "content": [{**part, "text": _suffixed(part["text"])}]}
        out |= {f"role {r}": {**item, "role": r} for r in _ROLES[:4] if r != item["role"]}
    return out


def changes_of(api: Api, element: Element) -> dict[str, Element]:
    return chat_changes(element) if api is Api.CHAT else responses_changes(element)


# ---------------------------------------------------------------- properties

@given(apis_elements, st.data())
def test_an_echo_has_the_id_of_the_element(drawn: tuple[Api, Element], data: st.DataObject) -> None:
    api, element = drawn
    echo = data.draw(echo_of(api, element), "echo")
    original = digests(api, element)
    assert original[0] == original[1]
    assert digests(api, echo) == original


@given(apis_elements)
def test_an_element_that_says_something_else_has_another_id(drawn: tuple[Api, Element]) -> None:
    api, element = drawn
    element = {k: v for k, v in element.items() if k != "id"}
    fresh, cached = digests(api, element)
    for way, changed in changes_of(api, element).items():
        other = digests(api, changed)
        assert other[0] != fresh and other[1] != cached, way


@given(responses_items(with_id=True), responses_items(), st.data())
def test_a_responses_item_with_an_id_is_that_id(item: Element, other: Element, data: st.DataObject) -> None:
    """Whatever else differs: the echo, or another item given the same id."""
    echo = data.draw(responses_echo(item), "echo")
    assert digests(Api.RESPONSES, item) == digests(Api.RESPONSES, echo) == (f"id:{item['id']}",) * 2
    assert digests(Api.RESPONSES, {**other, "id": item["id"]})[0] == f"id:{item['id']}"
    assert digests(Api.RESPONSES, {**item, "id": item["id"] + "0"})[0] != f"id:{item['id']}"


@st.composite
def _lists_with_repeats(draw: st.DrawFn) -> tuple[Api, list[Element]]:
    api = draw(st.sampled_from((Api.CHAT, Api.RESPONSES)))
    one = chat_messages() if api is Api.CHAT else responses_items(with_id=False)
    elements = draw(st.lists(one, min_size=1, max_size=6))
    for _ in range(draw(st.integers(0, 4))):  # the same message again ("continue", a retried call)
        elements.insert(draw(st.integers(0, len(elements))), draw(st.sampled_from(elements)))
    return api, elements


@given(_lists_with_repeats(), st.data())
def test_ids_are_distinct_stable_as_the_list_grows_and_the_same_for_its_echo(
        drawn: tuple[Api, list[Element]], data: st.DataObject) -> None:
    api, elements = drawn
    identities = Identities()
    ids = identities.ids([entry_from(api, e) for e in elements])
    assert len(set(ids)) == len(ids)
    for n in range(len(elements)):
        assert identities.ids([entry_from(api, e) for e in elements[:n]]) == ids[:n]
    echoes = [data.draw(echo_of(api, e)) for e in elements]
    assert Identities().ids([entry_from(api, e, orjson.dumps(e)) for e in echoes]) == ids


def test_dropping_a_thinking_part_keeps_the_id() -> None:
    relayed = {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                                {"type": "text", "text": "Done."}]}
    echo = {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}
    assert digests(Api.CHAT, echo) == digests(Api.CHAT, relayed)
