"""`item_reference`s counted by what they hold, through the proxy with the official client.

The fake upstream keeps each answer's output items per credential and expands a reference into
its item before counting the prompt (usage) and enforcing the model's window, as upstream does.
The proxy relayed those items and records each one's size per tenant (`proxy.item_sizes`):

- an edit of the first message leaves no anchor to use; the references to the older, bigger
  answers still count their items, not the thread's average recent item (a 4x undercount that
  sent a request over the model's window upstream);
- the same references sent under another thread id (a branch) count their items, not 1,000
  tokens each (a 3.6k-token conversation refused as over a 128k window);
- references to items the proxy never relayed are guessed, and a request only those guesses
  put over the limit goes up: upstream, which knows them, decides.
"""

from __future__ import annotations

import random
from typing import Any

import openai
import pytest

from proxy.testing.replies import Reply, call
from proxy.testing.reference_tokens import responses_prompt_tokens
from proxy.testing.stored_items import expand

SMALL = 8_000  # the edit's model window (trigger 6,000)
LARGE = 128_000  # the branch's (trigger 96,000)


def _words(n: int, seed: int) -> str:
    pick = random.Random(seed).choice
    return " ".join(pick(["alpha", "beta", "gamma", "delta", "omega", "sigma"]) for _ in range(n))


def _setup(make_fake, make_proxy, make_client, window: int):  # type: ignore[no-untyped-def]
    fake = make_fake(limits={"small-*": window})
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": window}})
    return fake, proxy, make_client(proxy.base_url)


def _turn(client: openai.OpenAI, fake: Any, history: list[Any], reply: Reply,
          thread: str) -> None:
    """One answer, its items echoed by reference and each call answered."""
    fake.script(reply)
    answer = client.responses.create(model="small-1", input=history, store=True,
                                     extra_headers={"x-thread-id": thread})
    for item in answer.output:
        history.append({"type": "item_reference", "id": item.id})
        if item.type == "function_call":
            history.append({"type": "function_call_output", "call_id": item.call_id,
                            "output": "ok"})


def _agent_history(client: openai.OpenAI, fake: Any) -> list[Any]:
    """Three files written (about 1,500 tokens each), then twenty tiny steps: more answers
    than the thread keeps anchors of (16), the big ones the oldest."""
    history: list[Any] = [{"role": "user", "content": "Please set up the project files."}]
    for n in range(3):
        _turn(client, fake, history, Reply.tool_calls(call(
            "write_file", {"path": f"f{n}.txt", "content": _words(1500, n)})), "edit")
    for _ in range(20):
        _turn(client, fake, history, Reply.tool_calls(call("run", {"cmd": "true"})), "edit")
    return history


def test_an_edit_counts_old_answers_referenced_by_their_own_size(make_fake, make_proxy,
                                                                 make_client) -> None:
    fake, proxy, client = _setup(make_fake, make_proxy, make_client, SMALL)
    history = _agent_history(client, fake)
    # The client edits its first message: no anchor's prefix holds any more.
    history[0] = {"role": "user", "content": "Please set up the project files now."}
    fake.script(Reply.text("Done."))
    client.responses.create(model="small-1", input=history, store=True,
                            extra_headers={"x-thread-id": "edit"})
    line = proxy.requests()[-1]
    assert line["anchor_used"] is False
    # Upstream counted the three files the references stand for (its usage says so).
    assert line["usage_input"] > 4_500
    assert line["tokens_estimate"] >= line["usage_input"]


def test_an_edit_past_the_window_is_never_sent_up_below_it(make_fake, make_proxy,
                                                           make_client) -> None:
    """The same edit pasting a long spec: the request is over the model's window. Counted
    at the recent items' average it went up as 4.5k tokens, was refused as too long, and the
    forced compaction found it "no smaller"; the client got upstream's 400."""
    fake, proxy, client = _setup(make_fake, make_proxy, make_client, SMALL)
    history = _agent_history(client, fake)
    sent = len(fake.requests)
    history[0] = {"role": "user", "content": "Set it up. Spec follows:\n" + _words(3300, 9)}
    fake.script(Reply.text("Done."))
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="small-1", input=history, store=True,
                                extra_headers={"x-thread-id": "edit"})
    over = [q for q in fake.requests[sent:] if q.path == "/v1/responses"]
    resolve = fake.items.resolver(f"Bearer {client.api_key}")
    counts = [responses_prompt_tokens(dict(q.json, input=expand(q.json["input"], resolve)))
              for q in over]
    assert all(count <= SMALL for count in counts), counts
    assert refused.value.code == "context_compaction_insufficient"


def test_a_branch_counts_references_by_their_items_not_a_flat_guess(make_fake, make_proxy,
                                                                    make_client) -> None:
    fake, proxy, client = _setup(make_fake, make_proxy, make_client, LARGE)
    history: list[Any] = [{"role": "system", "content": "You are a coding agent."},
                          {"role": "user", "content": "Fix the failing test."}]
    for n in range(120):
        _turn(client, fake, history, Reply.tool_calls(
            call("shell", {"cmd": f"grep -n foo src/file{n}.py"})), "main")
    # The same history under a new thread id: a branch, a new session.
    fake.script(Reply.text("ok"))
    answer = client.responses.with_raw_response.create(
        model="small-1", input=history, store=True, extra_headers={"x-thread-id": "branch"})
    line = proxy.requests()[-1]
    assert answer.status_code == 200 and line["anchor_used"] is False
    assert line["usage_input"] >= 2_000  # the references expanded
    # Above upstream's count: each reference's own JSON (some 30 tokens) stays in the
    # conservative count beside its item (about 20 here). Refused at 128k before.
    assert line["usage_input"] <= line["tokens_estimate"] < 4 * line["usage_input"]
    assert line.get("tokens_guessed") is None


def test_references_the_proxy_never_relayed_do_not_get_a_request_refused(
        make_fake, make_proxy, make_client) -> None:
    """Tool calls stored upstream by calls that did not pass through this proxy (another
    instance, before a restart), all in the current tool loop, which no compaction cuts: each
    reference is a guess, and together the guesses are over the model's window. Refused
    before as `context_compaction_insufficient`; upstream counts them small and answers."""
    fake, proxy, client = _setup(make_fake, make_proxy, make_client, LARGE)
    direct = make_client(fake.url)
    history: list[Any] = [{"role": "user", "content": "Fix the failing test."}]
    for n in range(130):
        fake.script(Reply.tool_calls(call("shell", {"cmd": f"grep -n foo src/file{n}.py"})))
        item = direct.responses.create(model="small-1", input="step", store=True).output[0]
        history += [{"type": "item_reference", "id": item.id},
                    {"type": "function_call_output", "call_id": item.call_id, "output": "ok"}]
    fake.script(Reply.text("Finished."))
    answer = client.responses.with_raw_response.create(
        model="small-1", input=history, store=True, extra_headers={"x-thread-id": "lost"})
    line = proxy.requests()[-1]
    assert answer.status_code == 200, answer.text
    assert line["tokens_estimate"] > LARGE and line["tokens_guessed"] > LARGE // 2
    assert line["compaction_degraded"] == "post_check"
    assert line["usage_input"] < 10_000
