"""The HTTP edge under hostile input, on the real server: request bodies of any shape and style,
a thread's turns that edit and re-serialize each other, odd header lines, odd upstream answers.
The oracle is `tests/edge_checks.py`'s; `scripts/fuzz_edge.py` runs the same cases for longer."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import edge_checks
from tests.edge_inputs import (PATHS, Answer, header_lines, request_bodies, thread_turns,
                               upstream_answers)

_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
_APIS = st.sampled_from(sorted(PATHS))
_HEADER_BODIES = st.sampled_from([b'{"model":"gpt-4o","%s":[{"role":"user","content":"Hi"}]}',
                                  b"\xef\xbb\xbf{}", b"not json"])


@settings(suppress_health_check=_FIXTURES, max_examples=30)
@given(api=_APIS, data=st.data())
def test_any_request_body(proxy, fake, api: str, data: st.DataObject) -> None:
    edge_checks.run_body(proxy, fake, api, data.draw(request_bodies(api)),
                         data.draw(st.sampled_from([None, "hostile"])))


@settings(suppress_health_check=_FIXTURES, max_examples=10)
@given(api=_APIS, data=st.data(), n=st.integers(0, 10 ** 9))
def test_a_threads_turns_edit_and_reserialize_each_other(proxy, fake, api: str,
                                                         data: st.DataObject, n: int) -> None:
    edge_checks.run_turns(proxy, fake, api, data.draw(thread_turns(api, turns=4)), f"turns-{n}")


@settings(suppress_health_check=_FIXTURES, max_examples=20)
@given(api=_APIS, lines=header_lines(), body=_HEADER_BODIES)
def test_odd_header_lines(proxy, api: str, lines: list[tuple[bytes, bytes]], body: bytes) -> None:
    body = body.replace(b"%s", PATHS[api][1].encode())
    edge_checks.run_header_lines(proxy, api, lines, body)


@settings(suppress_health_check=_FIXTURES, max_examples=20)
@given(api=_APIS, answer=upstream_answers(), stream=st.booleans())
def test_odd_upstream_answers(scripted, api: str, answer: Answer, stream: bool) -> None:
    proxy, upstream = scripted
    edge_checks.run_answer(proxy, upstream, api, answer, stream)
