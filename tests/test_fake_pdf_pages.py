"""The fake upstream plays the provider, which renders every page of a PDF: it counts pages as
a reader does (the page tree's `/Count`, in object streams too), with its own reader rather than
the proxy's, so a page the proxy's reader misses shows as a difference, not as agreement."""

from __future__ import annotations

import pytest

from proxy.testing import reference_media
from proxy.testing.reference_tokens import chat_message_tokens
from tests.media_samples import b64, packed_pdf, pdf


@pytest.mark.parametrize("pages", [1, 17, 36, 250])
def test_the_fake_counts_pages_packed_in_object_streams(pages: int) -> None:
    assert reference_media.pdf_pages(b64(packed_pdf(pages))) == pages
    assert reference_media.pdf_pages(b64(packed_pdf(pages, per_stream=5))) == pages


def test_the_fake_counts_a_classic_pdfs_pages() -> None:
    assert reference_media.pdf_pages(b64(pdf(9, padding=50_000))) == 9


def test_a_pdf_costs_the_fake_a_page_image_and_its_text_per_page() -> None:
    def cost(document: bytes) -> int:
        part = {"type": "file", "file": {"file_data": "data:application/pdf;base64," + b64(document)}}
        return chat_message_tokens({"role": "user", "content": [part]}, "gpt-4o")
    assert cost(packed_pdf(17)) - cost(packed_pdf(1)) == 16 * (765 + reference_media.PDF_PAGE_TEXT)
