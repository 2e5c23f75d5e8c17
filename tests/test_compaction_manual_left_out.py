"""An earlier `/compact` exchange is left out of later projections (README, "Manual
compaction"): that changes what goes upstream, so the answer's `x-compaction` must say
`applied`, never `none` ("sent as the client sent it"). Found by the HTTP-edge fuzzer."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.conftest import API_KEY

TURNS = {
    "chat": ("/chat/completions", "messages", lambda text: {"role": "user", "content": text}),
    "responses": ("/responses", "input", lambda text: {"role": "user", "content": text}),
}


@pytest.mark.parametrize("api", sorted(TURNS))
def test_a_left_out_command_marks_the_answer_applied(make_fake, make_proxy, api: str) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    path, key, user = TURNS[api]
    elements = [user("Say hello."), user("/compact"), user("Say hello again.")]
    answer = httpx.post(f"{proxy.base_url}{path}", timeout=30,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": f"left-{api}"},
                        content=orjson.dumps({"model": "gpt-4o", key: elements}))
    assert answer.status_code == 200, answer.text
    sent = orjson.loads(fake.last().body)[key]
    assert sent == [elements[0], elements[2]]
    assert answer.headers["x-compaction"] == "applied"
