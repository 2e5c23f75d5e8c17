"""What an answer's usage leaves behind: its fields on the request line and, for a thread, the
anchor the next estimate starts from (SPEC §6).

An anchor is written to the store once the context it reports reaches half the request's
trigger; below that it is kept in this process's cache alone (`CachedStore.keep_anchor`). An
anchor only ever raises an estimate above the conservative count, so after a restart the one
of a thread this far below its trigger could matter only to a turn that adds over half the
trigger at once, whose overflow upstream then buys the compaction (SPEC §9). Writing it was
the store's one write per answer, and on a busy proxy the writer thread took a share of the
event loop's GIL for it.

A Responses answer's output items also leave their sizes in the tenant's record
(`proxy.item_sizes`), whatever the thread: a later `item_reference` to one, in this thread or
another of the tenant's, counts what the item holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy import anchors
from proxy.compaction.trigger import requested_output_tokens
from proxy.conversation import RESPONSES, Entry
from proxy.identity import Identities
from proxy.item_sizes import ItemSizes, relayed
from proxy.records import Anchor, ThreadKey
from proxy.server.estimators import Estimators
from proxy.server.prepared import Prepared
from proxy.server.request_line import RequestLine
from proxy.store.cached import CachedStore
from proxy.store.keys import kept_name
from proxy.threads import loggable
from proxy.usage import Usage, normalize, plausible_usage, usage_ceiling

Keep = Callable[[ThreadKey, Anchor], None]


class UsageRecorder:
    def __init__(self, store: CachedStore, identities: Identities, estimators: Estimators,
                 log: Any, item_sizes: ItemSizes) -> None:
        self.store = store
        self.identities = identities
        self.estimators = estimators
        self.log = log
        self.item_sizes = item_sizes

    def record(self, prepared: Prepared, response: Any, raw_usage: Any, line: RequestLine,
               choices: list[Any] | None, clock: Callable[[], float]) -> None:
        api = prepared.inbound.api
        estimator = prepared.estimator
        usage = normalize(raw_usage, api, response, estimator.tokenizer.count if estimator else None)
        if usage is None or not self._plausible(prepared, usage, line):
            if usage is None and raw_usage:  # counts of no shape or value the proxy reads
                line.set(usage_ignored="unreadable")
            return
        line.set(usage_input=usage.input, usage_output=usage.output, usage_cached=usage.cached,
                 usage_reasoning=usage.reasoning)
        items = None
        if api is RESPONSES and response and estimator is not None:
            items = anchors.response_entries(api, response)  # for the anchor too
            self._record_items(prepared, items, usage)
        # Passed through (state kept upstream): no projection, and a usage that counts context
        # the proxy never saw, so no anchor.
        if not response or prepared.key is None or not prepared.projection:
            return
        keep = self._keeper(prepared, usage)
        if choices is None or len(choices) < 2:
            digests = (anchors.response_digests(api, response, self.identities) if items is None
                       else anchors.entry_digests(items, self.identities))
            keep(prepared.key, anchors.anchor_for(
                prepared.projection, prepared.context, digests, usage,
                kept_name(prepared.inbound.model), clock()))
            return
        # Several choices (`n` > 1): the client keeps any one of them.
        digests = [anchors.response_digests(api, a, self.identities) for a in choices]
        for anchor in anchors.choice_anchors(prepared.projection, prepared.context, digests,
                                             usage, kept_name(prepared.inbound.model), clock()):
            keep(prepared.key, anchor)

    def _record_items(self, prepared: Prepared, items: tuple[Entry, ...], usage: Usage) -> None:
        """The sizes of the answer's output items, for the references that may name them."""
        if prepared.inbound.doc.get("store") is False:  # upstream keeps none: none is named
            return
        assert prepared.estimator is not None
        found = relayed(items, usage, prepared.estimator.entry_tokens)
        if found:
            self.item_sizes.record(prepared.identity.tenant, found)

    def _keeper(self, prepared: Prepared, usage: Usage) -> Keep:
        """Written from half the request's trigger up, else kept in the cache alone."""
        inbound = prepared.inbound
        trigger = self.estimators.thresholds(inbound.model,
                                             requested_output_tokens(inbound.doc)).trigger
        if (usage.input + usage.visible_output) * 2 >= trigger:
            return self.store.add_anchor
        return self.store.keep_anchor

    def _plausible(self, prepared: Prepared, usage: Usage, line: RequestLine) -> bool:
        th = self.estimators.thresholds(prepared.inbound.model, 0)
        if plausible_usage(usage, usage_ceiling(th.limit if th.profiled else None)):
            return True
        line.set(usage_ignored="implausible")
        if self.log is not None:
            self.log.warning("usage_ignored", thread=loggable(prepared.identity.thread),
                             tenant=prepared.identity.tenant, reason="implausible")
        return False
