"""Running the fake upstream on its own event loop in a thread, for synchronous clients.

A synchronous client (the `openai.OpenAI` class, `requests`, a CLI under test) blocks the thread
it runs on, so the fake cannot share that thread's loop.

    with running_in_thread(limits={"small-*": 8000}) as fake:
        OpenAI(base_url=fake.url, api_key="x").chat.completions.create(...)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proxy.testing.fake_upstream import FakeUpstream

_TIMEOUT = 10.0


@contextmanager
def running_in_thread(**options: Any) -> Iterator[FakeUpstream]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-upstream", daemon=True)
    thread.start()
    fake = FakeUpstream(**options)
    try:
        asyncio.run_coroutine_threadsafe(fake.start(), loop).result(_TIMEOUT)
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(_TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_TIMEOUT)
        loop.close()
