"""A model profile that promises more than the upstream takes (a misconfigured window).

The upstream's overflow buys one forced compaction; when the whole conversation is within the
tail the profile's keep budget keeps raw, nothing can be compacted. The client gets the
upstream's own error; the operator's `compaction_failed` lines must name the profile as too
large, not just say that nothing more could be compacted.
"""

from __future__ import annotations

import httpx
import orjson

from proxy.testing.replies import Reply
from tests.conftest import API_KEY

REAL_WINDOW = 3_000
PROFILE = 128_000


def _loop(turns: int) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "Read the files and fix the bug."}]
    for n in range(turns):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}", "type": "function",
             "function": {"name": "read_file", "arguments": orjson.dumps({"path": f"f{n}.py"}).decode()}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": f"line {n}\n" * 150})
    return messages


def test_an_overflow_below_the_profiles_limit_names_the_profile_as_too_large(make_fake,
                                                                            make_proxy) -> None:
    fake = make_fake(limits={"big-*": REAL_WINDOW})
    proxy = make_proxy(fake, models={"big-*": {"max_input_tokens": PROFILE}})
    fake.script(Reply.text("never sent"))
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                        content=orjson.dumps({"model": "big-model", "messages": _loop(6)}),
                        headers={"content-type": "application/json", "x-thread-id": "big",
                                 "authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "context_length_exceeded", "the upstream's own"
    [failed] = [e for e in proxy.logs.events("compaction_failed") if e["stage"] == "post_check"]
    assert ("below the 128,000 tokens models.big-*.max_input_tokens allows: the model's real "
            "input window is smaller; set the profile to it") in failed["error"], failed["error"]
    [retry] = [e for e in proxy.logs.events("compaction_failed") if e["stage"] == "overflow_retry"]
    assert "models.big-*.max_input_tokens" in retry["error"]
