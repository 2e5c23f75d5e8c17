from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.file_reads import file_path
from proxy.compaction.restore import _JOIN_TOKENS, HEADER, collect, looks_binary
from proxy.conversation import Api, ToolCall, content_text, make_user
from proxy.settings import RestoreSettings
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, r_call,
                                           r_output, r_user, tool_result, user)

SETTINGS = RestoreSettings(max_files=3, per_file_tokens=200, total_tokens=500,
                           user_messages_tokens=100)
SETTINGS_BIG = RestoreSettings(max_files=3, per_file_tokens=4000, total_tokens=8000,
                               user_messages_tokens=100)


def read(call_id: str, path: str, content: object, tool: str = "read_file") -> list:
    return [assistant_calls((call_id, tool, {"path": path})), tool_result(call_id, content)]


def cut_before_last(entries) -> Cutoff:
    return Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)


def texts(messages) -> list[str]:
    return [m["content"] for m in messages]


def test_latest_read_of_each_path_wins_newest_files_first() -> None:
    elements = [user("go"), *read("a", "a.py", "old a"), *read("b", "b.py", "b text"),
                *read("c", "a.py", "new a"), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    assert restored.file_paths == ("b.py", "a.py")  # oldest first, newest nearest the tail
    joined = "\n".join(texts(restored.files))
    assert "new a" in joined and "old a" not in joined
    assert all(t.startswith(HEADER) for t in texts(restored.messages))


def test_binary_and_non_text_content_is_never_restored() -> None:
    png = base64.b64encode(bytes(range(256)) * 20).decode()
    elements = [user("go"), *read("a", "bin.dat", "ab\x00cd"), *read("b", "img.b64", png),
                *read("c", "pic.png", [{"type": "text", "text": "x"},
                                       {"type": "image_url", "image_url": {"url": "data:"}}]),
                *read("d", "ok.txt", "plain"), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    assert restored.file_paths == ("ok.txt",)


def test_path_read_again_in_the_tail_is_skipped() -> None:
    elements = [user("go"), *read("a", "a.py", "old"), user("tail"), *read("b", "a.py", "new")]
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=3, lead=0, start=0, strategy=PARTIAL)
    assert collect(entries, cutoff, SETTINGS, count).file_paths == ()


def test_file_later_touched_by_another_tool_is_flagged() -> None:
    elements = [user("go"), *read("a", "a.py", "text"),
                *read("b", "a.py", "ok", tool="edit_file"), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    assert "may be out of date" in restored.files[0]["content"]


def test_big_file_is_cut_and_says_so() -> None:
    big = "\n".join(f"line {i}" for i in range(2000))
    elements = [user("go"), *read("a", "a.py", big), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    text = restored.files[0]["content"]
    assert "truncated" in text and count(text) <= SETTINGS.per_file_tokens + 80


@given(st.integers(1, 12), st.integers(0, 60_000), st.sampled_from([1, 3, 8, 20]))
def test_a_long_file_is_cut_to_its_budget_whatever_its_density(
        seed: int, size: int, chars_per_token: int) -> None:
    # Dense text is over budget within the first characters looked at; sparse text (long
    # whitespace runs, say) is not, and must still be cut from a count of the whole.
    def dense_count(text: str) -> int:
        return len(text) // chars_per_token + 1

    line = f"row {seed} " + "x" * (seed * 7)
    big = "\n".join(line for _ in range(size // len(line) + 1))[:size]
    elements = [user("go"), *read("a", "a.py", big), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, dense_count)
    if not big.strip():
        return
    text = restored.files[0]["content"]
    head = text.split("\n\n", 1)[0]
    body_tokens = dense_count(text) - dense_count(head)
    assert body_tokens <= SETTINGS.per_file_tokens + 40
    if "truncated" not in text:
        assert text.endswith(big)
    else:
        kept = text.split("\n\n", 1)[1].rsplit("\n[... truncated", 1)[0]
        assert big.startswith(kept)


def test_latest_plan_is_restored_unless_the_tail_has_one() -> None:
    plan = ("p", "todo_write", {"todos": [{"content": "write tests", "status": "pending"}]})
    older = ("o", "todo_write", {"todos": []})
    elements = [user("go"), assistant_calls(older), tool_result("o", "ok"),
                assistant_calls(plan), tool_result("p", "ok"), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    assert len(restored.plan) == 1 and "write tests" in restored.plan[0]["content"]
    in_tail = conv(Api.CHAT, [*elements, assistant_calls(("q", "todo_write", {}))])
    assert collect(in_tail, cut_before_last(entries), SETTINGS, count).plan == ()


def test_user_messages_verbatim_newest_first_within_budget() -> None:
    elements = [user("first: use tabs"), assistant("ok"), user("X" * 2000), assistant("ok"),
                user("third: never push"), assistant("ok"), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    text = restored.users[0]["content"]
    assert restored.user_messages == 2
    assert text.index("first: use tabs") < text.index("third: never push")
    assert "X" * 100 not in text and "1 other message(s)" in text


def test_enormous_latest_user_message_is_restored_whole() -> None:
    latest = "START " + "y z " * 50_000 + " END"
    elements = [user("older: use tabs"), assistant("ok"), user(latest), user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    text = restored.users[0]["content"]
    assert latest in text and "omitted" not in text
    assert "older: use tabs" not in text, "older messages still keep to the budget"
    assert restored.user_messages == 1


def test_responses_restore_uses_input_items() -> None:
    entries = conv(Api.RESPONSES, [r_user("go"), r_call("c", "read_file", {"file_path": "a"}),
                                   r_output("c", "alpha"), r_user("tail")])
    restored = collect(entries, cut_before_last(entries), SETTINGS, count)
    assert restored.file_paths == ("a",)
    assert all(m["type"] == "message" and m["content"][0]["type"] == "input_text"
               for m in restored.messages)


def test_file_path_from_arguments() -> None:
    assert file_path(ToolCall("c", "read", '{"file_path": " /a/b.py "}')) == "/a/b.py"
    assert file_path(ToolCall("c", "read", "not json")) is None
    assert file_path(ToolCall("c", "read", '{"limit": 3}')) is None


def test_looks_binary() -> None:
    assert looks_binary("a\x00b")
    assert looks_binary("\x01\x02\x03" * 20)
    assert looks_binary("QUJD" * 500)
    assert not looks_binary("def f():\n\treturn 1\n" * 50)


files = st.lists(st.tuples(st.sampled_from(["a.py", "b.py", "c.md", "d.bin", "e.txt"]),
                           st.one_of(st.text(max_size=3000),
                                     st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
                                     st.just("QUJD" * 400))), max_size=12)
users = st.lists(st.text(min_size=1, max_size=1500), min_size=1, max_size=8)


@given(files, users, st.integers(0, 5), st.integers(50, 800), st.integers(0, 2000),
       st.integers(0, 600))
def test_restore_respects_budgets_and_never_restores_binary(
        reads: list, said: list[str], max_files: int, per_file: int, total: int,
        user_budget: int) -> None:
    settings = RestoreSettings(max_files=max_files, per_file_tokens=per_file,
                               total_tokens=total, user_messages_tokens=user_budget)
    elements: list = []
    for n, (path, content) in enumerate(reads):
        elements += [user(said[n % len(said)]), *read(f"c{n}", path, content)]
    elements += [user(s) for s in said] + [user("tail")]
    entries = conv(Api.CHAT, elements)
    restored = collect(entries, cut_before_last(entries), settings, count)
    file_texts = texts(restored.files)
    assert len(file_texts) <= max_files
    assert sum(count(t) for t in file_texts) <= total
    latest = dict(reads)  # the latest read of each path wins
    for path in restored.file_paths:
        assert latest[path].strip() and not looks_binary(latest[path])
    assert all("\x00" not in t for t in file_texts)
    latest_said = said[-1]
    quoted = restored.users[0]["content"]
    body_tokens = count(quoted) - count(quoted.split("\n\n--- user message", 1)[0])
    assert latest_said in quoted, "the latest user message is restored whole, however long"
    assert body_tokens <= max(user_budget, count(latest_said)) + 40 * restored.user_messages
    assert content_text(conv(Api.CHAT, [make_user(Api.CHAT, quoted).raw])[0]) == quoted



_REAL = load_tokenizer("cl100k_base")


@given(st.text(max_size=300), st.text(max_size=600))
def test_counting_a_file_message_by_parts_never_undercounts(head: str, text: str) -> None:
    # A file that needs no cut is counted as its header plus its tool result's size.
    assert _REAL.count(f"{head}\n\n{text}") <= _REAL.count(head) + _REAL.count(text) + _JOIN_TOKENS


def test_a_file_that_fits_is_not_tokenized_again_and_its_bound_holds() -> None:
    estimator = TokenEstimator(_REAL)
    body = "\n".join(f"def f{i}(x):\n    return x * {i}  # 日本語 {i}" for i in range(120))
    elements = [user("go"), *read("a", "src/a.py", body), user("tail")]
    entries = conv(Api.CHAT, elements)
    counted: list[str] = []

    def spy(text: str) -> int:
        counted.append(text)
        return estimator.text_tokens(text)

    restored = collect(entries, cut_before_last(entries), SETTINGS_BIG, spy,
                       measure=estimator.entry_tokens)
    (message, tokens), = restored.file_counts
    assert message == restored.files[0]["content"] and message.endswith(body)
    assert body not in "".join(counted)  # only the header was counted
    assert _REAL.count(message) <= tokens <= _REAL.count(message) + 16


def test_a_summarized_latest_request_is_quoted_as_the_current_one() -> None:
    # One request, then a long tool loop: the cut summarizes the request itself.
    elements = [user("older: use tabs"), assistant("ok"), user("fix the parser"),
                *read("c1", "a.py", "x = 1"), *read("c2", "b.py", "y = 2")]
    entries = conv(Api.CHAT, elements)
    text = texts(collect(entries, cut_before_last(entries), SETTINGS, count).users)[0]
    assert "--- user message 2 of 2 (their current request) ---\nfix the parser" in text
    assert "--- user message 1 of 2 ---\nolder: use tabs" in text
    assert "The last of them is the user's current request" in text


def test_quoted_messages_are_history_when_a_newer_one_is_kept_raw() -> None:
    elements = [user("older: use tabs"), assistant("ok"), user("fix the parser"),
                assistant("done"), user("now the lexer")]
    entries = conv(Api.CHAT, elements)
    text = texts(collect(entries, cut_before_last(entries), SETTINGS, count).users)[0]
    assert "current request" not in text
    assert "--- user message 2 of 2 ---\nfix the parser" in text
    assert "They are not new requests" in text
