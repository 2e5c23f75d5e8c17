"""Usage anchors (SPEC §6): the size upstream reported, reused for the next request.

After a response, `make_anchor` ties its usage to the projection it answered (a digest of that
projection and of the request's tools/instructions bytes) and to the identity digests of the
response's entries, which the client echoes next turn at `position` (the projection's length).
`estimate` takes the latest anchor whose response the new projection still holds at that
place, after the same prefix: upstream's own count of everything up to there, plus an estimate
of what came after; never below the conservative estimate of the whole projection.

A Responses client with `store` on may echo an answer's items by `item_reference` (their id):
the anchor keeps the ids of the items it was made from, so a reference to one of them is that
item's echo. A reference no fitting anchor covers (a compaction rewrote the prefix, the client
edited an early message, dropped or moved items, or sent them under another thread) counts as
the item it names: its size as the proxy relayed it (`ReferenceSizes.get`, the tenant's record
of `proxy.item_sizes`), else by its answer's output while the thread keeps that anchor. One the
proxy never relayed (or no longer knows) is a guess, `ReferenceSizes.unknown`, not its few
bytes of JSON; the estimate says how many of its tokens are guesses (`AnchoredEstimate.guessed`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

from proxy import jsonio

from proxy.conversation import (OTHER, REASONING, Api, Entry, entry_from_chat,
                                entry_from_responses, reference_id)
from proxy.conversation import CHAT as _CHAT, RESPONSES as _RESPONSES
from proxy.identity import Identities, content_chat, digest_of
from proxy.lru import Memo
from proxy.records import Anchor
from proxy.tokens.rules import REFERENCED_ITEM
from proxy.usage import Usage

Digest = Callable[[Entry], str]


class AnchoredEstimate(NamedTuple):
    tokens: int
    anchor: Anchor | None
    # Of `tokens`, what guesses for references to items the proxy knows nothing of make up
    # (margin included): a request they alone put over the limit is not refused.
    guessed: int = 0


class ReferenceSizes(Protocol):
    """What the items a tenant's `item_reference`s name count (`proxy.item_sizes`)."""

    def get(self, item_id: str) -> int | None:
        """The tokens of an item the proxy relayed, None when it does not know it."""

    @property
    def unknown(self) -> int:
        """What an item it does not know counts."""


class _NoSizes:
    """No record: every item unknown, each a typical answer item (`REFERENCED_ITEM`)."""

    unknown = REFERENCED_ITEM

    @staticmethod
    def get(item_id: str) -> int | None:
        return None


NO_SIZES: ReferenceSizes = _NoSizes()


# Every request's estimate makes one: built by `tuple.__new__`, in C, the very value the
# class's own `__new__` (a Python function, about twice the instructions) would make.
_TUPLE_NEW = tuple.__new__


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
    if api == _CHAT:
        return (entry_from_chat(dict(response)),) if isinstance(response, Mapping) else ()
    items = response if isinstance(response, Sequence) and not isinstance(response, str) else ()
    return tuple(entry_from_responses(dict(i)) for i in items if isinstance(i, Mapping))


def make_anchor(projection: Sequence[Entry], context: bytes, response: Iterable[Entry],
                usage: Usage, digest: Digest, model: str = "", created_at: float = 0.0) -> Anchor:
    """The anchor for a response to `projection`; `digest` is `Identities.content_digest`."""
    return anchor_for(projection, context, _answer_digests(response, digest), usage, model,
                      created_at)


def response_digests(api: Api | str, response: Any, identities: Identities) -> tuple[str, ...]:
    """What `make_anchor` takes of `response_entries(api, response)` with `content_digest`."""
    if api == _CHAT and type(response) is dict:
        # One message, never a reasoning item, without client bytes: its digest is that of
        # its canonical form, and no entry needs building for it.
        return (digest_of(content_chat(response)),)
    return _answer_digests(response_entries(api, response), identities.content_digest)


def entry_digests(items: Iterable[Entry], identities: Identities) -> tuple[str, ...]:
    """`response_digests` of a Responses answer whose entries (`response_entries`) are made."""
    return _answer_digests(items, identities.content_digest)


# Between a digest and the ids that go with it. A digest is hex; an id with this in it (none
# of upstream's) is not kept, and a reference to it is then not recognised.
_SEP = " "


def _answer_digests(response: Iterable[Entry], digest: Digest) -> tuple[str, ...]:
    """What an echo of `response` must match, entry by entry: its content digest, and for a
    Responses item with an `id`, that id and the ids of the reasoning items just before it (an
    `item_reference` may stand for any of them). Reasoning items are left out: clients may
    drop them from the echo."""
    out: list[str] = []
    reasoning: list[str] = []
    for entry in response:
        item_id = entry.item_id
        named = entry.api is _RESPONSES and bool(item_id) and _SEP not in item_id
        if entry.kind is REASONING:
            if named:
                reasoning.append(item_id)
            continue
        found = digest(entry)
        out.append(_SEP.join((found, item_id, *reasoning)) if named else found)
        reasoning = []
    return tuple(out)


def anchor_for(projection: Sequence[Entry], context: bytes, digests: tuple[str, ...],
               usage: Usage, model: str = "", created_at: float = 0.0) -> Anchor:
    """The anchor for a response to `projection` whose echo has `digests`."""
    # Positional: a class called with keywords packs them into a dict and out again (some 500
    # instructions each), and every answer makes one. `test_anchors_fields` pins the order.
    return Anchor(digests, len(projection), projection_digest(projection, context), usage.input,
                  usage.visible_output, usage.cached, usage.reasoning, model, created_at)


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
    """Indexes of the anchor's response entries in `entries`, at its position; None if absent.

    An entry is echoed whole (same content digest) or by an `item_reference` to its id; the
    answer's reasoning items, whole or by reference, may come before it or not at all."""
    count = len(entries)
    if anchor.position > count:
        return None
    found: list[int] = []
    i = anchor.position
    if count and entries[0].api is _CHAT:  # no reasoning items, no references: whole echoes
        for wanted in anchor.response_digests:
            if i >= count or digest(entries[i]) != wanted:
                return None
            found.append(i)
            i += 1
        return found
    for wanted in anchor.response_digests:
        content, _, names = wanted.partition(_SEP)
        ids = names.split(_SEP) if names else ()
        while i < count and _reasoning_echo(entries[i], ids):
            i += 1
        if i >= count:
            return None
        entry = entries[i]
        referenced = reference_id(entry) if entry.kind is OTHER else None
        if referenced is None:
            if digest(entry) != content:
                return None
        elif not ids or referenced != ids[0]:
            return None
        found.append(i)
        i += 1
    return found


def _reasoning_echo(entry: Entry, ids: Sequence[str]) -> bool:
    """Whether `entry` is a reasoning item, or a reference to one of `ids[1:]` (the reasoning
    items before the answer item whose id is `ids[0]`)."""
    if entry.kind is REASONING:
        return True
    return len(ids) > 1 and entry.kind is OTHER and reference_id(entry) in ids[1:]


def estimate(entries: Sequence[Entry], sizes: Sequence[int], context: bytes,
             anchors: Sequence[Anchor], conservative_total: int, digest: Digest,
             margin: float = 0.0, references: ReferenceSizes = NO_SIZES) -> AnchoredEstimate:
    """The estimate used for decisions; `anchors` latest first, `sizes` per entry, no margin.

    References to items no count covers add what `references` knows of them, their answer's
    output, or a guess (`_unknown_references`)."""
    responses = bool(entries) and entries[0].api is _RESPONSES
    count = len(entries)
    for anchor in anchors:
        # A list holds the echo of few of the kept anchors (the others: a retried or edited
        # turn). A plain test: `compress` over `map(count.__ge__, ...)` reads as fewer Python
        # steps but costs four times the instructions (a method-wrapper call per anchor).
        if anchor.echo_end > count:
            continue
        response = echoed(entries, anchor, digest)
        if response is None:
            continue
        if projection_digest(entries[:anchor.position], context) != anchor.prefix_digest:
            continue
        if not responses:
            return _TUPLE_NEW(AnchoredEstimate, (
                max(_anchored(anchor, response, sizes, margin), conservative_total), anchor, 0))
        # Items echoed by reference: the anchor's output count covers them, and a reference's
        # own few tokens of JSON are not the item.
        referenced = sum(sizes[i] for i in response if reference_id(entries[i]) is not None)
        tokens = max(_anchored(anchor, response, sizes, margin, referenced), conservative_total)
        extra, guessed = _unknown_references(entries, anchors, margin, references, anchor,
                                             response)
        return _TUPLE_NEW(AnchoredEstimate, (tokens + extra, anchor, guessed))
    guessed = 0
    if responses:
        extra, guessed = _unknown_references(entries, anchors, margin, references)
        conservative_total += extra
    return _TUPLE_NEW(AnchoredEstimate, (conservative_total, None, guessed))


def _unknown_references(entries: Sequence[Entry], anchors: Sequence[Anchor], margin: float,
                        references: ReferenceSizes, anchor: Anchor | None = None,
                        response: Sequence[int] = ()) -> tuple[int, int]:
    """What the `item_reference`s no count covers add, and how much of it is guessed: those
    after `anchor`'s position that are not its answer's echo (before it, upstream counted them
    in the anchor's input; its reasoning items, which its output does not count, are among
    them), all of them without an anchor. See `_referenced_tokens`."""
    start = 0 if anchor is None else anchor.position
    matched = set(response)
    # Only `OTHER` entries can be references: those are picked in C, the few asked in Python.
    others = compress(range(start, len(entries)),
                      map(OTHER.__eq__, map(_KIND, entries[start:])))
    referenced = [found for i in others
                  if i not in matched and (found := reference_id(entries[i])) is not None]
    if referenced and anchor is not None:
        # Its answer's items are the echo its output counts; its reasoning items are not in
        # that count (visible output only), so they stay, counted by its reasoning.
        echo = {names.split(_SEP, 2)[1] for names in anchor.response_digests if _SEP in names}
        referenced = [found for found in referenced if found not in echo]
    return _referenced_tokens(referenced, anchors, margin, references) if referenced else (0, 0)


def _referenced_tokens(referenced: Sequence[str], anchors: Sequence[Anchor], margin: float,
                       references: ReferenceSizes = NO_SIZES) -> tuple[int, int]:
    """The tokens of the items `referenced` names, with the margin, and of them the guessed.

    An item the proxy relayed to the tenant counts its recorded size (`references.get`). One
    it no longer knows, of a kept anchor's answer, counts by that answer: upstream reported
    its output and reasoning, not each item's, so an answer any of whose items is named
    counts its whole output, and its whole reasoning if any of its reasoning items is: never
    less than the named items. Anything else is upstream's stored content the proxy never
    saw (or forgot): each counts `references.unknown`, a guess."""
    # A set: upstream refuses a list naming one item twice ("Duplicate item found with id",
    # HTTP 400, as clients quote it: continuedev/continue#10723), so no count has duplicates.
    unknown = set()
    tokens = 0
    for named in set(referenced):
        size = references.get(named)
        if size is None:
            unknown.add(named)
        else:
            tokens += size
    for kept in anchors:
        if not unknown:
            break
        if kept.output_tokens <= 0:  # one of several choices: no output of its own
            continue
        names = [digest.split(_SEP) for digest in kept.response_digests]
        answer = {n[1] for n in names if len(n) > 1} & unknown
        reasoning = {r for n in names for r in n[2:]} & unknown
        if answer:
            tokens += kept.output_tokens
        if reasoning:
            # An upper bound: OpenAI reads a stored reasoning item back within the tool-call
            # chain that made it and strips earlier turns' (its cookbook on reasoning items);
            # what it then counts of one is not documented.
            tokens += kept.reasoning_tokens
        unknown -= answer | reasoning
    guess = len(unknown) * references.unknown if unknown else 0
    # The entries' own sizes already hold each reference's JSON: a few tokens, left in.
    total = math.ceil((tokens + guess) * (1.0 + margin))
    return total, min(math.ceil(guess * (1.0 + margin)), total)


def with_references(entries: Sequence[Entry], sizes: list[int], anchors: Sequence[Anchor],
                    references: ReferenceSizes = NO_SIZES) -> list[int]:
    """`sizes` with each `item_reference` weighing the item it stands for, for what places a
    cut or a window by tokens (the kept tail, the protected window): a reference's own JSON is
    a few tokens, so a tail measured by it holds a context's worth of stored answers, and the
    estimate (`_referenced_tokens`) finds that tail alone over the trigger. An item the proxy
    relayed weighs its recorded size (`references.get`), else one of a kept anchor's answer its
    share of that answer's output (or reasoning), any other `references.unknown`. `sizes`
    itself when no entry is a reference."""
    if not entries or entries[0].api is not _RESPONSES:
        return sizes
    others = compress(range(len(entries)), map(OTHER.__eq__, map(_KIND, entries)))
    found = [(i, named) for i in others if (named := reference_id(entries[i])) is not None]
    if not found:
        return sizes
    weights: dict[str, int] = {}
    for kept in anchors:  # latest first: its share wins
        names = [digest.split(_SEP) for digest in kept.response_digests]
        answer = [n[1] for n in names if len(n) > 1]
        reasoning = [r for n in names for r in n[2:]]
        if kept.output_tokens > 0 and answer:
            share = math.ceil(kept.output_tokens / len(answer))
            weights.update((named, share) for named in answer if named not in weights)
        if kept.reasoning_tokens > 0 and reasoning:
            share = math.ceil(kept.reasoning_tokens / len(reasoning))
            weights.update((named, share) for named in reasoning if named not in weights)
    unknown = references.unknown
    out = list(sizes)
    for i, named in found:
        size = references.get(named)
        out[i] += size if size is not None else weights.get(named, unknown)
    return out


_KIND = attrgetter("kind")


def _anchored(anchor: Anchor, response: list[int], sizes: Sequence[int], margin: float,
              referenced: int = 0) -> int:
    """`referenced`: the sizes of the echoed entries that are `item_reference`s."""
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
    echoed -= referenced
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
