"""The summary call's output cap, named as the summarizer model takes it: OpenAI's reasoning
models (o1, o3, o4-mini, gpt-5...) refuse `max_tokens` with 400 `unsupported_parameter` ("Use
'max_completion_tokens' instead."), so every compaction failed for such a summarizer unless the
client itself had sent `max_completion_tokens`. A name that does not tell (an Azure deployment)
gets the newer key on one retry that refusal buys, and from then on."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from aiohttp import web

from proxy.compaction.summarizer import _output_key
from proxy.conversation import Api
from proxy.testing.summarizer import is_summarizer_request
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

REFUSAL = {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this "
                                "model. Use 'max_completion_tokens' instead.",
                     "type": "invalid_request_error", "param": "max_tokens",
                     "code": "unsupported_parameter"}}


@pytest.mark.parametrize("model, doc, key", [
    ("gpt-5-mini", {}, "max_completion_tokens"),
    ("o3", {"max_tokens": 10}, "max_completion_tokens"),
    ("openai/o4-mini", None, "max_completion_tokens"),
    ("gpt-4o-mini", {}, "max_tokens"),
    ("llama-3.1-70b", {"max_completion_tokens": 10}, "max_completion_tokens"),
])
def test_the_key_follows_the_summarizer_model(model: str, doc: Any, key: str) -> None:
    assert _output_key(Api.CHAT, doc, model) == key
    assert _output_key(Api.RESPONSES, doc, model) == "max_output_tokens"


def _reasoning_summarizer(seen: list[dict[str, Any]]) -> Any:
    async def answer(request: web.Request) -> web.Response:
        body = await request.json()
        if not is_summarizer_request(body):
            return web.json_response({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                "model": body["model"], "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}})
        seen.append(body)
        if "max_tokens" in body:
            return web.json_response(REFUSAL, status=400)
        return web.json_response({
            "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "<summary>What happened so far.</summary>"}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 9, "total_tokens": 909}})
    return answer


def _turns(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"turn {i} " + "lorem ipsum dolor sit amet " * 60} for i in range(n)]


@pytest.mark.parametrize("summarizer, refused", [("gpt-5-mini", 0), ("my-deployment", 1)])
def test_a_reasoning_summarizer_compacts(make_upstream, make_proxy, summarizer: str,  # noqa: F811
                                         refused: int) -> None:
    seen: list[dict[str, Any]] = []
    proxy = make_proxy(make_upstream(_reasoning_summarizer(seen)).url,
                       models={"small-*": {"max_input_tokens": 4_000}},
                       compaction={"summarizer": {"model": summarizer}})
    for thread in ("one", "two"):
        answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                            headers={"authorization": "Bearer k", "x-thread-id": thread},
                            json={"model": "small-1", "max_tokens": 50, "messages": _turns(21)})
        assert answer.status_code == 200 and answer.headers["x-compaction"] == "compacted"
    assert ["max_tokens" in body for body in seen] == [True] * refused + [False] * 2
    assert all(body["max_completion_tokens"] == 4096 for body in seen if "max_tokens" not in body)
    assert proxy.logs.events("compaction_failed") == []
