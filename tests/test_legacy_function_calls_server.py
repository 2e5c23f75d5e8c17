"""A client of the legacy function-calling API through the proxy, with the real `openai`
client: its old run of `read_file` / `grep` calls (each a `function_call` answered by a
`role: "function"` message) reaches the model collapsed (SPEC §4.1), and after a summary the
file it read through one comes back (SPEC §5). Every upstream request stays in the legacy form
the fake checks (each result right after its call, named alike), and the proxy's own id for a
legacy call never leaves it."""

from __future__ import annotations

import json
from typing import Any

import openai
import orjson
import pytest

from proxy.core.legacy_calls import LEGACY_CALL_ID
from proxy.testing.replies import Reply
from proxy.testing.rules import check_chat
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.client_shapes import FUNCTIONS
from tests.conftest import API_KEY

LIMIT = 16_000
MODEL = "small-coder"
THREAD = {"x-thread-id": "legacy-reads"}
APP = "".join(f"def handler_{i}(request):\n    return respond(request, {i})\n" for i in range(40))
DB = "".join(f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, name TEXT);\n" for i in range(50))


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "function_call": {"name": name, "arguments": json.dumps(arguments)}}


def _result(name: str, content: str) -> dict[str, Any]:
    return {"role": "function", "name": name, "content": content}


def _notes(n: int) -> list[dict[str, Any]]:
    """Long assistant analysis after the reads: what pushes them out of the recent window."""
    return [{"role": "assistant", "content": f"Analysis part {k}: " + "the handler returns early " * 150}
            for k in range(n)]


def _session(notes: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Find why the handlers fail."},
            _call("read_file", path="src/app.py"), _result("read_file", APP),
            _call("grep", pattern="respond", path="src"),
            _result("grep", "src/app.py:2: return respond(request, 0)\n" * 20),
            _call("read_file", path="src/db.sql"), _result("read_file", DB),
            _call("list_dir", path="src"), _result("list_dir", "app.py\ndb.sql\n"),
            *_notes(notes), {"role": "user", "content": "Go on."}]


@pytest.fixture
def small(make_fake, make_proxy):
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=30)
    yield fake, proxy, client
    client.close()


def _ask(fake, client, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send `messages`, return what the model received (the main request, not a summary's)."""
    fake.script(Reply.text("Looking further."))
    answer = client.chat.completions.create(model=MODEL, messages=messages, functions=FUNCTIONS,
                                            extra_headers=THREAD)
    assert answer.choices[0].message.content == "Looking further."
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    return orjson.loads(main[-1].body)["messages"]


def test_legacy_reads_collapse_then_come_back_after_a_summary(small) -> None:
    fake, proxy, client = small
    messages = _session(notes=3)
    sent = _ask(fake, client, messages)
    assert not proxy.logs.events("compaction_completed")
    records = [m["content"] for m in sent if "earlier exploration call" in str(m.get("content"))]
    assert len(records) == 1
    assert '- read_file {"path":"src/app.py"} -> ok, 81 lines' in records[0]
    assert '- grep {"pattern":"respond","path":"src"} -> ok' in records[0]
    assert '- read_file {"path":"src/db.sql"} -> ok' in records[0]
    assert sent[3:5] == messages[8:10]  # the run's last call and its result, as sent
    assert LEGACY_CALL_ID not in json.dumps(sent)
    assert check_chat({"model": MODEL, "messages": sent}) is None

    grown = [*messages, *_notes(18), {"role": "user", "content": "Now fix it."}]
    sent = _ask(fake, client, grown)
    assert proxy.logs.events("compaction_completed"), "the thread never compacted"
    restored = [m["content"] for m in sent
                if str(m.get("content")).startswith("Restored after context compaction: the latest")]
    assert any("file src/db.sql" in text and "with read_file" in text and DB in text
               for text in restored), restored
    assert any("file src/app.py" in text and APP in text for text in restored), restored
    assert LEGACY_CALL_ID not in json.dumps(sent)
    assert check_chat({"model": MODEL, "messages": sent}) is None

