"""Properties of the shell-output readers: an output is complete and successful only when its
wrapper says exit 0, and never when it bears a mark of a cut, wherever the mark sits."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.shell_calls import unwrapped

_SUCCESS = ("Exit code: 0\n", '"exit_code": 0', '"exit_code":0', "Process exited with code 0\n",
            "<returncode>0</returncode>", "[The command completed with exit code 0.]")
_PIECES = st.sampled_from([
    "Exit code: ", "Wall time: 0.1 seconds\n", "Output:\n", "Chunk ID: ab\n", "0", "1", "\n",
    "Process exited with code ", "Process running with session ID 3\n",
    "Original token count: 2\n", "<returncode>", "</returncode>", "<output>\n", "</output>",
    "[The command completed with exit code ", ".]", '{"output": "x", "metadata": {}}', "x"])
_TEXTS = st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=12).map("".join)
_CODEX_CUTS = ["…12 tokens truncated…", "…40 chars truncated…", "[... omitted 9 of 300 lines ...]",
               "[... output truncated to fit 10240 bytes ...]"]
_OPENHANDS_CUTS = [
    "[... Command output truncated: removed 900 characters from the middle ...]",
    "[Previous command outputs are truncated. Showing the last 9 lines of the output below.]",
    "<response clipped>", "[... Observation truncated due to length ...]"]


def _complete_success(text: str) -> bool:
    found = unwrapped(text)
    return found is not None and found[0] == 0 and found[1] is not None


@settings(max_examples=400, deadline=None)
@given(_TEXTS)
def test_no_output_is_a_success_without_a_wrapper_that_says_exit_0(text: str) -> None:
    if _complete_success(text):
        assert any(s in text for s in _SUCCESS), text


def _codex_wrappers(body: str, tokens: int) -> list[str]:
    return [
        json.dumps({"output": body, "metadata": {"exit_code": 0, "duration_seconds": 0.1}}),
        f"Exit code: 0\nWall time: 0.1 seconds\nOutput:\n{body}",
        f"Chunk ID: ab12\nWall time: 0.0100 seconds\nProcess exited with code 0\n"
        f"Original token count: {tokens}\nOutput:\n{body}",
    ]


# Each agent's reader knows its own marks: another agent's mark may be a file's own text.
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.sampled_from(_CODEX_CUTS))
def test_a_codex_output_with_a_cut_mark_is_never_complete(head: str, tail: str, cut: str) -> None:
    body = head + cut + tail
    for text in _codex_wrappers(body, (len(body.encode()) + 3) // 4):
        found = unwrapped(text)
        assert found is None or found[1] is None, text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.sampled_from(_OPENHANDS_CUTS))
def test_an_openhands_output_with_a_cut_mark_is_never_complete(head: str, tail: str,
                                                               cut: str) -> None:
    text = f"{head}{cut}{tail}\n[The command completed with exit code 0.]\n[Current working directory: /w]"
    found = unwrapped(text)
    assert found is None or found[1] is None, text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), st.integers(min_value=0, max_value=100))
def test_an_exec_output_short_of_its_token_count_is_never_complete(body: str, tokens: int) -> None:
    found = unwrapped(_codex_wrappers(body, tokens)[2])
    if tokens != (len(body.encode()) + 3) // 4:
        assert found is None or found[1] is None
    else:
        assert found is None or found == (0, body) or found[1] is None
