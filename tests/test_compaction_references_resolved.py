"""A `store: true` Responses session that echoes every earlier answer item by `item_reference`
(reasoning, messages and tool calls alike), through the proxy with the official client, against
a fake that resolves the references as OpenAI does (`proxy.testing.stored_items`): upstream
counts the referenced items' content and refuses an id it does not hold. The session keeps
working across a compaction, and the proxy's estimate never falls below upstream's count."""

from __future__ import annotations

from typing import Any

from proxy.compaction.apply import SUMMARY_HEADER
from proxy.testing.reference_tokens import responses_prompt_tokens
from proxy.testing.summarizer import is_summarizer_request
from tests.test_compaction_item_references import echoing_session
from tests.test_responses_api import codex_setup  # noqa: F401


def _reference(item: Any) -> dict[str, str]:
    return {"type": "item_reference", "id": item.id}


def _main(fake) -> list[Any]:  # type: ignore[no-untyped-def]
    return [r for r in fake.requests if r.path.endswith("/responses")
            and not is_summarizer_request(r.json)]


def _summarized(body: dict[str, Any]) -> bool:
    return any(isinstance(part, dict) and part.get("text", "").startswith(SUMMARY_HEADER)
               for item in body.get("input", []) if item.get("type") == "message"
               for part in item.get("content") or [] if isinstance(item.get("content"), list))


def test_a_session_echoing_every_item_by_reference_survives_compaction(codex_setup) -> None:  # noqa: F811
    fake, summarizer, proxy, client = codex_setup
    usages = echoing_session(fake, client, 5, _reference)
    assert all(usage is not None for usage in usages)
    counted = [usage.input_tokens for usage in usages]
    lines = [line for line in proxy.requests() if line.get("status") is not None]
    assert summarizer.calls >= 1
    assert all(line["status"] == 200 for line in lines)
    sent = [r.json for r in _main(fake)]
    after = [body for body in sent if _summarized(body)]
    assert after, "no request went upstream compacted"
    # References survive in the kept tail, and upstream resolved them: it answered, and
    # counted more than the references' own JSON.
    assert any(item.get("type") == "item_reference" for item in after[-1]["input"])
    assert counted[-1] > responses_prompt_tokens(after[-1]) + 100
    estimates = [line["tokens_estimate"] for line in lines if "tokens_estimate" in line]
    assert len(estimates) == len(counted)
    assert all(e >= c for e, c in zip(estimates, counted, strict=True)), \
        [(e, c) for e, c in zip(estimates, counted, strict=True) if e < c]
    # The projection a compaction sends is estimated as its post-check measured it: a reference
    # in the kept tail to an item the proxy relayed counts as that answer's output and reasoning
    # (a kept anchor's), not 1,000 tokens (1.6-1.7 times upstream's count here when the build
    # after the summary forgot the anchors) nor the thread's average answer item (1.22-1.25
    # times: this session's tool calls are far smaller than its replies). 1.049-1.055 measured.
    compacted = [(line["tokens_estimate"], line["usage_input"]) for line in lines
                 if line.get("compaction") == "compacted"]
    assert compacted and all(e <= 1.1 * c for e, c in compacted), compacted
