"""One retry after an upstream rejection of provider-private state (SPEC §7.4), as a property.

Requests of both APIs carry every kind of private state SPEC §7 names (Responses reasoning
items' `encrypted_content`, OpenRouter `reasoning_details` signed or encrypted, thinking blocks
and thinking parts with signatures, Gemini `thought_signature`s, plain `reasoning_content` /
`reasoning`), drawn valid for a dialect of the fake upstream and then, mostly, spoiled the way
that dialect refuses (PROTOCOL.md §4): a blob or signature forged, a field a thinking mode needs
taken away, or sent as it is to a server that refuses such fields. Stream or not.

Whatever the fake's own rules say of the first body decides what must follow:
- accepted: no retry, the client gets that answer;
- refused: exactly one retry, before any byte reached the client; the retried body is the first
  one with only private state stripped or stood in (every message's visible text, tool calls
  and tool results as they were; a message without private state byte for byte; a Responses
  item at most without its server `id`, which named a dropped reasoning item); what the
  refusal was about is gone or stood in; the request's log line and an `upstream_retry` event
  say so;
- the retry accepted: the client gets its answer, nothing of the refusal, and the thread's next
  request goes up with the same fix at once (a retry lesson, README); the retry refused in
  turn: that refusal is relayed as the fake sent it, and no third request goes up.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from proxy.core.private import GEMINI_STAND_IN
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.rejections import Rejection
from proxy.testing.replies import Reply
from proxy.testing.rules import check_chat, check_responses
from tests.conftest import API_KEY
from tests.factories import without_gemini_signature
from tests.harness import LoopThread, RunningProxy, proxy_settings, start_proxy, stop_proxy
from tests.session_rig import body_elements
from tests.strategies import conversations, is_server_item, request_points

PRIVATE_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks",
                "reasoning_items", "provider_specific_fields")
THINKING_PARTS = ("thinking", "redacted_thinking")
FORGED = "forged-by-another-route"

# What a case draws and what the fake does with it: (api, the dialect the conversation is drawn
# valid for, the fake's dialect, what spoils it).
KINDS = {
    "encrypted reasoning item forged": ("responses", None, "openai", "forge_encrypted"),
    "signed reasoning_details forged": ("chat", "openrouter", "openrouter", "forge_detail"),
    "Gemini signature forged": ("chat", "gemini", "gemini", "forge_signature"),
    "Gemini signature missing": ("chat", "gemini", "gemini", "drop_signature"),
    "DeepSeek reasoning_content missing": ("chat", "deepseek-thinking", "deepseek-thinking",
                                           "drop_reasoning"),
    "Kimi reasoning_content missing": ("chat", "kimi-thinking", "kimi-thinking", "drop_reasoning"),
    "reasoning fields to Cerebras": ("chat", None, "cerebras", None),
    "reasoning_content to DeepSeek R1": ("chat", None, "deepseek-r1-legacy", None),
    # Thinking parts, thinking_blocks, LiteLLM fields to OpenAI's strict schema. Gemini's
    # `extra_content` is left out: it may hold more than a signature, so the proxy does not
    # take its refusal for one of private state.
    "private fields to strict OpenAI": ("chat", None, "openai-strict", "no_extra_content"),
    # A client that kept a response's items but not its reasoning item: their ids name it.
    "reasoning item dropped by the client": ("responses", None, "openai", "drop_reasoning_item"),
}
_threads = itertools.count()


@pytest.fixture(scope="module")
def rig(loop_thread: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake = FakeUpstream()
    loop_thread.run(fake.start())
    state = str(tmp_path_factory.mktemp("private-retry"))
    proxy = loop_thread.run(start_proxy(proxy_settings(fake.url, state)))
    http = httpx.Client(timeout=30)
    yield fake, proxy, http
    http.close()
    loop_thread.run(stop_proxy(proxy))
    loop_thread.run(fake.stop())


# ---------------------------------------------------------------- drawing a case

def _calls(message: dict[str, Any]) -> list[Any]:
    calls = message.get("tool_calls")
    return calls if message.get("role") == "assistant" and isinstance(calls, list) else []


def _signature(holder: Any) -> Any:
    extra = holder.get("extra_content") if isinstance(holder, dict) else None
    google = extra.get("google") if isinstance(extra, dict) else None
    return google.get("thought_signature") if isinstance(google, dict) else None


@st.composite
def spoiled(draw: st.DrawFn, how: str | None, api: str,
            elements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`elements` spoiled `how` at one drawn place (unchanged when there is no such place)."""
    out = [dict(e) for e in elements]
    if how == "no_extra_content":
        for m in out:
            if _calls(m):
                m["tool_calls"] = [without_gemini_signature(c) for c in _calls(m)]
        return out
    if how in ("forge_encrypted", "drop_reasoning_item"):
        places = [i for i, e in enumerate(out) if e.get("type") == "reasoning"]
    elif how == "forge_detail":
        places = [i for i, e in enumerate(out) if e.get("reasoning_details")]
    elif how in ("forge_signature", "drop_signature"):
        places = [i for i, e in enumerate(out) if any(_signature(c) for c in _calls(e))]
    elif how == "drop_reasoning":
        places = [i for i, e in enumerate(out) if _calls(e) and "reasoning_content" in e]
    else:
        places = []
    if not places:
        return out
    if how == "drop_signature":  # mostly where Gemini checks: the current loop
        latest = max((i for i, e in enumerate(out) if e.get("role") == "user"), default=-1)
        places = draw(st.sampled_from([[i for i in places if i > latest] or places, places]))
    i = draw(st.sampled_from(places))
    m = out[i]
    if how == "drop_reasoning_item":
        del out[i]
    elif how == "forge_encrypted":
        m["encrypted_content"] = FORGED
    elif how == "forge_detail":
        m["reasoning_details"] = [{**d, "text": d.get("text", "") + " (edited)"}
                                  for d in m["reasoning_details"]]
    elif how == "drop_reasoning":
        del m["reasoning_content"]
    else:
        signed = [k for k, c in enumerate(_calls(m)) if _signature(c)]
        k = draw(st.sampled_from(signed))
        calls = list(_calls(m))
        calls[k] = (without_gemini_signature(calls[k]) if how == "drop_signature" else
                    {**calls[k], "extra_content": {"google": {"thought_signature": FORGED}}})
        m["tool_calls"] = calls
    return out


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(KINDS)))
    api, drawn_for, dialect, how = KINDS[kind]
    elements = draw(conversations(api, dialect=drawn_for, max_turns=3))
    points = request_points(elements) or [len(elements)]
    # Mostly the whole conversation: more of it carries private state to spoil.
    sent = elements[:draw(st.sampled_from(points) | st.just(points[-1]))]
    # One in five goes as drawn: accepted, or refused by a dialect that refuses it as it is.
    if draw(st.integers(0, 4)) > 0:
        sent = draw(spoiled(how, api, sent))
    elif how == "no_extra_content":
        sent = draw(spoiled(how, api, sent))
    return {"kind": kind, "api": api, "dialect": dialect, "elements": sent,
            "stream": draw(st.booleans()), "include_usage": draw(st.booleans())}


# ---------------------------------------------------------------- what the fake says

def refusal(fake: FakeUpstream, api: str, body: dict[str, Any]) -> Rejection | None:
    if api == "chat":
        return check_chat(body, fake.dialect, signer=fake.signer)
    return check_responses(body, verify_encrypted=fake.signer.encrypted_valid, signer=fake.signer)


# ---------------------------------------------------------------- what a message says

def _said(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message without its private state: what the sanitizer must never touch."""
    out = without_gemini_signature({k: v for k, v in message.items() if k not in PRIVATE_KEYS})
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [p for p in content
                          if not (isinstance(p, dict) and p.get("type") in THINKING_PARTS)]
    if _calls(out):
        out["tool_calls"] = [without_gemini_signature(c) for c in _calls(out)]
    return out


def _said_loosely(message: dict[str, Any]) -> dict[str, Any]:
    """`_said`, with an emptied content (null, "" or no parts) read as none: the sanitizer
    writes a content that held only thinking parts as null beside calls, else as ""."""
    out = _said(message)
    if out.get("content") in (None, "", []):
        out.pop("content", None)
    return out


def _has_private(message: dict[str, Any]) -> bool:
    return _said(message) != message


def _blobs(message: dict[str, Any]) -> list[Any]:
    """The chain-bound blobs of a chat message (Gemini stand-ins are not blobs)."""
    found: list[Any] = []
    for key in ("reasoning_details", "thinking_blocks", "reasoning_items"):
        for element in message.get(key) or []:
            if not isinstance(element, dict) or element.get("signature") or element.get("data") \
                    or element.get("encrypted_content") or element.get("type") == "reasoning.encrypted":
                found.append(element)
    content = message.get("content")
    if isinstance(content, list):
        found += [p for p in content if isinstance(p, dict) and p.get("type") in THINKING_PARTS
                  and (p.get("signature") or p.get("data"))]
    for holder in (message, *_calls(message)):
        signature = _signature(holder)
        if signature is not None and signature != GEMINI_STAND_IN:
            found.append(signature)
    return found


def _latest_user(messages: list[dict[str, Any]]) -> int:
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def check_chat_retry(how: str | None, first: bytes, retried: bytes) -> None:
    before, after = orjson.loads(first)["messages"], orjson.loads(retried)["messages"]
    old, new = body_elements("chat", first), body_elements("chat", retried)
    assert len(after) == len(before), "a message was dropped or added"
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        # The fixes for a field the upstream wants back add it where it is missing (Gemini's
        # stand-in on a current-loop step that had no signature, also after a forged one).
        if not _has_private(a) and how not in ("drop_reasoning", "drop_signature",
                                               "forge_signature"):
            assert new[i] == old[i], f"message {i} holds no private state, yet it changed"
        assert _said_loosely(b) == _said_loosely(a), f"message {i}: what it says changed"
    if how == "drop_reasoning":  # placeholders where the thinking mode wants reasoning back
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            if _calls(a) and not isinstance(a.get("reasoning_content"), str):
                assert b == {**a, "reasoning_content": ""}, i
            else:
                assert new[i] == old[i], f"message {i} changed"
    elif how in ("forge_signature", "drop_signature"):  # the documented stand-in
        assert not any(_blobs(m) for m in after), "a forged or foreign blob went up again"
        loop = after[_latest_user(after) + 1:]
        assert all(_signature(_calls(m)[0]) == GEMINI_STAND_IN for m in loop if _calls(m)), \
            "a current-loop step without Gemini's stand-in signature"
    elif how == "forge_detail":
        assert not any(_blobs(m) for m in after), "a signed blob went up again"
    else:  # a server that refuses reasoning fields gets none
        assert all(not _has_private(m) for m in after), "private state went up again"


def check_responses_retry(first: bytes, retried: bytes) -> None:
    before, after = orjson.loads(first)["input"], orjson.loads(retried)["input"]
    old, new = body_elements("responses", first), body_elements("responses", retried)
    # A server item goes with its reasoning item (its id, which it needs, names that one).
    kept = [(i, item) for i, item in enumerate(before)
            if item.get("type") not in ("reasoning", "compaction") and not is_server_item(item)]
    assert not any(item.get("type") in ("reasoning", "compaction") for item in after)
    servers = {k for k, item in enumerate(after) if is_server_item(item)}
    assert all(after[k] in before for k in servers), "a server item changed"
    after = [item for k, item in enumerate(after) if k not in servers]
    new = [raw for k, raw in enumerate(new) if k not in servers]
    assert len(after) == len(kept), "an item other than reasoning was dropped"
    for (i, a), b, raw in zip(kept, after, new, strict=True):
        if raw != old[i]:
            assert {k: v for k, v in a.items() if k != "id"} == b, f"item {i} changed"


# ---------------------------------------------------------------- the property

def _post(http: httpx.Client, proxy: RunningProxy, case: dict[str, Any], thread: str) -> httpx.Response:
    api = case["api"]
    body: dict[str, Any] = {"model": "gpt-4o"}
    if api == "chat":
        body["messages"] = case["elements"]
        path = "chat/completions"
    else:
        body.update(input=case["elements"], store=False, include=["reasoning.encrypted_content"])
        path = "responses"
    if case["stream"]:
        body["stream"] = True
        if api == "chat" and case["include_usage"]:
            body["stream_options"] = {"include_usage": True}
    return http.post(f"{proxy.base_url}/{path}", content=orjson.dumps(body),
                     headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": thread,
                              "content-type": "application/json"})


def _check_answer(case: dict[str, Any], answer: httpx.Response, refused: Rejection) -> None:
    """The retry's answer, whole, and nothing of the refusal before it."""
    assert answer.status_code == 200, answer.text
    assert refused.to_bytes() not in answer.content
    if not case["stream"]:
        assert answer.json().get("error") is None
    elif case["api"] == "chat":
        assert answer.content.endswith(b"data: [DONE]\n\n")
    else:
        assert b"event: response.completed" in answer.content


def _line(proxy: RunningProxy, thread: str) -> dict[str, Any]:
    return next(line for line in reversed(proxy.requests()) if line.get("thread") == thread)


def check_lesson(rig: Any, case: dict[str, Any], thread: str, fixed: bytes, reason: str) -> None:
    """The thread's next request (here the same one again: a client's own retry) goes up with
    the fix at once, as the retry sent it, and is not refused."""
    fake, proxy, http = rig
    before = len(fake.requests)
    again = _post(http, proxy, case, thread)
    sent = fake.requests[before:]
    assert again.status_code == 200, again.text
    assert [r.body for r in sent] == [fixed], "the lesson's request is not the retry's"
    assert _line(proxy, thread).get("retry_lesson") == reason


@given(case=cases())
def test_a_rejection_of_private_state_gets_one_retry_without_it(rig: Any, case: dict[str, Any]) -> None:
    fake, proxy, http = rig
    fake.dialect = case["dialect"]
    thread = f"private-retry-{next(_threads)}"
    before = len(fake.requests)
    answer = _post(http, proxy, case, thread)
    sent = fake.requests[before:]
    line = _line(proxy, thread)
    first = refusal(fake, case["api"], sent[0].json)
    if first is None:
        event("accepted: no retry")
        assert len(sent) == 1 and answer.status_code == 200, answer.text
        assert "retried" not in line
        return
    event(f"{case['kind']}: retried")
    assert len(sent) == 2, f"{len(sent)} upstream requests for one refusal of private state"
    how = KINDS[case["kind"]][3]
    if case["api"] == "chat":
        check_chat_retry(how, sent[0].body, sent[1].body)
    else:
        check_responses_retry(sent[0].body, sent[1].body)
    assert line["retried"] and line["first_status"] == first.status
    said = [e for e in proxy.logs.events("upstream_retry") if e.get("thread") == thread]
    assert [(e["reason"], e["status"]) for e in said] == [(line["retried"], first.status)]
    second = refusal(fake, case["api"], sent[1].json)
    if b"without its required 'reasoning' item" in first.to_bytes():
        # What the ids named is not in the request: the retry takes those ids, or the items
        # that cannot go without theirs, and the blobs made over the history that held it.
        assert second is None, second.body
    if second is None:
        _check_answer(case, answer, first)
        check_lesson(rig, case, thread, sent[1].body, line["retried"])
        return
    event("the retry refused too: relayed")
    assert (answer.status_code, answer.content) == (second.status, second.to_bytes())


# ---------------------------------------------------------------- a refusal inside a stream

class _Unchecked:
    """The fake's signer, except that the endpoint's own check of encrypted content passes:
    the responder refuses a forged blob instead, inside the 200 stream."""

    def __init__(self, signer: Any) -> None:
        self._signer = signer

    def encrypted_valid(self, item: Any, preceding: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._signer, name)


def _refused_in_stream(signer: Any, recorded: Any) -> Reply | None:
    """OpenAI's refusal of a foreign blob as it comes in a stream: an `error` event right after
    the lifecycle events (PROTOCOL.md §6.3, the nested form observed on the wire)."""
    items = (recorded.json or {}).get("input") or []
    for k, item in enumerate(items):
        if item.get("type") == "reasoning" and not signer.encrypted_valid(item, items[:k]):
            message = f"The encrypted content for item {item.get('id')} could not be verified."
            return Reply.stream_error(after=2, error={
                "type": "invalid_request_error", "code": "invalid_encrypted_content",
                "message": message, "param": None})
    return None


@pytest.fixture(scope="module")
def stream_rig(loop_thread: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake = FakeUpstream()
    signer = fake.signer
    fake.signer = _Unchecked(signer)  # type: ignore[assignment]
    fake.responder = lambda recorded: _refused_in_stream(signer, recorded)
    loop_thread.run(fake.start())
    state = str(tmp_path_factory.mktemp("private-retry-stream"))
    proxy = loop_thread.run(start_proxy(proxy_settings(fake.url, state)))
    http = httpx.Client(timeout=30)
    yield fake, proxy, http, signer
    http.close()
    loop_thread.run(stop_proxy(proxy))
    loop_thread.run(fake.stop())


@st.composite
def forged_streams(draw: st.DrawFn) -> dict[str, Any]:
    elements = draw(conversations("responses", max_turns=3))
    points = request_points(elements) or [len(elements)]
    sent = elements[:draw(st.sampled_from(points) | st.just(points[-1]))]
    if draw(st.integers(0, 4)) > 0:
        sent = draw(spoiled("forge_encrypted", "responses", sent))
    return {"kind": "in-stream refusal", "api": "responses", "elements": sent, "stream": True,
            "include_usage": False}


@given(case=forged_streams())
def test_a_refusal_inside_a_responses_stream_is_retried_before_a_byte_is_relayed(
        stream_rig: Any, case: dict[str, Any]) -> None:
    fake, proxy, http, signer = stream_rig
    thread = f"private-retry-stream-{next(_threads)}"
    before = len(fake.requests)
    answer = _post(http, proxy, case, thread)
    sent = fake.requests[before:]
    assert answer.status_code == 200, answer.text
    frames = [line[6:] for line in answer.content.split(b"\n") if line.startswith(b"data: ")]
    events = [orjson.loads(f) for f in frames]
    assert [e["type"] for e in events].count("response.created") == 1
    assert events[-1]["type"] == "response.completed" and "error" not in [e["type"] for e in events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    if _refused_in_stream(signer, sent[0]) is None:
        event("accepted: no retry")
        assert len(sent) == 1
        return
    event("refused in the stream: retried")
    assert len(sent) == 2 and _refused_in_stream(signer, sent[1]) is None
    assert b"invalid_encrypted_content" not in answer.content
    check_responses_retry(sent[0].body, sent[1].body)
    assert _line(proxy, thread)["retried"] == "encrypted reasoning rejected"
