"""Threads and tenants as properties (SPEC §2).

- The thread id is the first found of the configured sources, in order (headers, then body
  fields by dotted path); without one, `fingerprint` names it from the leading system text and
  the first user message, `none` leaves the request stateless. The tenant is a digest of the
  presented credential, never the credential.
- A fingerprinted thread is one thread as its conversation grows, however the client
  formats each request (key order, spacing, escapes), and another one when the leading
  instructions or the first user message say something else.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api
from proxy.inbound import leading_bytes, parse_inbound
from proxy.settings import ThreadSettings
from proxy.threads import resolve_thread
from tests.strategies import request_points
from tests.strategies_more import richer, shuffled

_HEADERS = ("x-thread-id", "session_id", "x-conversation")
_FIELDS = ("prompt_cache_key", "metadata.thread_id", "user", "metadata.session.id")
_value = st.one_of(st.just(""), st.text(min_size=1, max_size=12), st.integers(0, 9), st.none())


def _put(body: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for name in parents:
        body = body.setdefault(name, {}) if isinstance(body.get(name, {}), dict) else {}
    body[last] = value


@st.composite
def thread_cases(draw: st.DrawFn) -> tuple[ThreadSettings, dict[str, str], dict[str, Any], str]:
    settings = ThreadSettings(headers=tuple(draw(st.lists(st.sampled_from(_HEADERS), unique=True, max_size=3))),
                              body_fields=tuple(draw(st.lists(st.sampled_from(_FIELDS), unique=True,
                                                              max_size=4))),
                              fallback=draw(st.sampled_from(("fingerprint", "none"))))
    credential = draw(st.sampled_from(("sk-proj-Abc123", "sk-other-Zz9", "")))
    headers = {"authorization": f"Bearer {credential}"} if credential else {}
    for name in draw(st.lists(st.sampled_from(_HEADERS), unique=True, max_size=3)):
        headers[name] = draw(st.sampled_from(("", "h-1", "线程", " ")))
    body: dict[str, Any] = {"model": "gpt-4o"}
    for path in draw(st.lists(st.sampled_from(_FIELDS), unique=True, max_size=4)):
        _put(body, path, draw(_value))
    return settings, headers, body, credential


def _expected(settings: ThreadSettings, headers: dict[str, str], body: dict[str, Any]) -> tuple[Any, str]:
    """SPEC §2's rule, walked naively."""
    for name in settings.headers:
        if headers.get(name):
            return headers[name], f"header:{name}"
    for path in settings.body_fields:
        value: Any = body
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str) and value:
            return value, f"body:{path}"
    if settings.fallback == "fingerprint":
        return "fp:", "fingerprint"
    return None, "none"


@given(thread_cases())
def test_the_thread_is_the_first_configured_source_found_and_the_tenant_never_the_credential(
        case: tuple) -> None:
    settings, headers, body, credential = case
    found = resolve_thread(headers, body, settings, [b"system", b"first user"])
    thread, source = _expected(settings, headers, body)
    assert found.source == source
    if source == "fingerprint":
        assert str(found.thread).startswith("fp:")
    else:
        assert found.thread == thread
    if credential:
        assert credential not in found.tenant and "Bearer" not in found.tenant
    other = resolve_thread({**headers, "authorization": "Bearer sk-someone-else"}, body, settings, [b"s"])
    assert other.tenant != found.tenant or not credential


def _fingerprint(api: str, elements: list[dict[str, Any]], style: dict[str, Any]) -> str | None:
    key = "messages" if api == "chat" else "input"
    body = json.dumps({"model": "gpt-4o", key: elements}, **style).encode()
    inbound = parse_inbound(Api(api), body)
    found = resolve_thread({}, inbound.doc, ThreadSettings(), lambda: leading_bytes(inbound))
    return found.thread


_styles = st.fixed_dictionaries({"ensure_ascii": st.booleans(),
                                 "separators": st.sampled_from(((",", ":"), (", ", ": ")))})


@given(st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(st.just(api), richer(api))), st.data())
def test_a_fingerprinted_thread_stays_one_thread_as_it_grows_in_any_format(drawn: tuple, data: st.DataObject) -> None:
    api, elements = drawn
    points = [p for p in request_points(elements) if any(e.get("role") == "user" for e in elements[:p])]
    threads = {_fingerprint(api, data.draw(shuffled(elements[:p])), data.draw(_styles)) for p in points}
    assert len(threads) <= 1, threads


@given(st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(st.just(api), richer(api))))
def test_another_first_user_message_is_another_thread(drawn: tuple) -> None:
    api, elements = drawn
    first = next((i for i, e in enumerate(elements) if e.get("role") == "user"), None)
    if first is None:
        return
    style = {"ensure_ascii": False, "separators": (",", ":")}
    other = {"role": "user", "content": "Something else entirely."}
    edited = [*elements[:first], other, *elements[first + 1:]]
    if elements[first] == other:
        return
    assert _fingerprint(api, elements, style) != _fingerprint(api, edited, style)
