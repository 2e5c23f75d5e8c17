"""A Responses client with `store` on echoes answers by `item_reference`, the proxy's own
`/compact` answer too. Upstream never held that item: the reference is left out with the command
(SPEC §8: shown to the user, not model context), or every later turn would be refused."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compaction.manual import strip_exchanges, synthetic_ids
from proxy.conversation import Api
from proxy.testing.replies import Reply
from tests.test_compaction_references_resolved import _main
from tests.test_compaction_support import conv, ids_of, r_assistant, r_user
from tests.test_responses_api import MODEL, codex_setup  # noqa: F401

OURS = synthetic_ids("thread:1").message


def _typed(item_id: str) -> dict[str, str]:
    return {"type": "item_reference", "id": item_id}


def _typeless(item_id: str) -> dict[str, str]:
    return {"id": item_id}


@pytest.mark.parametrize("echo", [_typed, _typeless])
def test_a_reference_to_our_answer_after_the_command_is_stripped(echo) -> None:  # type: ignore[no-untyped-def]
    entries = conv(Api.RESPONSES, [r_user("a"), r_assistant("b", "msg_1"), r_user("/compact"),
                                   echo(OURS), r_user("c")])
    kept, _ = strip_exchanges(entries, ids_of(entries), "/compact")
    assert [e.raw for e in kept] == [r_user("a"), r_assistant("b", "msg_1"), r_user("c")]


def test_a_reference_to_another_item_after_the_command_is_kept() -> None:
    entries = conv(Api.RESPONSES, [r_user("/compact"), _typed("msg_0123"), r_user("c")])
    kept, _ = strip_exchanges(entries, ids_of(entries), "/compact")
    assert [e.raw for e in kept] == [_typed("msg_0123"), r_user("c")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("echo", [_typed, _typeless])
def test_a_thread_echoing_by_reference_goes_on_after_compact(codex_setup, echo,  # noqa: F811
                                                             stream: bool) -> None:
    fake, _, proxy, client = codex_setup
    thread = {"x-thread-id": f"manual-by-reference-{echo.__name__}-{stream}"}
    history: list[Any] = []

    def turn(text: str) -> list[Any]:
        history.append({"role": "user", "content": text})
        if not stream:
            output = client.responses.create(model=MODEL, input=history, store=True,
                                             extra_headers=thread).output
        else:
            with client.responses.stream(model=MODEL, input=history, store=True,
                                         extra_headers=thread) as events:
                output = events.get_final_response().output
        history.extend(echo(item.id) for item in output)
        return output

    for i in range(3):
        fake.script(Reply.text(f"answer {i} " + "words " * 80))
        turn(f"question {i}")
    answer = turn("/compact")
    assert answer[0].id.startswith("msg_compact")
    fake.script(Reply.text("going on"))
    assert turn("go on")[-1].content[0].text == "going on"
    sent = _main(fake)[-1].json["input"]
    assert not any(isinstance(item, dict) and str(item.get("id", "")).startswith("msg_compact")
                   for item in sent)
    assert not any(item.get("content") == "/compact" for item in sent)
    assert all(line["status"] == 200 for line in proxy.requests())
