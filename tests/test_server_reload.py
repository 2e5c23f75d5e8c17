"""SIGHUP reloads the config file: a real `compaction-proxy serve`, the fake upstream, the
official client. What changed takes effect for the requests that start afterwards; an invalid
file changes nothing; keys that need a restart are named and keep their running values."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.testing.replies import Reply
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.process import ProxyProcess, cli
from tests.reload_serving import serve  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")

LONG = " ".join(f"word{i}" for i in range(400))  # a stream of some 4 s at 0.01 s a chunk


def _long_chat(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are helpful."}]
    for n in range(turns):
        messages += [{"role": "user", "content": f"question {n}: " + "detail " * 120},
                     {"role": "assistant", "content": f"answer {n}: " + "fine " * 60}]
    return messages + [{"role": "user", "content": "go on"}]


def _client(proxy: ProxyProcess, thread: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20,
                         default_headers={"x-thread-id": thread})


def _ask(proxy: ProxyProcess, thread: str, messages: list[dict[str, str]]) -> Any:
    """One chat completion on `thread`, its raw response (the proxy's headers)."""
    with _client(proxy, thread) as client:
        return client.chat.completions.with_raw_response.create(model="small-1",
                                                                messages=messages)


def _reloaded(proxy: ProxyProcess, count: int = 1) -> dict[str, Any]:
    proxy.signal(signal.SIGHUP)
    return proxy.wait_for("config_reloaded", count)[count - 1]


def test_a_lowered_window_compacts_the_next_request_and_a_raised_one_stops_it(
        serve, make_fake) -> None:
    fake = make_fake()
    served = serve(fake.url, models={"small-*": {"max_input_tokens": 100000}},
                   tokens=COUNTED)
    proxy = served.proxy
    before = _ask(proxy, "t-window", _long_chat(12))
    assert before.headers["x-compaction"] == "none"
    tokens = int(before.headers["x-context-tokens"])
    assert tokens > 2000

    served.rewrite(models={"small-*": {"max_input_tokens": 2000}}, tokens=COUNTED)
    line = _reloaded(proxy)
    assert line["changed"] == ["models"]
    assert line["keys"] == ["models.small-*.max_input_tokens"]
    assert line["config_digest"] != proxy.events("listening")[0]["config_digest"]
    after = _ask(proxy, "t-window", _long_chat(12))
    assert after.headers["x-compaction"] == "compacted"
    assert int(after.headers["x-context-tokens"]) < 2000
    assert proxy.wait_for("compaction_completed")  # the answer may come before its line

    # Raised again: another thread as long goes up whole.
    served.rewrite(models={"small-*": {"max_input_tokens": 100000}}, tokens=COUNTED)
    assert _reloaded(proxy, 2)["changed"] == ["models"]
    again = _ask(proxy, "t-window-2", _long_chat(12))
    assert again.headers["x-compaction"] == "none"
    assert int(again.headers["x-context-tokens"]) == tokens
    metrics = httpx.get(f"http://127.0.0.1:{proxy.port}/metrics").text
    assert 'proxy_config_reloads_total{outcome="applied"} 2.0' in metrics


def test_a_route_moved_to_another_upstream_takes_the_next_request_there(
        serve, make_fake) -> None:
    first, second = make_fake(), make_fake()
    upstreams = {"first": first.url, "second": second.url}
    served = serve(upstreams, routes=[{"model": "*", "upstream": "first"}])
    proxy = served.proxy
    _ask(proxy, "t-route", [{"role": "user", "content": "one"}])
    assert len(first.requests) == 1 and not second.requests

    served.rewrite(routes=[{"model": "*", "upstream": "second"}])
    assert _reloaded(proxy)["changed"] == ["routes"]
    _ask(proxy, "t-route", [{"role": "user", "content": "two"}])
    assert len(first.requests) == 1 and len(second.requests) == 1
    assert [r["upstream"] for r in proxy.wait_for("request", 2)] == ["first", "second"]


def test_an_invalid_file_changes_nothing_and_is_reported_as_check_config_words_it(
        serve, make_fake) -> None:
    fake = make_fake()
    served = serve(fake.url, models={"small-*": {"max_input_tokens": 100000}})
    proxy = served.proxy
    served.rewrite(models={"small-*": {"max_input_tokens": 2000, "trigger_ratio": "high"}},
                   routes=[{"model": "*", "upstream": "gone"}])
    checked = cli("check-config", "--config", str(served.config))
    assert checked.returncode == 1
    problems = [line.strip() for line in checked.stderr.splitlines()[1:]]
    assert any(p.startswith("models.small-*.trigger_ratio:") for p in problems)
    assert any(p.startswith("routes[0].upstream:") for p in problems)

    proxy.signal(signal.SIGHUP)
    [failed] = proxy.wait_for("config_reload_failed")
    assert failed["level"] == "error" and failed["problems"] == problems
    answer = _ask(proxy, "t-invalid", _long_chat(12))
    assert answer.headers["x-compaction"] == "none"  # the old window, the old route
    assert not proxy.events("config_reloaded")
    metrics = httpx.get(f"http://127.0.0.1:{proxy.port}/metrics").text
    assert 'proxy_config_reloads_total{outcome="failed"} 1.0' in metrics


def test_restart_only_keys_are_named_and_kept_while_the_rest_applies(
        tmp_path: Path, serve, make_fake) -> None:
    fake = make_fake()
    served = serve(fake.url)
    proxy = served.proxy
    port = proxy.port
    served.rewrite(state=tmp_path / "elsewhere", server={"port": 1},
                   logging={"format": "console"}, threads={"forward_headers": False})
    line = _reloaded(proxy)
    assert line["changed"] == ["threads"]
    [partial] = proxy.wait_for("config_reload_partial")
    assert partial["level"] == "warning"
    assert partial["restart_needed"] == ["server.port", "state.path", "logging.format"]
    _ask(proxy, "t-restart", [{"role": "user", "content": "hi"}])
    assert proxy.port == port  # still where it listened, in JSON lines
    assert "x-thread-id" not in fake.requests[-1].headers  # the applied part
    assert not (tmp_path / "elsewhere").exists()


def test_an_unchanged_file_changes_nothing_and_two_signals_at_once_are_safe(
        serve, make_fake) -> None:
    fake = make_fake()
    proxy = serve(fake.url).proxy
    proxy.signal(signal.SIGHUP)
    proxy.signal(signal.SIGHUP)
    line = proxy.wait_for("config_reloaded")[0]
    assert line["changed"] == [] and line["note"] == "no setting changed: nothing to apply"
    time.sleep(0.5)  # a second reload, if the first was under way, has run by now
    assert 1 <= len(proxy.events("config_reloaded")) <= 2
    assert not proxy.events("config_reload_partial")
    answer = _ask(proxy, "t-twice", [{"role": "user", "content": "hi"}])
    assert answer.http_response.status_code == 200


def test_a_stream_under_way_finishes_on_the_upstream_it_started_with(
        serve, make_fake) -> None:
    slow, other = make_fake(chunk_delay=0.01), make_fake()
    slow.responder = lambda recorded: Reply.text(LONG)
    upstreams = {"slow": slow.url, "other": other.url}
    served = serve(upstreams, routes=[{"model": "*", "upstream": "slow"}])
    proxy = served.proxy
    with _client(proxy, "t-stream") as client, client.chat.completions.create(
            model="small-1", stream=True,
            messages=[{"role": "user", "content": "long"}]) as stream:
        chunks = iter(stream)
        text = next(chunks).choices[0].delta.content or ""

        served.rewrite(routes=[{"model": "*", "upstream": "other"}])
        assert _reloaded(proxy)["changed"] == ["routes"]
        _ask(proxy, "t-after", [{"role": "user", "content": "short"}])
        assert len(other.requests) == 1  # the reload is in force...

        text += "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == LONG  # ...and the stream went on from the old upstream to its end
    assert len(slow.requests) == 1
    lines = {line["thread"]: line for line in proxy.wait_for("request", 2)}
    assert lines["t-stream"]["upstream"] == "slow" and lines["t-stream"]["status"] == 200
    assert "upstream_error" not in lines["t-stream"]
    # Its line is written at its end: after the reload.
    assert proxy.events("config_reloaded")[0]["timestamp"] < lines["t-stream"]["timestamp"]


def test_a_compaction_under_way_finishes_with_the_settings_its_request_began_with(
        serve, make_fake) -> None:
    fake = make_fake()
    summarizing, go_on = threading.Event(), threading.Event()

    def held_summary(recorded: Any) -> None:
        if is_summarizer_request(recorded.json):
            summarizing.set()
            go_on.wait(10)  # holds the fake (its loop) until the reload is in force
    fake.responder = held_summary
    served = serve(fake.url, models={"small-*": {"max_input_tokens": 2000}})
    proxy = served.proxy
    with ThreadPoolExecutor(1) as pool:
        started = pool.submit(_ask, proxy, "t-begun", _long_chat(12))
        assert summarizing.wait(10)
        served.rewrite(threads={"forward_headers": False},
                       models={"small-*": {"max_input_tokens": 100000}})
        assert _reloaded(proxy)["changed"] == ["models", "threads"]
        go_on.set()
        answer = started.result(20)
    assert answer.headers["x-compaction"] == "compacted"
    assert int(answer.headers["x-context-tokens"]) < 2000
    # Forwarded after the reload, with the settings it began with: its thread header too.
    assert fake.requests[-1].headers.get("x-thread-id") == "t-begun"
    assert proxy.wait_for("compaction_completed")  # the answer may come before its line

    later = _ask(proxy, "t-later", _long_chat(12))
    assert later.headers["x-compaction"] == "none"  # the new window
    assert "x-thread-id" not in fake.requests[-1].headers  # the new threads section
