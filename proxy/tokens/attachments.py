"""What audio and file parts cost in input tokens: by what they are, never by their base64 text.

Counted as text, a 5 MB PDF was millions of tokens and the proxy compacted or refused a request
the upstream accepts (and tiktoken spent seconds on it). Instead:

- Audio (`input_audio`: base64 wav or mp3) by its duration, at AUDIO_TOKENS_PER_MINUTE. OpenAI
  documents no rate for audio input; the Realtime guide's user audio is 1 token per 100 ms
  (600 a minute) and the per-minute prices of its audio models work out near 1000 a minute:
  the larger is used. Audio we cannot read is counted at a low bitrate, so its duration errs long.
- A PDF (`file.file_data`, Responses `input_file.file_data`) by its pages: OpenAI puts each
  page's extracted text and an image of the page into the context. A page costs the model's
  image rule for a letter page rendered to 768x994 (the tile rule's scale) plus
  PAGE_TEXT_TOKENS, above a dense page of text (500-800 tokens). The pages are read by
  `pdf.py`, in object streams too; a PDF whose pages it cannot read (encrypted, another filter,
  broken) or which met its bounds is counted at one page per PDF_BYTES_PER_PAGE at least.
- Other file data: a quarter of its bytes, as text of ~4 bytes a token would count.
- A file by reference (`file_id`, `file_url`): nothing to measure, counted as one PDF page.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from proxy.tokens import media
from proxy.tokens.images import DEFAULT_RULE, ImageRule
from proxy.tokens.pdf import pdf_pages

AUDIO_TOKENS_PER_MINUTE = 1000
UNKNOWN_AUDIO_BYTES_PER_SECOND = 4000  # 32 kbit/s, the low end of speech mp3
PAGE_TEXT_TOKENS = 1000
PAGE_SIZE = (768, 994)  # a US letter page with its short side scaled to 768 px
# Low on purpose, for PDFs whose pages cannot be read (SPEC §6: never below a conservative
# estimate). Text is the densest common PDF: the pdfTeX manuals in Debian's docs take 7-8 KB a
# page (libtasn1: 256 KB, 36 pages; shared-mime-info: 137 KB, 17); a long book sharing its fonts
# over hundreds of pages may take less. A scan (100 KB a page and more) comes out many pages
# long: an early compaction rather than a refused call. At 50 KB that manual came out 6 pages.
PDF_BYTES_PER_PAGE = 5_000


def audio_tokens(audio: Any) -> int:
    """An `input_audio` part's `input_audio`: `{"data": base64, "format": "wav" | "mp3"}`."""
    if not isinstance(audio, Mapping) or not isinstance(audio.get("data"), str):
        return 0
    data = media.data_of(audio["data"])
    seconds = media.wav_seconds(data) if audio.get("format") != "mp3" else None
    if seconds is None:
        seconds = media.mp3_seconds(data)
    if seconds is None:
        seconds = media.decoded_size(data) / UNKNOWN_AUDIO_BYTES_PER_SECOND
    return math.ceil(seconds * AUDIO_TOKENS_PER_MINUTE / 60)


def page_tokens(rule: ImageRule = DEFAULT_RULE) -> int:
    return rule.size_tokens(*PAGE_SIZE) + PAGE_TEXT_TOKENS


def file_tokens(file: Any, rule: ImageRule = DEFAULT_RULE) -> int:
    """A chat `file` part's `file`, or a Responses `input_file` part itself."""
    if not isinstance(file, Mapping):
        return 0
    data = file.get("file_data")
    if not isinstance(data, str) or not data:
        return page_tokens(rule)
    data = media.data_of(data)
    if media.is_pdf(data):
        return pdf_page_count(data) * page_tokens(rule)
    return math.ceil(media.decoded_size(data) / 4)


def pdf_page_count(data: str) -> int:
    """The pages read, or one per PDF_BYTES_PER_PAGE when none were or a bound stopped the
    reading and that is more."""
    read = pdf_pages(data)
    if read.complete and read.found:
        return read.found
    return max(read.found, math.ceil(media.decoded_size(data) / PDF_BYTES_PER_PAGE))
