"""A conversation with a pdfTeX-style PDF (pages in object streams) compacts before the model's
limit, through the real proxy and the official client.

The audit's case: some 25,000 tokens of conversation and a 17-page PDF against a 48,000-token
window (trigger 36,000). Its pages unseen, the PDF was counted by its size as one page: the
proxy estimated the request under its trigger and sent it, the upstream (which renders every
page) refused it with `context_length_exceeded`, and only the overflow retry rescued it after a
refused call. Counted by its pages, the request is over the trigger and compacted first.
"""

from __future__ import annotations

from typing import Any

import openai

from proxy.testing import reference_tokens
from proxy.testing.replies import Reply
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.conftest import API_KEY
from tests.media_samples import b64, packed_pdf

LIMIT = 48_000
MODEL = "small-docs"


def with_a_pdf(pages: int) -> list[dict[str, Any]]:
    """A coding session of 24,000 to 27,000 tokens whose last user message attaches a PDF."""
    messages = coding_session(400, seed=3)
    history = next(messages[:k] for k in range(1, len(messages))
                   if messages[k]["role"] == "assistant"
                   and 24_000 <= reference_tokens.chat_prompt_tokens({"messages": messages[:k]})
                   <= 27_000)
    attachment = {"type": "file", "file": {"filename": "spec.pdf", "file_data":
                                           "data:application/pdf;base64," + b64(packed_pdf(pages))}}
    question = {"type": "text", "text": f"{history[-1]['content']}\nNow check this spec."}
    return [*history[:-1], {"role": "user", "content": [question, attachment]}]


def test_a_packed_pdf_is_compacted_for_before_the_upstream_refuses_it(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    fake.script(Reply.text("The spec checks out."))
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    messages = with_a_pdf(17)
    sent = reference_tokens.chat_prompt_tokens({"model": MODEL, "messages": messages})
    assert sent > LIMIT  # the upstream's own count: the request as sent does not fit

    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0,
                       timeout=60) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, extra_headers={"x-thread-id": "spec"})

    assert raw.status_code == 200 and raw.headers["x-compaction"] == "compacted"
    assert raw.parse().choices[0].message.content == "The spec checks out."
    assert proxy.logs.events("upstream_retry") == [], "the upstream refused it first"
    assert len(proxy.logs.events("compaction_completed")) == 1
    [answered] = [r for r in fake.requests
                  if r.path.endswith("/chat/completions") and not is_summarizer_request(r.json)]
    assert reference_tokens.chat_prompt_tokens(answered.json) <= LIMIT
    assert answered.json["messages"][-1] == messages[-1]  # the PDF went up as sent
