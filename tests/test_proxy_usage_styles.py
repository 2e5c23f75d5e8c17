"""What the proxy records from each provider's usage shape (PROTOCOL.md §5, §8.5), end to end,
streamed and not, and a mid-stream error frame (§1.3, §8.6) reaching the client as it came.

The expected numbers come from the fake's own token units run through a fresh prompt cache, not
from the usage body the proxy reads: the normalized `usage_input` is the whole prompt and
`usage_cached` the cache reads in every shape (Anthropic's additive counters, LiteLLM's summed
`prompt_tokens`, DeepSeek's hit/miss, OpenRouter's cost fields)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from proxy.testing.prompt_units import PromptUnits, prompt_tokens
from proxy.testing.replies import SERVER_ERROR, Reply
from proxy.testing.usage import USAGE_STYLES, PromptCache
from tests.conftest import API_KEY

WORDS = " ".join(f"word{i}" for i in range(1500))  # past the cache's 1,024-token minimum


def _post(proxy, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "usage"})


def _expected(bodies: list[dict[str, Any]]) -> tuple[int, int]:
    """(prompt, cached) of the last body, as a fresh cache sees the sequence."""
    units, cache, cached = PromptUnits(), PromptCache(), 0
    for body in bodies:
        cached, _ = cache.lookup(body["model"], units.chat(body))
    return prompt_tokens(units.chat(bodies[-1])), cached


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("style", USAGE_STYLES)
def test_the_recorded_usage_is_the_whole_prompt_and_its_cache_reads(
        make_fake, make_proxy, style: str, stream: bool) -> None:
    fake = make_fake(usage_style=style)
    proxy = make_proxy(fake)
    first = [{"role": "system", "content": WORDS}, {"role": "user", "content": "hi"}]
    second = first + [{"role": "assistant", "content": "hello"},
                      {"role": "user", "content": "go on"}]
    for messages in (first, second):
        fake.script(Reply.text("four words of answer"))
        answer = _post(proxy, {"model": "gpt-4o", "messages": messages, "stream": stream})
        assert answer.status_code == 200, answer.text
    prompt, cached = _expected([r.json for r in fake.requests])
    assert cached > 0, "the second request must read the first one's prefix"
    line = proxy.requests()[-1]
    assert (line["usage_input"], line["usage_cached"]) == (prompt, cached)
    assert line["usage_output"] > 0
    if stream and style != "openrouter":
        # The client asked for no usage chunk: the one the proxy asked for is not shown.
        assert b'"usage":{' not in answer.content


def test_a_mid_stream_error_frame_is_relayed_as_it_came(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    fake.script(Reply.stream_error(after=2))
    answer = _post(proxy, {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                           "stream": True})
    assert answer.status_code == 200  # the stream had begun: the error is a frame in it
    frames = [f for f in answer.content.split(b"\n\n") if f.startswith(b"data: ")]
    assert orjson.loads(frames[-1][6:]) == SERVER_ERROR
    assert len(frames) == 3 and b"[DONE]" not in answer.content
    line = proxy.requests()[-1]
    assert line["status"] == 200 and "usage_input" not in line
    # The line says the stream ended in an error, by its code and type, never its message.
    assert line["upstream_error"] == "error frame: server_error"
