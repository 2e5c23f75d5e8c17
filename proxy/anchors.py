"""Usage anchors (SPEC §6): the size upstream reported, reused for the next request.

After a response, `make_anchor` ties its usage to the projection it answered (a digest of that
projection and of the request's tools/instructions bytes) and to the identity digests of the
response's entries, which the client echoes next turn at `position` (the projection's length).
`estimate` takes the latest anchor whose response the new projection still holds at that
place, after the same prefix: upstream's own count of everything up to there, plus an estimate
of what came after; never below the conservative estimate of the whole projection.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress
from operator import attrgetter
from typing import Any, NamedTuple

from proxy import jsonio

from proxy.conversation import Api, Entry, Kind, entry_from_chat, entry_from_responses
from proxy.identity import Identities, content_chat, digest_of
from proxy.lru import Memo
from proxy.records import Anchor
from proxy.usage import Usage

Digest = Callable[[Entry], str]


class AnchoredEstimate(NamedTuple):
    tokens: int
    anchor: Anchor | None


def projection_digest(entries: Iterable[Entry], context: bytes = b"") -> str:
    """A digest of `context` and of each entry's bytes, prompt-cache markers left out.

    Each entry enters by the 16-byte blake2b of its bytes, which for an untouched entry is its
    `anchor_key`, already computed: a steady request hashes a few bytes per entry, not the
    whole body.
    The context's part is hashed once per distinct context (see `_CONTEXT_HASHES`).
    """
    h = _CONTEXT_HASHES[context].copy()
    # One update of the keys joined digests what one update per key would (a hash reads a
    # stream), and reading them with `map` runs no Python step per entry.
    entries = tuple(entries)  # the very tuple when it is one (a projection is)
    keys = list(map(_KEY, entries))
    if None in keys:  # entries the proxy made or changed have no client bytes
        keys = [_entry_digest(e) for e in entries]
    h.update(b"".join(keys))
    return h.hexdigest()


# Not the bytes' own digest: a prompt-cache marker moved by the client changes no count.
_KEY = attrgetter("anchor_key")


def _context_hash(context: bytes) -> Any:
    h = hashlib.blake2b(digest_size=16)
    h.update(len(context).to_bytes(8, "little"))
    h.update(context)
    return h


# An agent sends the same tools and instructions with every request, often tens of KB, and
# each request digests them twice (the anchor check, the new anchor): hashed once, the state
# is copied. Bounded: at most 16 contexts of at most 256 KB are held.
_CONTEXT_HASHES: Memo[bytes, Any] = Memo(_context_hash, max_entries=16, max_chars=256 * 1024)


def _entry_digest(entry: Entry) -> bytes:
    if entry.anchor_key is not None:
        return entry.anchor_key
    return hashlib.blake2b(entry.to_bytes(), digest_size=16).digest()


def response_entries(api: Api | str, response: Any) -> tuple[Entry, ...]:
    """Entries of a response: the chat message, or the Responses output items."""
    if api == Api.CHAT:
        return (entry_from_chat(dict(response)),) if isinstance(response, Mapping) else ()
    items = response if isinstance(response, Sequence) and not isinstance(response, str) else ()
    return tuple(entry_from_responses(dict(i)) for i in items if isinstance(i, Mapping))


def make_anchor(projection: Sequence[Entry], context: bytes, response: Iterable[Entry],
                usage: Usage, digest: Digest, model: str = "", created_at: float = 0.0) -> Anchor:
    """The anchor for a response to `projection`; `digest` is `Identities.content_digest`."""
    # Reasoning items are left out: clients may drop them from the echo.
    digests = tuple(digest(e) for e in response if e.kind is not Kind.REASONING)
    return anchor_for(projection, context, digests, usage, model, created_at)


def response_digests(api: Api | str, response: Any, identities: Identities) -> tuple[str, ...]:
    """What `make_anchor` takes of `response_entries(api, response)` with `content_digest`."""
    if api == Api.CHAT and type(response) is dict:
        # One message, never a reasoning item, without client bytes: its digest is that of
        # its canonical form, and no entry needs building for it.
        return (digest_of(content_chat(response)),)
    return tuple(identities.content_digest(e) for e in response_entries(api, response)
                 if e.kind is not Kind.REASONING)


def anchor_for(projection: Sequence[Entry], context: bytes, digests: tuple[str, ...],
               usage: Usage, model: str = "", created_at: float = 0.0) -> Anchor:
    """The anchor for a response to `projection` whose echo has `digests`."""
    return Anchor(response_digests=digests, position=len(projection),
                  prefix_digest=projection_digest(projection, context),
                  input_tokens=usage.input, output_tokens=usage.visible_output,
                  cached_tokens=usage.cached, reasoning_tokens=usage.reasoning,
                  model=model, created_at=created_at)


def choice_anchors(projection: Sequence[Entry], context: bytes,
                   choices: Sequence[tuple[str, ...]], usage: Usage, model: str = "",
                   created_at: float = 0.0) -> list[Anchor]:
    """The anchors for an answer of several choices (`n` > 1), `choices` their digests.

    The client keeps one of them, any: each gets an anchor. Upstream's output count is all the
    choices' together, with no share per choice, so none is claimed: the kept choice counts by
    its own estimate (`_anchored` takes the larger), and the input count is upstream's.
    """
    if len(choices) == 1:
        return [anchor_for(projection, context, choices[0], usage, model, created_at)]
    prefix = projection_digest(projection, context)
    return [Anchor(response_digests=digests, position=len(projection), prefix_digest=prefix,
                   input_tokens=usage.input, output_tokens=0, cached_tokens=usage.cached,
                   model=model, created_at=created_at)
            for digests in dict.fromkeys(choices)]  # equal choices: one anchor serves them


def echoed(entries: Sequence[Entry], anchor: Anchor, digest: Digest) -> list[int] | None:
    """Indexes of the anchor's response entries in `entries`, at its position; None if absent."""
    if anchor.position > len(entries):
        return None
    found: list[int] = []
    i = anchor.position
    for wanted in anchor.response_digests:
        while i < len(entries) and entries[i].kind is Kind.REASONING:
            i += 1
        if i >= len(entries) or digest(entries[i]) != wanted:
            return None
        found.append(i)
        i += 1
    return found


def estimate(entries: Sequence[Entry], sizes: Sequence[int], context: bytes,
             anchors: Sequence[Anchor], conservative_total: int, digest: Digest,
             margin: float = 0.0) -> AnchoredEstimate:
    """The estimate used for decisions; `anchors` latest first, `sizes` per entry, no margin."""
    for anchor in _fitting(anchors, len(entries)):
        response = echoed(entries, anchor, digest)
        if response is None:
            continue
        if projection_digest(entries[:anchor.position], context) != anchor.prefix_digest:
            continue
        return AnchoredEstimate(max(_anchored(anchor, response, sizes, margin),
                                    conservative_total), anchor)
    return AnchoredEstimate(conservative_total, None)


_ECHO_END = attrgetter("echo_end")


def _fitting(anchors: Sequence[Anchor], count: int) -> Iterator[Anchor]:
    """The anchors whose echo fits in a list of `count` entries, in order; the others (a
    retried or edited turn) are skipped in C: a list holds the echo of few of the kept ones."""
    return compress(anchors, map(count.__ge__, map(_ECHO_END, anchors)))


def _anchored(anchor: Anchor, response: list[int], sizes: Sequence[int], margin: float) -> int:
    position = anchor.position
    end = position + len(response)
    if response and response[0] == position and response[-1] == end - 1:
        # The echo right at the anchor's place, no reasoning item between (indexes only
        # grow): the sums of two slices, summed in C.
        echoed, after = sum(sizes[position:end]), sum(sizes[end:])
    else:
        matched = set(response)
        echoed = sum(sizes[i] for i in response)
        after = sum(sizes[i] for i in range(position, len(sizes)) if i not in matched)
    # The echo may carry more than the visible output (reasoning a provider wants back).
    return anchor.input_tokens + max(anchor.output_tokens, echoed) + math.ceil(
        after * (1.0 + margin))


def context_bytes(tools: Any = None, instructions: Any = None, model: str = "",
                  definitions: Any = None) -> bytes:
    """What besides the list shapes the count: tools, instructions, legacy functions and response
    schema (`rules.request_definitions`), and the model's tokenizer."""
    if tools is None and instructions is None and definitions is None:
        return _BARE_CONTEXTS[model]
    return _context(model, tools, instructions, definitions)


def _context(model: str, tools: Any = None, instructions: Any = None,
             definitions: Any = None) -> bytes:
    # Without definitions, the bytes anchors stored before they were counted.
    if definitions is None:
        return jsonio.dumps([model, tools, instructions])
    return jsonio.dumps([model, tools, instructions, definitions])


# A request without tools or instructions has a context of its model alone: one per model.
_BARE_CONTEXTS: Memo[str, bytes] = Memo(_context, max_entries=1024, max_chars=256)
