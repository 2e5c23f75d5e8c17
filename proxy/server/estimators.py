"""What each model gets for counting and triggering: its token estimator and its thresholds.

Both follow from the settings and the model name alone (and the output a request reserves),
so each is made once and remembered; the bounds keep clients that invent model names from
growing the caches without end. A tokenizer no estimator has yet is loaded off the event loop
(`loaded`): some 100 ms for an encoding in tiktoken's cache, which every request and stream
would otherwise wait out. So are the counts of a request's many new bytes (`counted`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

from proxy.compaction.trigger import Thresholds, thresholds
from proxy.conversation import Entry
from proxy.settings import Settings, TokenSettings
from proxy.store.keys import MAX_KEPT_CHARS
from proxy.tokens.encoding import encoding_name, tokenizer_for
from proxy.tokens.estimate import TokenEstimator
from proxy.tokens.images import image_rule

MAX_REMEMBERED = 4096  # model names (and reserved outputs) remembered; past it, made each time
# Client bytes of new entries from which they are counted in a worker thread: some 5 ms of
# tiktoken, against some 0.1 ms for the hop.
OFF_LOOP_BYTES = 16 * 1024


async def counted(estimator: TokenEstimator, unmeasured: Sequence[Entry]) -> None:
    """Count a request's new entries (`TokenEstimator.unmeasured`) in a worker thread when
    they are many bytes, so that `build` finds them counted. tiktoken lets go of the GIL while
    it encodes: the loop serves other requests and streams meanwhile (a first request of a
    1.8 MB thread held it some 250 ms). Fewer bytes are left to `build`, on the loop."""
    if sum(len(e.source) for e in unmeasured if e.source is not None) >= OFF_LOOP_BYTES:
        estimator.adopt(await asyncio.to_thread(estimator.measure_apart, unmeasured))


Shared = dict[tuple[str, str], TokenEstimator]


class Estimators:
    def __init__(self, settings: Settings, shared: Estimators | None = None) -> None:
        """`shared`: the estimators of the config a reload replaces, whose token counters (and
        their caches) serve this one too; with a changed `tokens.safety_margin`, through
        estimators of their own that share the caches (`cache_entries` waits for a restart)."""
        self.settings = settings
        self._shared: Shared = _carried(shared, settings.tokens)  # by encoding, image rule
        self._by_model: dict[str, TokenEstimator] = {}
        self._thresholds_by: dict[tuple[str, int], Thresholds] = {}
        self._loaded: dict[tuple[str, str], TokenEstimator] = {}  # by `load`, until `adopt`

    def estimator(self, model: str) -> TokenEstimator:
        """`model`'s estimator, its tokenizer loaded here if no estimator has it yet (at start,
        for the log; a request goes through `ready` and `loaded`)."""
        found = self.ready(model)
        if found is None:
            key, make = self._recipe(model)
            found = self._remember(model, self._shared.setdefault(key, make()))
        return found

    def ready(self, model: str) -> TokenEstimator | None:
        """`estimator`, when no tokenizer must be loaded for it; else None (`loaded`)."""
        found = self._by_model.get(model)
        if found is None:
            found = self._shared.get(self._recipe(model)[0])
            if found is not None:
                self._remember(model, found)
        return found

    async def loaded(self, model: str) -> TokenEstimator:
        """`estimator`, its tokenizer loaded in a worker thread: the request that needs it
        waits, the others go on. Two such requests at once may both load it; the first kept
        is the one every later request gets."""
        key, make = self._recipe(model)
        found = self._shared.get(key)
        if found is None:
            found = self._shared.setdefault(key, await asyncio.to_thread(make))
        return self._remember(model, found)

    def thresholds(self, model: str, reserved_output: int) -> Thresholds:
        key = (model, reserved_output)
        found = self._thresholds_by.get(key)
        if found is None:
            found = thresholds(self.settings.compaction, self.settings.profile(model),
                               reserved_output)
            if len(self._thresholds_by) < MAX_REMEMBERED and len(model) <= MAX_KEPT_CHARS:
                self._thresholds_by[key] = found
        return found

    def in_use(self) -> dict[str, str]:
        """The tokenizer each configured model pattern gets, and the default's (for the log)."""
        out = {p.pattern: self.estimator(p.pattern).described for p in self.settings.models}
        out["<default>"] = self.estimator("").described
        return out

    def load(self) -> dict[str, str]:
        """`in_use`, off the event loop (a reload's): the tokenizers not loaded yet are loaded
        into estimators this object keeps to itself until `adopt`. The shared ones are only
        read here: the requests under way add to them, on the loop."""
        out = {}
        for pattern in [p.pattern for p in self.settings.models] + [""]:
            key, make = self._recipe(pattern)
            found = self._shared.get(key, self._loaded.get(key))
            if found is None:
                found = self._loaded[key] = make()
            out[pattern or "<default>"] = found.described
        return out

    def adopt(self) -> None:
        """On the loop, before this object serves: what `load` made joins the shared
        estimators (one a request made meanwhile for the same key stays, its cache with it)."""
        for key, made in self._loaded.items():
            self._shared.setdefault(key, made)
        self._loaded = {}

    def _remember(self, model: str, found: TokenEstimator) -> TokenEstimator:
        # A longer name is no model's: kept, 4,096 of them could hold gigabytes.
        if len(self._by_model) < MAX_REMEMBERED and len(model) <= MAX_KEPT_CHARS:
            self._by_model[model] = found
        return found

    def _recipe(self, model: str) -> tuple[tuple[str, str], Callable[[], TokenEstimator]]:
        """The shared key of `model`'s estimator, and how to make it (its tokenizer loaded)."""
        profile = self.settings.profile(model)
        tokenizer = profile.tokenizer if profile else None
        images = image_rule(model, profile.image_rule if profile else None)
        return (encoding_name(model, tokenizer), images.name), lambda: TokenEstimator(
            tokenizer_for(model, tokenizer), self.settings.tokens, images)


def _carried(shared: Estimators | None, tokens: TokenSettings) -> Shared:
    """The token counters a reload's estimators start with: those in force, or copies of them
    with the new safety margin that share their caches (the counts they hold are margin-free);
    none when another token setting changed."""
    if shared is None:
        return {}
    if shared.settings.tokens == tokens:
        return shared._shared
    if replace(shared.settings.tokens, safety_margin=tokens.safety_margin) != tokens:
        return {}
    # Copied first: a reload builds this off the loop, while requests add to the dict.
    return {key: found.margined(tokens.safety_margin)
            for key, found in shared._shared.copy().items()}
