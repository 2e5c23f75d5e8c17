"""A client's `type` (of an item or a content part) may be any JSON value: a list or an object
is unhashable, and a set lookup on it raises. Such a body must go through the pipeline like any
odd field, never a 500. Found by the HTTP-edge fuzzer once the server-item rule had merged."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.conftest import API_KEY

ODD_TYPES = [["web_search_call"], {"kind": "thinking"}]

BODIES = {
    # A reasoning item that no item it produced follows: repair drops it, and asks of the
    # next item whether its id is required.
    "responses-item-after-reasoning": ("/responses", lambda odd: {"model": "gpt-4o", "input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": odd, "id": "ws_1"},
        {"role": "user", "content": "again"}]}),
    "responses-output-type": ("/responses", lambda odd: {"model": "gpt-4o", "input": [
        {"role": "user", "content": "hi"}, {"type": odd, "call_id": "c1", "output": "x"}]}),
    "chat-content-part-type": ("/chat/completions", lambda odd: {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": odd, "text": "t"}]},
        {"role": "user", "content": [{"type": odd, "text": "again"}]}]}),
}


@pytest.mark.parametrize("odd", ODD_TYPES, ids=["list", "object"])
@pytest.mark.parametrize("case", sorted(BODIES))
def test_an_unhashable_type_is_never_a_500(make_fake, make_proxy, case: str, odd) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    path, body = BODIES[case]
    for turn in range(2):  # the second turn takes the delta parse and the thread's state
        answer = httpx.post(f"{proxy.base_url}{path}", timeout=30, content=orjson.dumps(body(odd)),
                            headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": case})
        assert answer.status_code != 500, (turn, answer.text)
    assert not proxy.logs.events("unhandled_error")
