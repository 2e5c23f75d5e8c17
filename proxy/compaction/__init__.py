"""LLM compaction, the pure half (SPEC §5, §8, §9).

Each module owns one decision and does no I/O: `trigger` (when), `cutoff` (where),
`transcript` / `prompts` / `summarizer` (what the summarizer is asked, step by step),
`restore` (what comes back verbatim), `apply` (the checkpoint, the projection and its rebuild),
`postcheck` (whether the result is usable), `overflow` (reading upstream rejections),
`breaker` (when to stop trying) and `manual` (`/compact`). The server drives them and does the
HTTP calls, locking, storing and logging between them.
"""
