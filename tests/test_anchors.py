"""Usage anchors: used for the exact projection they answered, rejected once it changed."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.anchors import (AnchoredEstimate, context_bytes, echoed, estimate, make_anchor,
                           projection_digest, response_digests, response_entries)
from proxy.conversation import Api, Entries, entries_from, entry_from_chat
from proxy.identity import Identities
from proxy.records import Anchor
from proxy.sse import SseDecoder
from proxy.streams import ChatStream
from proxy.usage import normalize
from tests.factories import chat, responses

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
CONTEXT = context_bytes(TOOLS, None, "gpt-4o")
IDS = Identities()

PROJECTION = [{"role": "system", "content": "You are terse."},
              {"role": "user", "content": "Read a.py and fix it."}]
RESPONSE = {"role": "assistant", "content": "Reading it now.", "refusal": None,
            "reasoning_content": "The user wants a fix.",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "read_file", "arguments": "{\"path\":\"a.py\"}"}}]}
ECHO = {"tool_calls": [{"function": {"arguments": "{\"path\":\"a.py\"}", "name": "read_file"},
                        "type": "function", "id": "call_1"}],
        "content": [{"type": "text", "text": "Reading it now."}], "role": "assistant"}
USAGE = {"prompt_tokens": 40_000, "completion_tokens": 150,
         "completion_tokens_details": {"reasoning_tokens": 100}}


def entries_of(messages: list[dict[str, Any]], api: Api = Api.CHAT) -> Entries:
    return chat(*messages) if api is Api.CHAT else responses(*messages)


def sizes_of(entries: Entries) -> list[int]:
    return [len(e.to_bytes()) // 4 + 3 for e in entries]


def anchor_for(projection: list[dict[str, Any]], response: Any, usage: dict[str, Any],
               api: Api = Api.CHAT, context: bytes = CONTEXT) -> Anchor:
    normalized = normalize(usage, api)
    assert normalized is not None
    return make_anchor(entries_of(projection, api), context, response_entries(api, response), normalized,
                       IDS.digest, model="gpt-4o", created_at=1000.0)


def run(messages: list[dict[str, Any]], anchors: list[Anchor], conservative: int = 100,
        context: bytes = CONTEXT, api: Api = Api.CHAT, margin: float = 0.0) -> tuple[int, Anchor | None]:
    """The estimate's tokens and anchor (none of these lists holds a reference to guess)."""
    found = estimated(messages, anchors, conservative, context, api, margin)
    assert found.guessed == 0
    return found.tokens, found.anchor


def estimated(messages: list[dict[str, Any]], anchors: list[Anchor], conservative: int = 100,
              context: bytes = CONTEXT, api: Api = Api.CHAT,
              margin: float = 0.0) -> AnchoredEstimate:
    entries = entries_of(messages, api)
    return estimate(entries, sizes_of(entries), context, anchors, conservative, IDS.digest, margin)


NEXT = [*PROJECTION, ECHO, {"role": "tool", "tool_call_id": "call_1", "content": "print('a')"}]


def test_anchor_records_the_projection_and_visible_output() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    assert (anchor.position, anchor.input_tokens, anchor.output_tokens) == (2, 40_000, 50)
    assert anchor.reasoning_tokens == 100 and anchor.created_at == 1000.0
    assert anchor.prefix_digest == projection_digest(entries_of(PROJECTION), CONTEXT)
    assert anchor.response_digests == (IDS.digest(entry_from_chat(RESPONSE)),)


def test_anchor_used_on_an_echo_in_another_shape() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    tokens, used = run(NEXT, [anchor])
    entries = entries_of(NEXT)
    sizes = sizes_of(entries)
    assert used == anchor
    assert tokens == 40_000 + max(50, sizes[2]) + sizes[3]


def test_tail_gets_the_margin_and_conservative_is_a_floor() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    plain, _ = run(NEXT, [anchor])
    padded, _ = run(NEXT, [anchor], margin=1.0)
    assert padded == plain + sizes_of(entries_of(NEXT))[3]
    assert run(NEXT, [anchor], conservative=10**6) == (10**6, anchor)


def test_edited_earlier_message_rejects_the_anchor() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    edited = [PROJECTION[0], {"role": "user", "content": "Read b.py instead."}, *NEXT[2:]]
    assert run(edited, [anchor]) == (100, None)


def test_reserialized_earlier_message_rejects_the_anchor() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    reordered = [PROJECTION[0], {"content": "Read a.py and fix it.", "role": "user"}, *NEXT[2:]]
    assert run(reordered, [anchor]) == (100, None)


def test_different_tools_reject_the_anchor() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    assert run(NEXT, [anchor], context=context_bytes([], None, "gpt-4o")) == (100, None)


def test_changed_response_rejects_the_anchor() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    other = [*PROJECTION, {"role": "assistant", "content": "Something else."}, NEXT[3]]
    assert run(other, [anchor]) == (100, None)
    assert run(PROJECTION, [anchor]) == (100, None)


def test_latest_matching_anchor_wins() -> None:
    older = anchor_for(PROJECTION, RESPONSE, USAGE)
    answer = {"role": "assistant", "content": "Fixed."}
    latest = anchor_for(NEXT, answer, {"prompt_tokens": 50_000, "completion_tokens": 5})
    further = [*NEXT, answer, {"role": "user", "content": "thanks"}]
    assert run(further, [latest, older])[1] == latest
    stale = anchor_for(PROJECTION, {"role": "assistant", "content": "never echoed"}, USAGE)
    assert run(further, [stale, older])[1] == older


def test_an_anchor_whose_echo_runs_past_the_list_is_passed_over_for_an_older_one() -> None:
    older = anchor_for(PROJECTION, RESPONSE, USAGE)
    # A later answer the client retried away: its echo would end past this list.
    retried = anchor_for(NEXT, {"role": "assistant", "content": "Fixed."},
                         {"prompt_tokens": 50_000, "completion_tokens": 5})
    assert retried.echo_end > len(NEXT)
    assert run(NEXT, [retried, older]) == run(NEXT, [older])
    assert run(NEXT, [retried, older])[1] == older
    assert run(PROJECTION, [retried, older]) == (100, None)


def test_native_anthropic_cache_fields_add_up_in_the_anchor() -> None:
    usage = {"input_tokens": 100, "output_tokens": 30, "cache_read_input_tokens": 30_000,
             "cache_creation_input_tokens": 2_000}
    anchor = anchor_for(PROJECTION, RESPONSE, usage)
    assert (anchor.input_tokens, anchor.cached_tokens) == (32_100, 30_000)
    assert run(NEXT, [anchor])[0] >= 32_100


def test_anchor_from_a_streamed_response_matches_the_echo() -> None:
    stream = ChatStream()
    decoder = SseDecoder()
    first_call = {"index": 0, "id": "call_1", "type": "function",
                  "function": {"name": "read_file", "arguments": ""}}
    deltas = [{"role": "assistant", "content": "Reading "},
              {"content": "it now.", "reasoning_content": "hmm", "tool_calls": [first_call]},
              {"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":"}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": "\"a.py\"}"}}]}]
    chunks = [{"choices": [{"index": 0, "delta": d}]} for d in deltas] + [{"choices": [], "usage": USAGE}]
    sse = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    for event in decoder.feed(sse):
        stream.feed(event)
    assert stream.done
    usage = normalize(stream.usage, Api.CHAT)
    assert usage is not None
    anchor = make_anchor(entries_of(PROJECTION), CONTEXT, response_entries(Api.CHAT, stream.message()),
                         usage, IDS.digest)
    assert run(NEXT, [anchor])[1] == anchor


RESPONSES_PROJECTION = [{"role": "user", "content": "List the files."}]
RESPONSES_OUTPUT = [
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "ls", "arguments": "{}",
     "status": "completed"}]


@pytest.mark.parametrize("keep_reasoning", [True, False])
def test_responses_anchor_with_or_without_the_reasoning_item(keep_reasoning: bool) -> None:
    usage = {"input_tokens": 9_000, "output_tokens": 80, "output_tokens_details": {"reasoning_tokens": 64}}
    anchor = anchor_for(RESPONSES_PROJECTION, RESPONSES_OUTPUT, usage, Api.RESPONSES)
    echo = RESPONSES_OUTPUT if keep_reasoning else RESPONSES_OUTPUT[1:]
    result = {"type": "function_call_output", "call_id": "c1", "output": "a b"}
    following = [*RESPONSES_PROJECTION, *echo, result]
    tokens, used = run(following, [anchor], api=Api.RESPONSES)
    assert used == anchor and anchor.output_tokens == 16
    assert tokens > 9_000


def test_projection_digest_sees_bytes_not_entry_objects() -> None:
    compact = entries_from(Api.CHAT, PROJECTION, [orjson.dumps(m) for m in PROJECTION])
    rebuilt = tuple(entry_from_chat(m) for m in PROJECTION)
    spaced = entries_of(PROJECTION)
    assert projection_digest(compact, CONTEXT) == projection_digest(rebuilt, CONTEXT)
    assert projection_digest(spaced, CONTEXT) != projection_digest(rebuilt, CONTEXT)
    assert projection_digest(compact, CONTEXT) != projection_digest(compact, b"")
    assert projection_digest(compact[:1], CONTEXT) != projection_digest(compact, CONTEXT)


def _stored_format(entries: Entries, context: bytes) -> str:
    """The digest as stored anchors hold it: a change here strands every stored anchor."""
    h = hashlib.blake2b(digest_size=16)
    h.update(len(context).to_bytes(8, "little"))
    h.update(context)
    for entry in entries:
        h.update(hashlib.blake2b(entry.to_bytes(), digest_size=16).digest())
    return h.hexdigest()


@settings(max_examples=50)
@given(st.lists(st.sampled_from([b"", b"x", b"[\"m\",null,null]", b"t" * 1000,
                                 b"big" * 100_000]), min_size=1, max_size=8),
       st.integers(0, len(PROJECTION)))
def test_projection_digest_keeps_the_stored_format_whatever_came_before(
        contexts: list[bytes], length: int) -> None:
    entries = entries_of(PROJECTION)[:length]
    for context in contexts:  # repeated contexts are hashed once; over 256 KB, every time
        assert projection_digest(entries, context) == _stored_format(entries, context)


def test_anchor_beyond_the_projection_is_not_echoed() -> None:
    anchor = Anchor(response_digests=("x",), position=5, prefix_digest="", input_tokens=1,
                    output_tokens=1)
    assert echoed(entries_of(PROJECTION), anchor, IDS.digest) is None


def test_an_anchor_written_for_the_store_has_every_field_and_reads_back_equal() -> None:
    from dataclasses import fields

    anchor = Anchor(("a", "b"), 7, "digest", 1200, 30, cached_tokens=800, reasoning_tokens=12,
                    model="gpt-4o", created_at=5.5)
    data = orjson.loads(orjson.dumps(anchor.to_data()))
    assert set(data) == {f.name for f in fields(Anchor)}
    assert Anchor.from_data(data) == anchor


@pytest.mark.parametrize(("api", "response"), [
    (Api.CHAT, RESPONSE), (Api.CHAT, ECHO), (Api.CHAT, {"role": "assistant", "content": None}),
    (Api.CHAT, {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"},
                                                 {"type": "text", "text": "Hi."}]}),
    (Api.RESPONSES, [{"type": "reasoning", "id": "rs_1", "summary": []},
                     {"type": "message", "id": "msg_1", "role": "assistant",
                      "content": [{"type": "output_text", "text": "Hi."}]},
                     {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                      "name": "read_file", "arguments": "{}"}]),
])
def test_response_digests_are_what_make_anchor_takes(api: Api, response: Any) -> None:
    entries = response_entries(api, response)
    anchor = make_anchor(entries_of(PROJECTION), CONTEXT, entries, normalize(USAGE, api),
                         IDS.content_digest)
    assert response_digests(api, response, Identities()) == anchor.response_digests


@pytest.mark.parametrize("made_at", [None, 0, 2, 4])
def test_the_projection_digest_hashes_the_context_then_each_entry_digest(
        made_at: int | None) -> None:
    import hashlib

    messages = [{"role": "user", "content": f"message {i}"} for i in range(5)]
    entries = entries_from(Api.CHAT, messages, [orjson.dumps(m) for m in messages])
    if made_at is not None:  # an entry the proxy made: no client bytes, no key
        entries = (*entries[:made_at], entry_from_chat({"role": "user", "content": "made"}),
                   *entries[made_at:])
    expected = hashlib.blake2b(digest_size=16)
    expected.update((3).to_bytes(8, "little") + b"ctx")
    for entry in entries:
        expected.update(hashlib.blake2b(entry.to_bytes(), digest_size=16).digest())
    assert projection_digest(entries, b"ctx") == expected.hexdigest()
    assert projection_digest(iter(entries), b"ctx") == expected.hexdigest()
