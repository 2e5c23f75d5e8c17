"""An `item_reference` may leave out its `type` (openai-python's `ItemReference`: `type` is
optional): `{"id": "fc_..."}` names a stored item as the typed form does. The proxy reads it as a
reference everywhere the typed one is (pairing, repair, estimate, cutoff), so the output after a
call echoed so is no orphan, and a request it has no other reason to change goes up as sent.
The fake resolves it as OpenAI does."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.conversation import Api, entry_from_responses, reference_id
from proxy.testing.replies import Reply, call
from proxy.testing.responses_rules import item_type
from tests.test_compaction_references_resolved import _main
from tests.test_compaction_item_references import echoing_session
from tests.test_responses_api import MODEL, TOOLS, codex_setup  # noqa: F401


@pytest.mark.parametrize("item, named", [
    ({"id": "fc_1"}, "fc_1"),
    ({"id": "fc_1", "type": None}, "fc_1"),
    ({"type": "item_reference", "id": "fc_1"}, "fc_1"),
    ({"id": "msg_1", "role": "user", "content": "hi"}, None),  # a message: it has a role
    ({"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
     None),
    ({"id": 7}, None),
])
def test_a_reference_is_one_with_or_without_its_type(item: dict[str, Any],
                                                     named: str | None) -> None:
    assert reference_id(entry_from_responses(item)) == named
    assert (item_type(item) == "item_reference") is (named is not None)


@pytest.mark.parametrize("stream", [False, True])
def test_an_output_after_a_typeless_reference_to_its_call_goes_up_as_sent(
        codex_setup, stream: bool) -> None:  # noqa: F811
    fake, _, proxy, client = codex_setup
    fake.script(Reply.tool_calls(call("get_weather", {"city": "Paris"})))
    question = {"role": "user", "content": "Weather in Paris?"}
    first = client.responses.create(model=MODEL, input=[question], store=True, tools=TOOLS,
                                    extra_headers={"x-thread-id": f"typeless-{stream}"})
    made = next(item for item in first.output if item.type == "function_call")
    sent = [question, *({"id": item.id} for item in first.output),  # its reasoning, its call
            {"type": "function_call_output", "call_id": made.call_id, "output": "21C"}]
    fake.script(Reply.text("It is 21C."))
    answer = client.responses.with_raw_response.create(
        model=MODEL, input=sent, store=True, tools=TOOLS, stream=stream,
        extra_headers={"x-thread-id": f"typeless-{stream}"})
    assert answer.headers["x-compaction"] == "none"
    if not stream:
        assert answer.parse().output_text == "It is 21C."
    else:
        assert b"response.completed" in answer.http_response.read()
    assert orjson.loads(_main(fake)[-1].body)["input"] == sent
    line = proxy.requests()[-1]
    assert line["status"] == 200 and "stages" not in line


def _typeless(item: Any) -> dict[str, str]:
    return {"id": item.id}


def test_a_session_echoing_every_item_by_typeless_reference_survives_compaction(
        codex_setup) -> None:  # noqa: F811
    fake, summarizer, proxy, client = codex_setup
    echoing_session(fake, client, 5, _typeless)
    assert summarizer.calls >= 1
    assert all(line["status"] == 200 for line in proxy.requests())
    assert any(item == {"id": item.get("id")} for item in _main(fake)[-1].json["input"])
