"""The short way for the usual chat answer (`streams.one_choice`) against the general one.

`finish_body` records the usage of every answer: of the usual shape, one choice with its
message and a usage object, it reads both at once. Whenever the short way answers, it must be
what `chat_message` and `usage_of` read, with no further choice for the general path to find."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.streams import chat_message, one_choice, usage_of

scalars = st.one_of(st.none(), st.booleans(), st.integers(-1, 2), st.just(0.0), st.text(max_size=2))
messages = st.one_of(scalars, st.dictionaries(st.sampled_from(["role", "content", "refusal"]),
                                              scalars, max_size=3))
choices = st.fixed_dictionaries(
    {}, optional={"index": scalars, "message": messages, "finish_reason": scalars})
usages = st.one_of(scalars, st.lists(scalars, max_size=1),
                   st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens"]),
                                   scalars, max_size=2))
# Answers close to the usual one, where the short way must decide well, and anything else.
near_usual = st.fixed_dictionaries({
    "choices": st.lists(st.fixed_dictionaries(
        {"message": st.one_of(st.dictionaries(st.sampled_from(["role", "content"]), scalars),
                              scalars)},
        optional={"index": st.sampled_from([0, 0.0, False, 1, None, "0"])}),
        min_size=1, max_size=2),
    "usage": st.one_of(st.dictionaries(st.just("prompt_tokens"), scalars), st.none())})
bodies = st.one_of(
    near_usual, scalars, st.lists(scalars, max_size=1),
    st.fixed_dictionaries({}, optional={
        "choices": st.one_of(scalars, st.lists(st.one_of(choices, scalars), max_size=3),
                             st.tuples(choices)),
        "usage": usages, "id": scalars}))


@settings(max_examples=400)  # the usual shape is some 7% of these
@given(bodies)
def test_the_short_way_reads_what_the_general_functions_read(body: Any) -> None:
    found = one_choice(body)
    if found is None:
        return
    message, usage = found
    assert message == chat_message(body) and usage == usage_of(body)
    assert message is not None and usage is not None
    # What `finish_body`'s general path asks before reading other choices (`n` > 1).
    assert not (message and len(body["choices"]) > 1)


def test_the_usual_answer_takes_the_short_way() -> None:
    body = {"id": "c1", "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
    assert one_choice(body) == ({"role": "assistant", "content": "ok"}, body["usage"])
    body["choices"][0].pop("index")
    assert one_choice(body) is not None
    assert one_choice({**body, "choices": body["choices"] * 2}) is None  # `n` > 1
    assert one_choice({**body, "usage": None}) is None
