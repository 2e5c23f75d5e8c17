"""Manual /compact on threads that a summary cannot shrink, or that are short (found by replaying
recorded coding-agent conversations through the real server).

The data is inline and small: the shapes of those conversations (one long task statement from
the user, then a loop of short tool calls), not the recordings themselves.
"""

from __future__ import annotations

from typing import Any

from proxy.compaction.manual import MARKER
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request

MODEL = "audit-model"
WINDOW = 16_000
MODELS = {"audit-*": {"max_input_tokens": WINDOW}}

# A SWE-bench-style task statement (~900 tokens): the one user message of the whole thread.
TASK = ("We're currently solving the following issue within our repository. Here's the issue "
        "text:\nISSUE:\nQ(...) & Exists(...) raises a TypeError, while Exists(...) & Q(...) "
        "works.\n" + "".join(f"  File \"django/db/models/query_utils.py\", line {70 + n}, in "
                             f"_combine\n    raise TypeError(other)  # frame {n}\n"
                             for n in range(40)))


def _short_thread() -> list[dict[str, Any]]:
    """The task, two short steps, then two long outputs: the kept tail is the long outputs,
    so a summary can only replace the task (restored verbatim) and two short steps."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a "
                                      "computer shell to solve programming tasks."},
        {"role": "user", "content": TASK}]
    for n in range(4):
        call = f"call_{n}"
        messages += [
            {"role": "assistant", "content": f"Step {n}: let me look.",
             "tool_calls": [{"id": call, "type": "function",
                             "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
            {"role": "tool", "tool_call_id": call,
             "content": "<returncode>0</returncode>\n" + f"file_{n}.py\n" * (4 if n < 2 else 130)}]
    return messages


def _main_requests(fake: Any) -> list[Any]:
    return [r for r in fake.requests if not is_summarizer_request(r.json)]


def test_manual_compact_of_a_thread_far_below_the_trigger_is_answered_not_refused(
        make_fake, make_proxy, make_client) -> None:
    """A summary cannot shrink a thread that is mostly the user's own (restored) task: that
    `/compact` is answered and leaves the thread as it was, instead of a 400 asking for a new
    thread the conversation does not need (it is far below the trigger)."""
    fake = make_fake(limits={"audit-*": WINDOW})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    client = make_client(proxy.base_url)
    headers = {"x-thread-id": "audit-short"}
    command = [*_short_thread(), {"role": "user", "content": "/compact"}]

    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=command,
                                                           extra_headers=headers)
    assert raw.status_code == 200
    text = raw.parse().choices[0].message.content
    assert text.startswith(MARKER) and "no smaller" in text and "new thread" not in text
    assert raw.headers["x-compaction"] == "none"
    assert summarizer.calls == 1 and not _main_requests(fake)
    assert proxy.requests()[-1]["compaction_failed"] == "post_check"

    # The thread goes on untouched: no checkpoint, the client's messages as they were.
    follow = [*command, {"role": "assistant", "content": text},
              {"role": "user", "content": "Please continue."}]
    fake.script(Reply.text("continuing"))
    client.chat.completions.create(model=MODEL, messages=follow, extra_headers=headers)
    assert _main_requests(fake)[-1].json["messages"] == [*_short_thread(), follow[-1]]


def test_manual_compact_of_a_fresh_short_thread_does_not_speak_of_a_last_compaction(
        make_fake, make_proxy, make_client) -> None:
    """Everything fits in the kept tail and the thread was never compacted: the answer says
    that, not that it 'has not grown enough since the last compaction'."""
    fake = make_fake(limits={"audit-*": WINDOW})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    client = make_client(proxy.base_url)
    command = [*_short_thread()[:4], {"role": "user", "content": "/compact"}]
    answer = client.chat.completions.create(model=MODEL, messages=command,
                                            extra_headers={"x-thread-id": "audit-fresh"})
    text = answer.choices[0].message.content
    assert text.startswith(MARKER) and "last compaction" not in text
    assert "verbatim" in text and summarizer.calls == 0
