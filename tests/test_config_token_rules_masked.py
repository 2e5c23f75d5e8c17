"""A profile's unknown `image_rule` is quoted as its unknown `tokenizer` is: with anything
shaped like a key masked (a key pasted one line off must not reach a terminal or a CI log)."""

from __future__ import annotations

from pathlib import Path

from tests.process import cli

KEY = "sk-proj-" + "abcdefghij0123456789" * 2
BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def test_an_image_rule_shaped_like_a_key_is_masked(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(BASE + f"models:\n  'm*':\n    image_rule: {KEY}\n    tokenizer: {KEY}\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 1
    assert "models.m*.image_rule: unknown family 'sk-***' (known: gpt-4o, " in result.stderr
    assert "models.m*.tokenizer: unknown encoding 'sk-***' (known: " in result.stderr
    assert KEY[8:20] not in result.stderr


def test_an_unknown_family_that_is_no_key_is_quoted_whole(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(BASE + "models:\n  'm*':\n    image_rule: gpt-4-vision\n")
    result = cli("check-config", "--config", str(config))
    assert "models.m*.image_rule: unknown family 'gpt-4-vision' (known: " in result.stderr
