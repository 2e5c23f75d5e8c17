"""An `item_reference` weighs the item it stands for where a cut or a window is placed by
tokens (`anchors.with_references`). Measured by its own few tokens of JSON, a kept tail of
references held a context's worth of stored answers: a thread echoing its answers by reference
was never compacted below the trigger and got `context_compaction_insufficient` on every turn,
where the same thread echoed inline compacted and went on."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.anchors import with_references
from proxy.conversation import Api, entry_from_chat, entry_from_responses
from proxy.item_sizes import ItemSizes
from proxy.records import Anchor
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from proxy.tokens.rules import REFERENCED_ITEM


def _anchor(answer: list[str], output: int, reasoning: int = 0,
            reasoning_ids: tuple[str, ...] = ()) -> Anchor:
    digests = tuple(" ".join(("d" * 8, named, *(reasoning_ids if i == 0 else ())))
                    for i, named in enumerate(answer))
    return Anchor(digests, 1, "p", 100, output, 0, reasoning)


def _entries(*items: Any) -> tuple[Any, ...]:
    return tuple(entry_from_responses(item) for item in items)


def test_lists_without_references_are_handed_back_as_they_are() -> None:
    sizes = [5, 7]
    chat = (entry_from_chat({"role": "user", "content": "a"}),
            entry_from_chat({"role": "assistant", "content": "b"}))
    assert with_references(chat, sizes, ()) is sizes
    plain = _entries({"role": "user", "content": "a"}, {"type": "message", "role": "assistant",
                                                        "content": "b", "id": "msg_1"})
    assert with_references(plain, sizes, ()) is sizes


def test_a_reference_weighs_its_share_of_the_answer_that_made_it() -> None:
    anchors = (_anchor(["msg_new"], 300), _anchor(["fc_a", "msg_b"], 90, 40, ("rs_b",)))
    entries = _entries({"role": "user", "content": "q"}, {"type": "item_reference", "id": "rs_b"},
                       {"id": "fc_a"}, {"type": "item_reference", "id": "msg_b"},
                       {"type": "item_reference", "id": "msg_new"},
                       {"type": "item_reference", "id": "msg_unknown"})
    sizes = [10, 4, 3, 4, 4, 4]
    assert with_references(entries, sizes, anchors) == [10, 4 + 40, 3 + 45, 4 + 45, 4 + 300,
                                                        4 + REFERENCED_ITEM]
    # A recorded size comes first; an unknown item weighs the record's guess.
    record = ItemSizes()
    record.record("tenant", [("msg_new", 120), ("fc_big", 2_000)])
    assert with_references(entries, sizes, anchors, record.of("tenant")) == [
        10, 4 + 40, 3 + 45, 4 + 45, 4 + 120, 4 + 2_000]
    assert with_references(entries, sizes, ())[1:] == [s + REFERENCED_ITEM for s in sizes[1:]]
    assert sizes == [10, 4, 3, 4, 4, 4]


LIMIT = 4_000
MODELS = {"small-*": {"max_input_tokens": LIMIT}}


def _reference(item: Any) -> dict[str, str]:
    return {"type": "item_reference", "id": item.id}


def _inline(item: Any) -> dict[str, Any]:
    return item.model_dump(exclude_none=True, mode="json")


@pytest.mark.parametrize("echo", [_reference, _inline])
def test_a_thread_echoing_its_answers_by_reference_compacts_and_goes_on(
        make_fake, make_proxy, make_client, echo) -> None:  # type: ignore[no-untyped-def]
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    # Room for a long summary leaves the kept tail a small share of the trigger (`tail_cap`).
    proxy = make_proxy(fake, models=MODELS, compaction={"summarizer": {"max_output_tokens": 1000}})
    client = make_client(proxy.base_url)
    history: list[Any] = []
    for turn in range(16):
        history.append({"role": "user", "content": f"question {turn}"})
        fake.script(Reply.text(f"answer {turn}: " + "explanation words here " * 150))
        answer = client.responses.create(model="small-model", input=history, store=True,
                                         extra_headers={"x-thread-id": f"refs-{echo.__name__}"})
        history.extend(echo(item) for item in answer.output)
    lines = proxy.requests()
    assert all(line["status"] == 200 for line in lines), [line.get("error") for line in lines]
    assert summarizer.calls >= 1
    assert any(line.get("compaction") == "compacted" for line in lines)
