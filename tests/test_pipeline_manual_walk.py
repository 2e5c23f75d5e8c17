"""`prepare` walks the user messages for the `/compact` command once: `manual.detect` runs only
when some user message begins with the command, which it must whenever `detect` finds one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.compaction import manual
from proxy.conversation import Api
from proxy.server.pipeline import Pipeline
from proxy.server.request_line import RequestLine
from proxy.threads import ThreadIdentity
from tests.harness import started_pipeline
from tests.test_compaction_support import assistant, conv, system, user

_texts = st.sampled_from(["hi", "/compact", "  /compact keep the API", "/compactly", "x /compact",
                          "/comp", ""])
_messages = st.lists(st.tuples(st.sampled_from(["user", "assistant", "system"]), _texts),
                     min_size=1, max_size=5)
_MAKE = {"user": user, "assistant": assistant, "system": system}


@given(_messages)
def test_a_command_found_is_always_a_command_mentioned(messages: list[tuple[str, str]]) -> None:
    entries = conv(Api.CHAT, [_MAKE[role](text) for role, text in messages])
    assert manual.detect(entries, "/compact") is None or manual.mentioned(entries, "/compact")


@pytest.fixture
async def pipeline(tmp_path: Path) -> Any:
    async with started_pipeline(str(tmp_path)) as made:
        yield made


async def _prepare(pipeline: Pipeline, text: str) -> Any:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    identity = ThreadIdentity("thread-1", "header:x-thread-id", "tenant-1")
    inbound = pipeline.parse(Api.CHAT, body, identity)
    return await pipeline.prepare(inbound, identity, pipeline.settings.upstreams["up"],
                                  RequestLine(None, None, "chat"),
                                  CIMultiDict({"Authorization": "Bearer sk-x"}))


async def test_a_plain_request_never_asks_detect(pipeline: Pipeline,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    detect = manual.detect
    monkeypatch.setattr(manual, "detect", lambda entries, command: asked.append(command)
                        or detect(entries, command))
    prepared = await _prepare(pipeline, "Say hello.")
    assert asked == [] and prepared.answer is None
    prepared = await _prepare(pipeline, "/compact")
    assert asked == ["/compact"] and prepared.answer is not None  # answered by the proxy
