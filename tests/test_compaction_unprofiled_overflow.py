"""A model without a profile whose real window is below the fallback trigger (SPEC §5, §9).

The proxy learns the window only from the upstream's overflow error, which buys one forced
compaction. The summarizer is then the same model: it cannot take the whole rejected prefix in
one request either, whatever the 100,000-token fallback says. Found replaying recorded
coding-agent conversations against a 32k model without a profile: every summary overflowed, no
compaction ever completed, and from then on every turn failed with the upstream's 400.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import task_then_loop
from tests.conftest import API_KEY

WINDOW = 16_000  # the model's real input window; the proxy has no profile for it


def _twice_the_window(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first request-shaped prefix (ending before an assistant turn) of twice the window:
    a thread moved from a larger model, or a client that sends a long history at once."""
    for k in range(1, len(messages)):
        if (messages[k]["role"] == "assistant"
                and chat_prompt_tokens({"messages": messages[:k]}) > 2 * WINDOW):
            return messages[:k]
    raise AssertionError("the session never grows that long")


def test_an_overflow_of_an_unprofiled_model_is_summarized_within_its_window(make_fake,
                                                                            make_proxy) -> None:
    fake = make_fake(limits={"unprofiled-*": WINDOW})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake)
    # A tool the cheap stages leave alone: the request reaches upstream as large as it was sent.
    request = _twice_the_window(task_then_loop(task_lines=40, steps=60))
    fake.script(Reply.text("next step"))
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                        content=orjson.dumps({"model": "unprofiled-model", "messages": request}),
                        headers={"content-type": "application/json", "x-thread-id": "unprofiled",
                                 "authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "next step"
    refused = proxy.logs.events("summarizer_overflow")
    assert refused and all(e["retry_window"] < 100_000 for e in refused)
    assert summarizer.requests, "a summary was made in chunks the model took"
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert len(main) == 2, "the rejected request, then the compacted retry"
    retried = orjson.loads(main[-1].body)["messages"]
    assert chat_prompt_tokens({"messages": retried}) <= WINDOW
    assert retried[-6:] == request[-6:], "without a profile the last 6 messages stay raw"
    assert retried[0] == request[0] and retried[1]["content"].startswith("Summary of the earlier")
    assert any(request[1]["content"] in m["content"] for m in retried[2:-6]), \
        "the user's current request is restored whole"
    assert [e["forced"] for e in proxy.logs.events("compaction_started")] == [True]
    assert proxy.logs.events("compaction_completed")


def test_an_overflow_the_fallback_tail_cannot_fix_says_to_set_a_profile(make_fake,
                                                                        make_proxy) -> None:
    # The last 6 messages alone are over the model's real window: the forced compaction makes
    # its summary, the retry is refused all the same, and the operator is told what would help.
    window = 3_000
    fake = make_fake(limits={"unprofiled-*": window})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake)
    words = " ".join(f"word{i}" for i in range(700))
    request = [{"role": "system", "content": "You are terse."}]
    for turn in range(5):
        request += [{"role": "user", "content": f"question {turn}: {words}"},
                    {"role": "assistant", "content": f"answer {turn}: {words}"}]
    request.append({"role": "user", "content": "and now?"})
    assert chat_prompt_tokens({"messages": request[-6:]}) > window
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                        content=orjson.dumps({"model": "unprofiled-model", "messages": request}),
                        headers={"content-type": "application/json", "x-thread-id": "tail",
                                 "authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "context_length_exceeded", "the upstream's own"
    failed = [e for e in proxy.logs.events("compaction_failed") if e["stage"] == "overflow_retry"]
    assert len(failed) == 1 and failed[0]["cause"] == "refused_again"
    assert proxy.logs.events("compaction_completed"), "the summary itself was made"
    assert proxy.requests()[-1]["compaction_failed"] == "overflow_retry"
    hint = failed[0]["hint"]
    assert "'unprofiled-model' has no profile" in hint and "last 6 messages" in hint
    assert "100,000 tokens" in hint and "max_input_tokens" in hint


def _overflowing(make_fake, make_proxy, glob: str, profile_window: int, model: str,
                 turns: int) -> Any:
    """A proxy whose profile for `glob` says `profile_window` while the fake refuses over
    3,000 tokens, after one request of `turns` long turns of `model`: refused (400)."""
    fake = make_fake(limits={glob: 3_000})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={glob: {"max_input_tokens": profile_window}})
    words = " ".join(f"word{i}" for i in range(700))
    request = [{"role": "user", "content": f"q{turn}: {words}"} if turn % 2 == 0 else
               {"role": "assistant", "content": f"a{turn}: {words}"} for turn in range(turns)]
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                        content=orjson.dumps({"model": model, "messages": request}),
                        headers={"content-type": "application/json", "x-thread-id": model,
                                 "authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 400
    return proxy


def test_a_profile_larger_than_the_models_window_is_named_when_the_retry_is_refused(make_fake, make_proxy) -> None:
    proxy = _overflowing(make_fake, make_proxy, "small-*", 100_000, "small-model", 11)
    failed = proxy.logs.events("compaction_failed")
    assert [e["cause"] for e in failed] == ["refused_again"]
    assert "below the 100,000 tokens models.small-*.max_input_tokens allows" in failed[0]["hint"]
    assert "has no profile" not in failed[0]["hint"]


def test_a_profile_larger_than_the_window_is_named_when_its_compaction_cannot_fit(
        make_fake, make_proxy) -> None:
    # README's "Try it locally": the fake refuses over 3,000 tokens, the profile says 128,000.
    # The forced compaction's own tail is over the window the refusal named, so no retry goes
    # up; the line names the key all the same.
    proxy = _overflowing(make_fake, make_proxy, "gpt-4o*", 128_000, "gpt-4o", 7)
    failed = [e for e in proxy.logs.events("compaction_failed") if e["stage"] == "overflow_retry"]
    assert len(failed) == 1 and failed[0]["cause"] != "refused_again"
    assert "below the 128,000 tokens models.gpt-4o*.max_input_tokens allows" in failed[0]["hint"]
