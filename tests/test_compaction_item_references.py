"""Compaction of a `store: true` Responses conversation whose client echoes reasoning and
messages by `item_reference` and tool calls whole (as the SDK dumps them, with their `fc_` ids).

A reference may stand for a reasoning item: a cut right after it would summarize it away and
keep the call it produced raw with its id, which upstream refuses without its reasoning item
(the retry strips only the ids of reasoning items the sanitizer dropped, so it failed again).
`proxy.core.boundary` keeps a reference on the side of the produced item after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.testing.sessions import coding_session
from tests.test_responses_api import MODEL, TOOLS, _reply, _steps, codex_setup  # noqa: F401


def _echo(item: Any) -> dict[str, Any]:
    if item.type == "function_call":
        return item.model_dump(exclude_none=True)
    return {"type": "item_reference", "id": item.id}


def echoing_session(fake, client, seed: int,  # type: ignore[no-untyped-def]
                    echo: Callable[[Any], dict[str, Any]]) -> list[Any]:
    """A Responses coding session with `store` on, each answer's items sent back by `echo`;
    the usage of each answer."""
    history: list[dict[str, Any]] = []
    usages: list[Any] = []
    for side, chunk in _steps(coding_session(120, seed=seed, api="responses")):
        if side == "client":
            history.extend(chunk)
            continue
        fake.script(_reply(chunk))
        response = client.responses.create(model=MODEL, input=history, store=True, tools=TOOLS)
        usages.append(response.usage)
        history.extend(echo(item) for item in response.output)
    return usages


def test_a_session_echoing_by_reference_survives_compaction(codex_setup) -> None:  # noqa: F811
    fake, summarizer, proxy, client = codex_setup
    echoing_session(fake, client, 3, _echo)
    assert summarizer.calls >= 1
    assert all(line["status"] == 200 for line in proxy.requests())
