"""The short way through the pipeline: a chat request the proxy has nothing to do for.

`proxy.core.needs_nothing` tells it from the request (plain messages, a body under half the
trigger in bytes; tool definitions and response schemas are counted here, as the whole way
counts them, and must leave the request under the trigger); the thread's state must hold nothing that could apply to it either: no
checkpoint, no microcompaction mark, no anchor (an anchor is the upstream's own count, which
may be above the body's bytes). Such a request goes up as the client sent it (with the usage
chunk asked for and hidden on a stream, as on the whole way), and none of the work that could
only confirm that is done: no message ids, no count, no anchor for its answer. Its line says
`tokens_at_most` (the body's bytes) where the whole way says `tokens_estimate`, and its answer
has no `x-context-tokens`.

A thread keeps taking it until a request is no longer plain or small; from then on it goes the
whole way, and its first such request is counted from scratch, as a thread new to the proxy is.
An anchor only ever raises an estimate above that count (SPEC §6), so nothing that decides a
compaction is lost: a thread leaves this way by half its trigger in tokens at the latest (a
token is a byte at least), and its answers are anchored from there on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from proxy.compaction.trigger import requested_output_tokens
from proxy.core.needs_nothing import needs_nothing
from proxy.inbound import Inbound
from proxy.outbound import build_body, needs_usage_chunk
from proxy.records import ThreadKey
from proxy.server.estimators import Estimators
from proxy.server.prepared import Attempt, Prepared
from proxy.server.relay import StreamTap
from proxy.server.request_line import RequestLine
from proxy.settings import CompactionSettings, UpstreamSettings
from proxy.store.cached import CachedStore
from proxy.threads import ThreadIdentity
from proxy.tokens.rules import request_definitions

_HEADERS = {"x-compaction": "none"}  # never changed: one for every such answer


async def untouched(inbound: Inbound, identity: ThreadIdentity, upstream: UpstreamSettings,
                    client_headers: Mapping[str, str], key: ThreadKey | None,
                    attempt: Attempt, line: RequestLine, *, store: CachedStore,
                    estimators: Estimators, compaction: CompactionSettings,
                    taps: Callable[[bool], Callable[[], StreamTap]],
                    now: Callable[[], float]) -> Prepared | None:
    """The request prepared to go up as it came, or None when it must go the whole way.

    `inbound`: a chat request whose entries are not built (they are not needed here);
    `taps(hide_usage)`: the stream tap factory, as the whole way picks it."""
    elements = inbound.elements
    # The model's estimator still reads the answer's usage (reasoning a provider does not
    # break out): a model whose tokenizer is not loaded yet goes the whole way, which loads it.
    estimator = estimators.ready(inbound.model)
    if elements is None or estimator is None:
        return None
    trigger = estimators.thresholds(inbound.model, requested_output_tokens(inbound.doc)).trigger
    command = compaction.manual_command if compaction.enabled else None
    if not needs_nothing(elements, len(inbound.body), trigger, command):
        return None
    doc = inbound.doc
    tools = doc.get("tools")
    definitions = request_definitions(doc)
    if tools is not None or definitions is not None:
        # Counted as the whole way counts them (kept per distinct definition): with the
        # messages' bytes beside them, margin and all, they must stay under the trigger.
        fixed = estimator.tools_tokens(tools) + estimator.definitions_tokens(definitions)
        if estimator.with_margin(len(inbound.body) + fixed) > trigger:
            return None
    hide_usage = inbound.stream and upstream.stream_usage and needs_usage_chunk(inbound)
    if hide_usage and "stream_options" in inbound.doc:
        # The client's own `stream_options` extended: the fields beside the list are written
        # out again, which the whole way does from the list's place in the body, found there.
        return None
    if key is not None:
        state = store.cached(key)
        if state is None:
            state = await store.load(key)
        if state.event is not None or state.microcompact is not None or state.anchors:
            return None
        store.record_request(key, now(), None)  # its activity: microcompaction's idle clock
    prepared = Prepared(inbound, identity, upstream, client_headers, inbound.body, attempt, key,
                        b"", estimator)
    if hide_usage:
        prepared.body = build_body(inbound, None, include_usage=True)
    prepared.stream_tap = taps(hide_usage)
    prepared.response_headers = _HEADERS
    prepared.untouched = True
    line.set(compaction="none", tokens_at_most=len(inbound.body))
    return prepared

