"""No log line, at debug (the harness's level) and so at info, carries a credential, the text
of a client's message or the text of a summary, whatever way the request went."""

from __future__ import annotations

import httpx
import orjson

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.test_compaction_failures import MODELS, NO_CHEAP, _prefix

SECRET = "sk-CANARYKEY-0123456789abcdef"
TEXT = "CANARYTEXT-the-users-own-words"
FACT_TAG = "CANARYFACT"  # FakeSummarizer copies each FACT line into its summary


def _headers(thread: str) -> dict[str, str]:
    return {"authorization": f"Bearer {SECRET}", "api-key": SECRET, "x-api-key": SECRET,
            "content-type": "application/json", "x-thread-id": thread}


def _chat(messages: list, **extra) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": messages, **extra})


def test_no_credential_message_or_summary_text_reaches_the_log(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    said = [{"role": "user", "content": TEXT}]
    with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
        fake.script(Reply.text("ok"))
        assert client.post("/chat/completions", content=_chat(said),
                           headers=_headers("plain")).status_code == 200
        fake.script(Reply.text("ok"))
        assert client.post("/chat/completions", content=_chat(said, stream=True),
                           headers=_headers("stream")).status_code == 200
        assert client.post("/embeddings", content=orjson.dumps({"model": MODEL, "input": TEXT}),
                           headers=_headers("pt")).status_code in (200, 404)
        assert client.post("/chat/completions", content=TEXT.encode(),
                           headers=_headers("bad")).status_code == 400
        fake.script(Reply.error(400, {"error": {"message": f"refused: {TEXT}",
                                                "type": "invalid_request_error"}}))
        assert client.post("/chat/completions", content=_chat(said),
                           headers=_headers("refused")).status_code == 400
        assert httpx.post(f"{proxy.url}/chat/completions", content=_chat(said),
                          headers=_headers("unrouted"), timeout=10).status_code == 404
        messages, _ = planted_session(200, tag=FACT_TAG)
        messages = [{**m, "content": f"{m['content']} {TEXT}"}
                    if m["role"] == "user" else m for m in messages]
        fake.script(Reply.text("ok"))
        compacted = client.post("/chat/completions", headers=_headers("compacted"),
                                content=_chat(_prefix(messages, 12_600, 14_500)))
        assert compacted.headers["x-compaction"] == "compacted"
    assert summarizer.calls >= 1
    assert proxy.logs.events("compaction_completed")
    assert len(proxy.requests()) == 7
    logged = proxy.logs.text
    assert SECRET not in logged and "CANARYKEY" not in logged
    assert TEXT not in logged and FACT_TAG not in logged
