"""Manual `/compact` through a running proxy (SPEC §8), as a property.

A client replays a drawn conversation of either API (parallel and custom calls, long results,
images) and, at drawn places where it is the user's turn, the user types `/compact` (with focus
instructions or not; once, or twice in a row), possibly after earlier compactions, manual or
automatic. The answers to `/compact` are asked for as JSON or as a stream. The client keeps the
command and the proxy's answer in its history, as clients do, and then goes on.

Each `/compact` turn: no request reaches the main model (only the summarizer's, when there is
something to summarize); the answer is a well-formed chat completion or response, or an SSE
stream of one, as asked, whose text says what happened; a checkpoint is written if and only if
the answer says something was compacted (`x-compaction: compacted`), and the focus goes to the
summarizer; a `/compact` repeated with nothing new writes nothing and says so; every answer
has an id of its own.

The next normal turn: the upstream gets neither the command nor the answer, and what it gets is
what the rules keep of the client's list without them: the leading system messages as sent,
the checkpoint's summary (and the messages restored with it), then the client's messages from
the cut on, byte for byte, the latest user message with them. The conversations carry no
provider-private state here (the sanitizer's own properties cover it), and the cheap stages
that change old messages are off, so the kept tail must be the client's bytes exactly.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import assume, event, example, given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.compaction.apply import SUMMARY_HEADER
from proxy.compaction.manual import MARKER
from proxy.records import CompactionEvent, ThreadKey
from proxy.server.services import SERVICES
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY
from tests.harness import LoopThread
from tests.session_rig import MODEL, Rig, body_elements
from tests.strategies import conversations, is_server_item, short_text, sign_encrypted

LIMIT = 16_000
COMMAND = "/compact"
EVENTS = TypeAdapter(ResponseStreamEvent)
PRIVATE_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks",
                "reasoning_items", "provider_specific_fields")
_threads = itertools.count()


@pytest.fixture(scope="module")
def rig(loop_thread: LoopThread) -> Iterator[Rig]:
    # A tail of 5% of the window: most conversations have something to summarize.
    with Rig(loop_thread, LIMIT, compaction={"keep_ratio": 0.05, "collapse": {"enabled": False},
                                             "truncate": {"enabled": False}}) as made:
        yield made


# ---------------------------------------------------------------- drawing a session

def _plain(api: str, element: dict[str, Any]) -> dict[str, Any] | None:
    """The element without provider-private state (None: a Responses item that is only that)."""
    if api == "responses":
        if element.get("type") in ("reasoning", "compaction") or is_server_item(element):
            return None  # a server item cannot go without its id, nor with it alone
        return {k: v for k, v in element.items() if k != "id"}  # ids named reasoning items
    out = {k: v for k, v in element.items() if k not in PRIVATE_KEYS}
    content = out.get("content")
    if isinstance(content, list):
        parts = [p for p in content if p.get("type") not in ("thinking", "redacted_thinking")]
        out["content"] = parts or (None if out.get("tool_calls") else "")
    if isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [{k: v for k, v in c.items() if k != "extra_content"}
                             for c in out["tool_calls"]]
    return out


def _is_user(element: dict[str, Any]) -> bool:
    return element.get("role") == "user"


focus = st.none() | st.sampled_from(("keep the API names", "the failing test, 修复")) | short_text


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    api = draw(st.sampled_from(("chat", "responses")))
    # A few as drawn, provider-private state and all, some damaged the ways clients damage them
    # (results lost, moved, doubled), some after a night of idling (microcompact): the stages
    # and the sanitizer then change the tail, and only what holds for any tail is checked.
    loose = draw(st.sampled_from((None, None, None, "private", "messy", "idle")))
    drawn = draw(conversations(api, max_turns=5, messy=loose == "messy"))
    # Hypothesis also draws the code's own strings: a user message of the conversation that
    # is the command would be one, and text that quotes it would look like one in a body.
    assume(COMMAND.encode() not in orjson.dumps(drawn))
    elements = drawn if loose in ("private", "messy") else \
        [p for p in (_plain(api, e) for e in drawn) if p is not None]
    # The user's turns: before each later user message, and at the end.
    turns = [k for k, e in enumerate(elements) if _is_user(e) and k > 0] + [len(elements)]
    places = sorted(draw(st.sets(st.sampled_from(turns), min_size=1, max_size=3)))
    commands = [(k, [draw(focus) for _ in range(draw(st.integers(1, 2)))]) for k in places]
    return {"api": api, "elements": elements, "commands": commands, "loose": loose,
            "stream": draw(st.booleans()), "include_usage": draw(st.sampled_from((None, False, True))),
            "command_form": draw(st.sampled_from(("text", "parts", "easy"))),
            # How the thread is named (SPEC §2): a header, Codex's body field, or no name at all
            # (the fingerprint of the leading system message and the first user message).
            "naming": draw(st.sampled_from(("header", "prompt_cache_key", "fingerprint"))),
            "echo_form": draw(st.sampled_from(("minimal", "parts", "as answered", "easy")))}


# ---------------------------------------------------------------- the client

class Client:
    """One thread's client: its history (with the `/compact` exchanges it keeps) and what
    each of its requests caused upstream."""

    def __init__(self, rig: Rig, case: dict[str, Any]) -> None:
        self.rig, self.case, self.api = rig, case, case["api"]
        self.thread = f"manual-{next(_threads)}"
        self.history: list[dict[str, Any]] = []
        self.exchange: list[bool] = []  # for each history element: a `/compact` exchange's
        self.elements = case["elements"]
        if case["naming"] == "fingerprint":  # a system message of its own: a thread of its own
            text = f"You work on {self.thread}."
            if self.api == "chat":
                self.add([{"role": "system", "content": text}])
            else:  # encrypted reasoning is bound to the items before it: signed again after it
                lead = {"type": "message", "role": "system",
                        "content": [{"type": "input_text", "text": text}]}
                self.add([lead])
                self.elements = sign_encrypted([lead, *self.elements])[1:]
        self.key: ThreadKey | None = None
        self.answer_ids: list[str] = []  # of the proxy's answers to `/compact`, in order
        self.answers: list[str] = []  # their texts, in order

    def add(self, elements: list[dict[str, Any]], exchange: bool = False) -> None:
        self.history += elements
        self.exchange += [exchange] * len(elements)

    def post(self, elements: list[dict[str, Any]], stream: bool = False) -> tuple[Any, list[Any]]:
        body: dict[str, Any] = {"model": MODEL}
        body["messages" if self.api == "chat" else "input"] = elements
        naming = self.case["naming"]
        if naming == "prompt_cache_key":
            body["prompt_cache_key"] = self.thread
        named = {"x-thread-id": self.thread} if naming == "header" else {}
        if stream:
            body["stream"] = True
            if self.api == "chat" and self.case["include_usage"] is not None:
                body["stream_options"] = {"include_usage": self.case["include_usage"]}
        path = "chat/completions" if self.api == "chat" else "responses"
        before = len(self.rig.fake.requests)
        answer = self.rig.http.post(f"{self.rig.proxy.base_url}/{path}", content=orjson.dumps(body),
                                    headers={"authorization": f"Bearer {API_KEY}", **named,
                                             "content-type": "application/json"})
        self.rig.proxy.logs.settle()
        if self.key is None:  # the request's own line: the last one, requests come one by one
            line = self.rig.proxy.requests()[-1]
            assert line.get("thread") and (naming == "fingerprint" or line["thread"] == self.thread)
            self.key = ThreadKey(line["tenant"], line["thread"])
        return answer, self.rig.fake.requests[before:]

    def checkpoints(self) -> list[CompactionEvent]:
        assert self.key is not None
        pipeline = self.rig.proxy.app[SERVICES].pipeline
        return self.rig.loop.run(pipeline.store.events(self.key))

    def command(self, text: str) -> dict[str, Any]:
        form = self.case["command_form"]
        if form == "easy" or (self.api == "chat" and form == "text"):
            return {"role": "user", "content": text}
        part = {"type": "text" if self.api == "chat" else "input_text", "text": text}
        message = {"role": "user", "content": [part]}
        return message if self.api == "chat" else {"type": "message", **message}

    def echo(self, text: str, message_id: str) -> dict[str, Any]:
        """The proxy's answer as the client keeps it, in one of the ways clients keep one."""
        form = self.case["echo_form"]
        if self.api == "chat":
            if form == "parts":
                return {"role": "assistant", "content": [{"type": "text", "text": text}]}
            if form == "as answered":  # an SDK's message, dumped with its nulls
                return {"role": "assistant", "content": text, "refusal": None, "audio": None,
                        "annotations": [], "tool_calls": None}
            return {"role": "assistant", "content": text}
        if form == "easy":
            return {"role": "assistant", "content": text}
        part = {"type": "output_text", "text": text, "annotations": []}
        if form == "as answered":  # the output item, id, status, logprobs and all
            return {"id": message_id, "type": "message", "role": "assistant",
                    "status": "completed", "content": [{**part, "logprobs": []}]}
        item = {"type": "message", "role": "assistant", "content": [part]}
        return {**item, "id": message_id} if form == "parts" else item

    def fresh_user(self) -> dict[str, Any]:
        return self.command("Go on with the task.")


# ---------------------------------------------------------------- reading the answer

def _frames(body: bytes) -> list[tuple[str | None, bytes]]:
    frames = []
    for frame in body.split(b"\n\n"):
        if not frame:
            continue
        name, data = None, b""
        for line in frame.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
        frames.append((name, data))
    return frames


def answer_text(api: str, stream: bool, include_usage: bool | None, answer: Any) -> tuple[str, str]:
    """The text and message id of a well-formed answer of the shape asked for."""
    if api == "chat" and not stream:
        assert answer.headers["content-type"].startswith("application/json")
        completion = ChatCompletion.model_validate(answer.json())
        (choice,) = completion.choices
        assert choice.finish_reason == "stop" and not choice.message.tool_calls
        return choice.message.content or "", completion.id
    kind = "text/event-stream" if stream else "application/json"
    assert answer.headers["content-type"].startswith(kind)
    frames = _frames(answer.content) if stream else []
    if api == "chat":
        assert frames[-1] == (None, b"[DONE]")
        chunks = [ChatCompletionChunk.model_validate(orjson.loads(d)) for _, d in frames[:-1]]
        usage = [c for c in chunks if not c.choices]
        assert len(usage) == (1 if include_usage is True else 0) and all(c.usage for c in usage)
        with_choice = [c for c in chunks if c.choices]
        assert [c.choices[0].finish_reason for c in with_choice][-1] == "stop"
        assert not any(c.choices[0].delta.tool_calls for c in with_choice)
        return "".join(c.choices[0].delta.content or "" for c in with_choice), chunks[0].id
    if not stream:
        response = Response.model_validate(answer.json())
    else:
        events = [EVENTS.validate_python(orjson.loads(d)) for _, d in frames]
        assert [name for name, _ in frames] == [e.type for e in events]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        response = events[-1].response
    assert response.status == "completed"
    (item,) = response.output
    assert item.type == "message" and not response.tools
    return response.output_text, item.id


def _answer_in(client: Client, body: bytes) -> bool:
    """Whether one of the proxy's `/compact` answers is in a body sent upstream. Its text, not
    MARKER alone: the client's own messages may hold MARKER (Hypothesis draws string constants
    of the code under test) and are the client's to send. The first 80 characters, JSON-quoted,
    are distinct enough and survive a transcript that shortens long texts."""
    return any(orjson.dumps(said[:80])[1:-1] in body for said in client.answers)


# ---------------------------------------------------------------- one `/compact` turn

def compact_turn(client: Client, focus_text: str | None, repeated: bool) -> None:
    text = COMMAND if focus_text is None else f"{COMMAND} {focus_text}"
    command = client.command(text)
    before = client.checkpoints() if client.key is not None else []
    stream = client.case["stream"]
    answer, sent = client.post([*client.history, command], stream=stream)
    assert not [r for r in sent if not is_summarizer_request(r.json)], \
        "the /compact turn reached the main model"
    assert not any(_answer_in(client, r.body) for r in sent), "an earlier answer was summarized"
    made = client.checkpoints()[len(before):]
    if answer.status_code == 400:  # over the trigger and no summary can help: SPEC §5's error
        event("/compact: the 400 asking for a new thread")
        assert answer.json()["error"]["code"] == "context_compaction_insufficient"
        assert not made
        return
    assert answer.status_code == 200, answer.text
    said, message_id = answer_text(client.api, stream, client.case["include_usage"], answer)
    assert said.startswith(MARKER)
    assert message_id not in client.answer_ids, "two answers, one id"
    client.answer_ids.append(message_id)
    compacted = answer.headers["x-compaction"] == "compacted"
    assert compacted == said.startswith(f"{MARKER} Compacted")
    assert len(made) == (1 if compacted else 0), "a checkpoint is written iff the answer says so"
    if compacted:
        event("/compact: compacted" + (" again" if before else ""))
        check_counts(client, said, made[0])
        assert not repeated, "a repeated /compact with nothing new compacted"
        assert sent, "compacted without asking the summarizer"
        wanted = (focus_text or "").strip()
        if wanted:
            quoted = orjson.dumps(wanted)[1:-1]
            assert all(quoted in r.body for r in sent), "the focus did not reach the summarizer"
    else:
        event("/compact: nothing" + (" (repeated)" if repeated else ""))
        assert answer.headers["x-compaction"] == "none"
        assert said.startswith(f"{MARKER} Nothing"), said
    client.answers.append(said)
    client.add([command, client.echo(said, message_id)], exchange=True)


def check_counts(client: Client, said: str, made: CompactionEvent) -> None:
    """The answer's numbers are the checkpoint's: messages summarized and kept, tokens."""
    found = re.search(r"Compacted (\d+) earlier message\(s\).*from about ([\d,]+) to ([\d,]+) "
                      r"tokens\.(?: The latest (\d+) message)?", said)
    assert found, said
    summarized, before, after, kept = found.groups()
    own = [e for e, x in zip(client.history, client.exchange, strict=True) if not x]
    lead = next((i for i, e in enumerate(own) if e.get("role") not in ("system", "developer")),
                len(own))
    assert int(summarized) == made.cutoff_index - lead
    assert int(kept or 0) == len(own) - made.cutoff_index
    assert (int(before.replace(",", "")), int(after.replace(",", ""))) == \
        (made.tokens_before, made.tokens_after)
    assert made.tokens_after < made.tokens_before


# ---------------------------------------------------------------- the next normal turn

def normal_turn(client: Client) -> None:
    answer, sent = client.post(client.history)
    main = [r for r in sent if not is_summarizer_request(r.json)]
    if answer.status_code == 400 and not main:
        assert answer.json()["error"]["code"] == "context_compaction_insufficient"
        event("normal turn: the 400 asking for a new thread")
        return
    assert answer.status_code == 200, answer.text
    assert len(main) == 1
    # The exchanges left out change the body at least.
    assert answer.headers["x-compaction"] in ("applied", "compacted")
    body = main[0].body
    assert not _answer_in(client, body), "the proxy's /compact answer reached the model"
    assert not any(_answer_in(client, r.body) for r in sent), "an earlier answer was summarized"
    assert COMMAND.encode() not in body, "a /compact command reached the model"
    client_list = [orjson.dumps(e) for e, x in zip(client.history, client.exchange, strict=True)
                   if not x]
    elements = body_elements(client.api, body)
    assert not any(_is_command(client.api, orjson.loads(e)) for e in elements), \
        "a /compact command reached the model"
    checkpoint = client.rig.loop.run(
        client.rig.proxy.app[SERVICES].pipeline.store.load(client.key)).event
    if client.case["loose"]:  # the stages' and the sanitizer's to change: the upstream accepts it
        event(f"normal turn: {client.case['loose']}, accepted")
        assert elements[-1] == client_list[-1] or not _is_user(orjson.loads(client_list[-1]))
        return
    if checkpoint is None:
        event("normal turn: no checkpoint")
        assert list(elements) == client_list
        return
    event("normal turn: rebuilt from a checkpoint")
    check_rebuilt(client.api, client_list, list(elements), checkpoint)


def _text(api: str, element: dict[str, Any]) -> str:
    content = element.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _is_command(api: str, element: dict[str, Any]) -> bool:
    text = _text(api, element).strip()
    return _is_user(element) and (text == COMMAND or
                                  (text.startswith(COMMAND) and text[len(COMMAND)].isspace()))


def check_rebuilt(api: str, client_list: list[bytes], sent: list[bytes],
                  checkpoint: CompactionEvent) -> None:
    decoded = [orjson.loads(e) for e in client_list]
    lead = next((i for i, e in enumerate(decoded) if e.get("role") not in ("system", "developer")),
                len(decoded))
    cut = checkpoint.cutoff_index
    tail = client_list[cut:]
    assert sent[:lead] == client_list[:lead], "the leading system messages changed"
    assert _text(api, orjson.loads(sent[lead])).startswith(SUMMARY_HEADER), "no summary after them"
    assert sent[len(sent) - len(tail):] == tail, "the kept tail is not the client's bytes"
    restored = [orjson.loads(e) for e in sent[lead + 1:len(sent) - len(tail)]]
    assert all(_is_user(e) for e in restored), "something else than restored messages"
    latest = max(i for i, e in enumerate(decoded) if _is_user(e))
    if latest < cut:  # summarized: the restored messages carry it whole
        assert any(_text(api, decoded[latest]) in _text(api, e) for e in restored)


# ---------------------------------------------------------------- the property

@given(case=sessions())
# A user's own text that is MARKER alone reaches the model as sent (found by the deep profile).
@example(case={"api": "chat", "elements": [{"role": "user", "content": [
    {"type": "text", "text": MARKER},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}}]}],
    "commands": [(1, [None])], "loose": None, "stream": False, "include_usage": None,
    "command_form": "text", "naming": "header", "echo_form": "minimal"})
# A messy client's output astray between a reasoning item and its message: the cut fell after
# it, summarized the reasoning and kept the message's id (found in CI; `proxy/core/boundary.py`).
@example(case=orjson.loads((Path(__file__).parent / "data/compact_output_astray.json").read_bytes()))
# A messy client's output astray between two calls of one Responses step (each with the id
# naming the step's reasoning item): the summary cut fell between them, took the reasoning and
# the first call and kept the second (found in CI; `boundary.summary_cuts`).
@example(case=orjson.loads((Path(__file__).parent / "data/compact_call_astray.json").read_bytes()))
def test_compact_is_a_turn_of_its_own_and_leaves_no_trace_in_later_context(
        rig: Rig, case: dict[str, Any]) -> None:
    client = Client(rig, case)
    elements, done = client.elements, 0
    for k, focuses in case["commands"]:
        client.add(elements[done:k])
        done = k
        if case["loose"] == "idle":
            rig.clock.now += 7 * 3600  # past `idle_seconds`: old tool results are cleared
        for n, focus_text in enumerate(focuses):
            compact_turn(client, focus_text, repeated=n > 0)
        # The user's next message (a new one after the last of the conversation).
        client.add(elements[k:k + 1] if k < len(elements) else [client.fresh_user()])
        done = k + 1
        normal_turn(client)
