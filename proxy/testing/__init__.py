"""Test doubles shared by the suite and the demos: the fake OpenAI-compatible upstream.

- `rules`: pure validation of chat and Responses requests, per provider dialect (no I/O).
- `fake_upstream.FakeUpstream`: the aiohttp server; `replies.Reply` scripts what it answers;
  `background.running_in_thread` runs it for synchronous clients.
- `reference_tokens`: the fake's "true" token count; `messages`: message factories.
- `stored_items`: stored answers' output items, which `item_reference`s name;
  `response_store`: the stored answers themselves; `conversations`: those made by
  `POST /v1/conversations`, which a Responses request must name; all per credential.
- `python -m proxy.testing`: run it standalone.
"""
