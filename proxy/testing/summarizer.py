"""A fake summarizer for the fake upstream: recognises the proxy's summarizer requests and answers.

It is faithful in one checkable way: every line of the material that contains `FACT:` comes
back in the summary (from the transcript and from a summary-so-far alike), so tests can plant
facts early in a session and check they survive any number of re-compactions. It can also be
told to fail, to cut its answer short, or to stall, like a real summarizer on a bad day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy.testing.fake_upstream import FakeUpstream, Recorded
from proxy.testing.replies import Reply

SIGNATURE = "You write the working memory of a long-running assistant conversation."
_FACT = re.compile(r"FACT:[^\n\"\\]*")


def is_summarizer_request(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    if isinstance(body.get("instructions"), str):
        return body["instructions"].startswith(SIGNATURE)
    messages = body.get("messages")
    return (isinstance(messages, list) and bool(messages) and isinstance(messages[0], dict)
            and isinstance(messages[0].get("content"), str)
            and messages[0]["content"].startswith(SIGNATURE))


def material(body: dict[str, Any]) -> str:
    if isinstance(body.get("messages"), list):
        return "\n".join(str(m.get("content", "")) for m in body["messages"][1:])
    texts = []
    for item in body.get("input") or []:
        for part in item.get("content") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return "\n".join(texts)


@dataclass
class FakeSummarizer:
    """Install with `FakeSummarizer.install(fake)`; counts and records what it was asked."""

    fail: int = 0  # answer the next N requests with HTTP 500
    cut_short: int = 0  # answer the next N with finish_reason "length"
    hang: int = 0  # never answer the next N
    padding: int = 0  # extra words in each summary (to make one too big)
    requests: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def install(cls, fake: FakeUpstream, **options: Any) -> FakeSummarizer:
        summarizer = cls(**options)
        previous = fake.responder

        def respond(recorded: Recorded) -> Reply | None:
            if is_summarizer_request(recorded.json):
                return summarizer.answer(recorded.json)
            return previous(recorded) if previous is not None else None

        fake.responder = respond
        return summarizer

    @property
    def calls(self) -> int:
        return len(self.requests)

    def answer(self, body: dict[str, Any]) -> Reply:
        self.requests.append(body)
        if self.hang:
            self.hang -= 1
            return Reply.hang()
        if self.fail:
            self.fail -= 1
            return Reply.error(500, {"error": {"message": "summarizer overloaded",
                                               "type": "server_error", "param": None,
                                               "code": None}})
        facts = sorted(set(m.strip() for m in _FACT.findall(material(body))))
        text = "## Facts to keep\n" + ("\n".join(f"- {f}" for f in facts) or "- none")
        text += "\n## Status\n- Work continues." + " padding" * self.padding
        if self.cut_short:
            self.cut_short -= 1
            return Reply.length(text)
        return Reply.text(text)
