"""Thread state through the proxy: estimates and anchors, restarts, hostile ids, tenants, CLI."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.services import SERVICES
from proxy.testing.replies import Reply, call
from tests.conftest import API_KEY
from tests.harness import counted_proxy  # noqa: F401 - the fixture, as `proxy`
from tests.process import ProxyProcess, assert_sound_database, cli, write_config


SYSTEM = {"role": "system", "content": "You are a careful coding agent."}


def _post(proxy_url: str, body: dict[str, Any], thread: str | None = "t1",
          key: str = API_KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    if thread is not None:
        headers["x-thread-id"] = thread
    return httpx.post(f"{proxy_url}/chat/completions", json=body, headers=headers, timeout=20)


def _turns(proxy, fake, thread: str = "t1", key: str = API_KEY) -> list[httpx.Response]:
    """Two turns: the second echoes the first answer back, so an anchor can apply."""
    fake.script(Reply.text("First answer, about the parser."), Reply.text("Second answer."))
    messages = [SYSTEM, {"role": "user", "content": "Explain the parser."}]
    first = _post(proxy.base_url, {"model": "gpt-4o", "messages": messages}, thread, key)
    echo = first.json()["choices"][0]["message"]
    messages += [echo, {"role": "user", "content": "And the lexer?"}]
    second = _post(proxy.base_url, {"model": "gpt-4o", "messages": messages}, thread, key)
    return [first, second]


def test_estimate_header_and_anchor_on_the_next_turn(proxy, fake) -> None:
    first, second = _turns(proxy, fake)
    assert int(first.headers["x-context-tokens"]) > 0
    assert first.headers["x-compaction"] == "none"
    lines = proxy.requests()
    assert lines[0]["anchor_used"] is False and lines[1]["anchor_used"] is True
    assert lines[1]["tokens_estimate"] == int(second.headers["x-context-tokens"])
    assert "cl100k_base" in lines[1]["tokenizer"] or "o200k_base" in lines[1]["tokenizer"]
    reported = fake.last().json  # the fake's own count of the second prompt
    assert lines[1]["tokens_estimate"] >= second.json()["usage"]["prompt_tokens"]
    assert reported["messages"][2]["content"] == "First answer, about the parser."


def test_streamed_answers_anchor_with_and_without_client_usage(proxy, fake, make_client) -> None:
    fake.script(Reply.tool_calls(call("read_file", {"path": "src/lexer.py"})), Reply.text("ok"),
                Reply.text("done"))
    client = make_client(proxy.base_url)
    headers = {"x-thread-id": "streamed"}
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Read the lexer."}]
    stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                            extra_headers=headers)
    chunks = list(stream)
    assert all(chunk.usage is None for chunk in chunks), "the hidden usage chunk leaked"
    calls = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            entry = calls.setdefault(delta.index, {"id": delta.id, "name": "", "arguments": ""})
            entry["name"] += delta.function.name or ""
            entry["arguments"] += delta.function.arguments or ""
    call_ = calls[0]
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call_["id"], "type": "function",
         "function": {"name": call_["name"], "arguments": call_["arguments"]}}]})
    messages.append({"role": "tool", "tool_call_id": call_["id"], "content": "def lex(): ..."})
    stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_headers=headers)
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Thanks"}]
    client.chat.completions.create(model="gpt-4o", messages=messages, extra_headers=headers)
    lines = proxy.requests()
    assert [line["anchor_used"] for line in lines] == [False, True, True]
    assert lines[0].get("usage_chunk_hidden") is True


def test_anchor_is_not_used_after_the_projection_changed(proxy, fake) -> None:
    _turns(proxy, fake)
    fake.script(Reply.text("Third."))
    edited = [SYSTEM, {"role": "user", "content": "Explain the parser, in detail."},
              {"role": "assistant", "content": "First answer, about the parser."},
              {"role": "user", "content": "And the lexer?"}]
    _post(proxy.base_url, {"model": "gpt-4o", "messages": edited})
    assert proxy.requests()[-1]["anchor_used"] is False


def test_two_tenants_with_one_thread_id_never_share_state(proxy, fake) -> None:
    _turns(proxy, fake, thread="shared", key="sk-tenant-one-000000")
    fake.script(Reply.text("other tenant"))
    messages = [SYSTEM, {"role": "user", "content": "Explain the parser."},
                {"role": "assistant", "content": "First answer, about the parser."},
                {"role": "user", "content": "And the lexer?"}]
    _post(proxy.base_url, {"model": "gpt-4o", "messages": messages}, "shared", "sk-tenant-two-1111")
    lines = proxy.requests()
    assert lines[1]["anchor_used"] is True
    assert lines[2]["anchor_used"] is False, "tenant two used tenant one's anchor"
    assert lines[1]["tenant"] != lines[2]["tenant"]


def _raw_request(port: int, thread_header: bytes, body: bytes) -> bytes:
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\nAuthorization: Bearer " + API_KEY.encode() +
               b"\r\nX-Thread-Id: " + thread_header + b"\r\nContent-Length: " +
               str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_hostile_thread_ids_are_safe(proxy, fake, tmp_path: Path) -> None:
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    hostile = [b"A" * 10_000, b"../../../etc/passwd", b"..%2F..%2Fx", b"\xff\xfe\x80 bad utf8",
               "线程-🧵-ünïcode".encode(), b"nul\x00inside", b"~deadbeef", b"CON"]
    for thread in hostile:
        answer = _raw_request(proxy.port, thread, body)
        status = int(answer.split(b" ", 2)[1])
        assert status in (200, 400), (thread[:40], answer[:200])
    for thread in ["线程/../x", "a" * 300, "\ud800 lone surrogate in json"]:
        fake.script(Reply.text("ok"))
        sent = {"model": "gpt-4o", "prompt_cache_key": thread,
                "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{proxy.base_url}/chat/completions", content=json.dumps(sent),
                            headers={"content-type": "application/json"})
        # The fake, like orjson, refuses a lone surrogate: the proxy relays that 400.
        assert answer.status_code == 200 or "could not parse" in answer.text
        assert proxy.requests()[-1]["thread_source"] == "body:prompt_cache_key"
    assert all(line["status"] in (200, 400) for line in proxy.requests())
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200
    state_dir = Path(proxy.settings.state.path)
    names = [p.name for p in state_dir.rglob("*")]
    assert all(".." not in n and "passwd" not in n and "线程" not in n for n in names), names
    assert not list(tmp_path.parent.glob("etc"))


def test_restart_after_sigkill_keeps_state_and_anchors(tmp_path: Path, make_fake) -> None:
    fake = make_fake()
    # A context past half the trigger (750): the answer's anchor is written, not kept in
    # memory alone.
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          models={"gpt-4o": {"max_input_tokens": 1000}})
    proxy = ProxyProcess(config)
    try:
        fake.script(Reply.text("First answer, about the parser."))
        messages = [SYSTEM, {"role": "user", "content": "Explain the parser: " + "token " * 400}]
        first = _post(proxy.base_url, {"model": "gpt-4o", "messages": messages}, "k1")
        assert first.status_code == 200
        # Right after a response: queued writes commit within WRITE_DELAY_S (50 ms).
        time.sleep(0.3)
        proxy.kill()
    finally:
        proxy.kill()
    proxy = ProxyProcess(config)
    try:
        messages += [first.json()["choices"][0]["message"],
                     {"role": "user", "content": "And the lexer?"}]
        fake.script(Reply.text("Second."))
        assert _post(proxy.base_url, {"model": "gpt-4o", "messages": messages}, "k1").status_code == 200
        line = proxy.wait_for("request")[-1]
        assert line["anchor_used"] is True, "the anchor written before the kill is there"
        time.sleep(0.1)
        proxy.kill()  # SIGKILL, between requests
    finally:
        proxy.kill()
    assert_sound_database(tmp_path / "state" / "state.db")
    listed = cli("threads", "--config", str(config))
    assert listed.returncode == 0 and "k1" in listed.stdout
    inspected = cli("inspect", "k1", "--config", str(config))
    assert inspected.returncode == 0, inspected.stderr
    [state] = json.loads(inspected.stdout)
    assert state["key"]["thread"] == "k1" and len(state["anchors"]) == 2
    assert API_KEY not in inspected.stdout and API_KEY not in listed.stdout


def test_inspect_unknown_thread_exits_1(proxy) -> None:
    config = write_config(Path(proxy.settings.state.path).parent / "p.yaml", "http://127.0.0.1:9/v1",
                          Path(proxy.settings.state.path))
    result = cli("inspect", "nope", "--config", str(config))
    assert result.returncode == 1 and "no thread 'nope'" in result.stderr


async def test_concurrent_threads_keep_their_own_anchors(proxy, fake) -> None:
    async with httpx.AsyncClient(timeout=20) as client:
        async def converse(n: int) -> None:
            messages = [SYSTEM, {"role": "user", "content": f"Question {n}"}]
            headers = {"x-thread-id": f"c{n}", "authorization": f"Bearer {API_KEY}"}
            first = await client.post(f"{proxy.base_url}/chat/completions", headers=headers,
                                      json={"model": "gpt-4o", "messages": messages})
            messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "More"}]
            await client.post(f"{proxy.base_url}/chat/completions", headers=headers,
                              json={"model": "gpt-4o", "messages": messages})
        await asyncio.gather(*(converse(n) for n in range(8)))
    seconds = [line for line in proxy.requests() if line.get("anchor_used")]
    assert len(seconds) == 8


def test_a_kill_in_the_middle_of_traffic_leaves_a_sound_database(tmp_path: Path, make_fake) -> None:
    fake = make_fake()
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state")
    proxy = ProxyProcess(config)
    try:
        with httpx.Client(timeout=20) as client:
            for n in range(30):
                client.post(f"{proxy.base_url}/chat/completions", headers={"x-thread-id": f"m{n % 3}"},
                            json={"model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": f"q{n}"}]})
        proxy.kill()  # SIGKILL, no grace at all: queued writes may be lost, nothing breaks
    finally:
        proxy.kill()
    assert_sound_database(tmp_path / "state" / "state.db")
    proxy = ProxyProcess(config)
    try:
        answer = httpx.post(f"{proxy.base_url}/chat/completions", headers={"x-thread-id": "m0"},
                            json={"model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": "again"}]})
        assert answer.status_code == 200
    finally:
        proxy.kill()


def test_a_threads_next_request_is_parsed_as_a_delta_and_sent_the_same(proxy, fake) -> None:
    first, second = _turns(proxy, fake)
    lines = proxy.requests()
    assert "elements_reused" not in lines[0]
    assert lines[1]["elements_reused"] == 2  # the system and user message of the first turn
    sent = fake.last("/chat/completions").json["messages"]
    assert sent[-1] == {"role": "user", "content": "And the lexer?"} and len(sent) == 4


def test_a_responses_thread_named_by_prompt_cache_key_is_parsed_as_a_delta(proxy, fake) -> None:
    fake.script(Reply.text("One."), Reply.text("Two."))
    items: list[dict[str, Any]] = [{"type": "message", "role": "user",
                                    "content": [{"type": "input_text", "text": "Hello."}]}]
    body = {"model": "gpt-4o", "input": items, "store": False, "prompt_cache_key": "conv-7"}
    first = httpx.post(f"{proxy.base_url}/responses", json=body, timeout=20).json()
    items = [*items, *first["output"], {"type": "message", "role": "user",
                                        "content": [{"type": "input_text", "text": "Again."}]}]
    answer = httpx.post(f"{proxy.base_url}/responses", json={**body, "input": items}, timeout=20)
    assert answer.status_code == 200
    lines = proxy.requests()
    assert lines[1]["thread"] == "conv-7" and lines[1]["thread_source"] == "body:prompt_cache_key"
    assert lines[1]["elements_reused"] == 1
    assert fake.last("/responses").json["input"] == items


def test_the_log_names_a_long_thread_as_threads_and_inspect_do(proxy, fake, loop_thread,
                                                               tmp_path: Path) -> None:
    thread = "t" * 300 + "-long"
    fake.script(Reply.text("ok"))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert _post(proxy.base_url, body, thread).status_code == 200
    logged = proxy.requests()[-1]["thread"]
    assert logged.startswith("~") and len(logged) < 100
    config = write_config(tmp_path / "cli.yaml", fake.url, Path(proxy.settings.state.path))
    loop_thread.run(proxy.app[SERVICES].pipeline.store.flush())
    assert logged in cli("threads", "--config", str(config)).stdout
    shown = cli("inspect", logged, "--config", str(config))
    assert shown.returncode == 0, shown.stderr
