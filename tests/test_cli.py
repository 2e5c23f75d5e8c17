"""The `compaction-proxy` command: config checks, serving, graceful shutdown."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from proxy.settings import (ConfigError, ModelProfile, Route, Settings, UpstreamSettings,
                            load_settings, masked, parse_settings, redacted_url)
from proxy.testing.replies import Reply
from tests.process import ProxyProcess, cli, write_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_config_is_valid() -> None:
    result = cli("check-config", "--config", str(ROOT / "config" / "proxy.yaml"))
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["server"]["port"] == 8787
    assert resolved["routes"] == [{"model": "*", "upstream": "openai"}]


def test_check_config_masks_secrets_and_interpolates(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text("upstreams:\n  main:\n    base_url: ${BASE:-http://127.0.0.1:9/v1}\n"
                      "    api_key: sk-live-abcdefghijklmnopqrstuvwxyz\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "abcdefghijklmnopqrstuvwxyz" not in result.stdout
    assert yaml.safe_load(result.stdout)["upstreams"]["main"]["base_url"] == "http://127.0.0.1:9/v1"


def test_a_bad_config_exits_1_naming_each_key_and_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("server:\n  port: eighty\n  prot: 1\nupstreams:\n  u:\n    base_url: ftp://x\n"
                      "routes:\n  - model: '*'\n    upstream: nowhere\n"
                      "compaction:\n  trigger_ratio: 2\n  api_key: ${MISSING_VAR}\n")
    for command in ("check-config", "serve"):
        result = cli(command, "--config", str(config))
        assert result.returncode == 1
        for fragment in ("server.port: expected an integer", "server.prot: unknown key",
                         "upstreams.u.base_url: must be an http(s) URL",
                         "routes[0].upstream: no upstream named 'nowhere'",
                         "compaction.trigger_ratio: must be at most 1.0",
                         "compaction.api_key: environment variable MISSING_VAR is not set"):
            assert fragment in result.stderr, (command, fragment, result.stderr)


def test_a_missing_config_file_is_reported(tmp_path: Path) -> None:
    result = cli("serve", "--config", str(tmp_path / "absent.yaml"))
    assert result.returncode == 1 and "cannot read" in result.stderr


def test_sigterm_lets_an_inflight_stream_finish(tmp_path: Path, make_fake, make_client) -> None:
    fake = make_fake(chunk_delay=0.05)
    fake.script(Reply.text(" ".join(f"word{i}" for i in range(40))))
    proxy = ProxyProcess(write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state"))
    try:
        client = make_client(proxy.base_url, "sk-x")
        stream = client.chat.completions.create(model="gpt-4o", stream=True,
                                                messages=[{"role": "user", "content": "go"}])
        chunks = iter(stream)
        first = next(chunks)
        threading.Timer(0.1, proxy.signal, (signal.SIGTERM,)).start()
        text = (first.choices[0].delta.content or "") + "".join(
            c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.split() == [f"word{i}" for i in range(40)]
        assert proxy.wait() == 0
        assert proxy.events("shutting_down") and proxy.events("stopped")
    finally:
        proxy.kill()


def test_serve_flags_override_the_file(tmp_path: Path, fake) -> None:
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          server={"port": 1})  # port 1 would fail: the flag must win
    proxy = ProxyProcess(config, "--port", "0", "--host", "127.0.0.1")
    try:
        assert proxy.port not in (0, 1)
        assert httpx.get(f"http://127.0.0.1:{proxy.port}/healthz").status_code == 200
    finally:
        proxy.signal(signal.SIGTERM)
        assert proxy.wait() == 0
        proxy.kill()


# Config loading: every bad file ends in a ConfigError, `${VAR}` typing, masking, empty keys.

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def _settings(text: str, **env: str) -> Settings:
    return parse_settings(yaml.safe_load(text), env)


def _problems(text: str, **env: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        _settings(text, **env)
    return error.value.problems


def test_a_file_that_is_not_utf8_is_named_with_its_problem(tmp_path: Path) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes(b"\xff\xfe bad bytes\n")
    for command in ("check-config", "serve"):
        result = cli(command, "--config", str(config))
        assert result.returncode == 1
        assert f"{config} is not UTF-8 text: byte 0xff at offset 0" in result.stderr
        assert "Traceback" not in result.stderr


def test_a_recursive_alias_is_named_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "loop.yaml"
    config.write_text(BASE + "threads:\n  headers: &h [x-a, *h]\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "threads.headers[1]: a YAML alias refers to a node that contains it" in result.stderr


@pytest.mark.parametrize("text, problem", [
    ("a: &a [*a]\n", "a[0]: a YAML alias refers to a node that contains it"),
    ("server: &s\n  inner: *s\n", "server.inner: a YAML alias refers to a node that contains it"),
    ("a: " + "[" * 600 + "]" * 600 + "\n", "nests too deeply"),
    ("server:\n  port: " + "9" * 5000 + "\n", "has a value YAML cannot read"),
    ("state:\n  path: 2024-13-45\n", "has a value YAML cannot read: month must be in 1..12"),
    ("upstreams:\n  u:\n    base_url: http://[::1/v1\n", "upstreams.u.base_url: must be an http"),
    ("upstreams:\n  u:\n    base_url: http://h:port/v1\n", "upstreams.u.base_url: must be an http"),
    (BASE + "server:\n  shutdown_grace_s: .nan\n", "server.shutdown_grace_s: must be a finite"),
])
def test_every_way_a_file_can_be_bad_is_a_config_error(tmp_path: Path, text: str,
                                                       problem: str) -> None:
    _, problems = _refused(tmp_path / "bad.yaml", text)
    assert any(problem in line for line in problems), problems


def _refused(config: Path, text: str) -> tuple[Path, list[str]]:
    """`text` written to `config`, and the problems loading it raises."""
    config.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_settings(config, {})
    return config, error.value.problems


@pytest.mark.parametrize("text, problem", [
    (BASE + "server:\n  port: 9000\nstate:\n  path: /s\nserver:\n  host: 0.0.0.0\n",
     "duplicate key 'server' (line 8, column 1)"),
    ("upstreams:\n  u:\n    base_url: http://h/v1\n    base_url: http://other/v1\n",
     "duplicate key 'base_url' (line 4, column 5)"),
], ids=["section", "key"])
def test_a_key_given_twice_is_refused_not_silently_the_last(tmp_path: Path, text: str,
                                                             problem: str) -> None:
    config, problems = _refused(tmp_path / "twice.yaml", text)
    assert problems == [f"<file>: {config} is not valid YAML: {problem}"]


def test_merged_keys_may_be_overridden(tmp_path: Path) -> None:
    config = tmp_path / "merge.yaml"
    config.write_text("upstreams:\n  a: &a {base_url: 'http://h/v1', timeout_s: 5}\n"
                      "  b:\n    <<: *a\n    timeout_s: 9\n"
                      "routes:\n  - {model: '*', upstream: b}\n")
    assert load_settings(config, {}).upstreams["b"].timeout_s == 9


def test_a_yaml_error_does_not_quote_the_line(tmp_path: Path) -> None:
    # PyYAML's message shows the offending line: here the key, on the proxy's stderr.
    config = tmp_path / "colon.yaml"
    config.write_text("upstreams:\n  u:\n    base_url: http://h/v1\n    api_key: sk-LEAK: x\n")
    with pytest.raises(ConfigError) as error:
        load_settings(config, {})
    assert error.value.problems == [f"<file>: {config} is not valid YAML: mapping values are "
                                    "not allowed here (line 4, column 21): a key indented "
                                    "deeper than the one above it, or a value holding ': ' "
                                    "(quote it)"]


def _config_keys() -> list[str]:
    def keys(value: object) -> Iterator[str]:
        if isinstance(value, dict):
            for key, inner in value.items():
                yield key
                yield from keys(inner)
    names = set(keys(asdict(Settings())))
    return sorted(names | {f.name for kind in (UpstreamSettings, ModelProfile, Route)
                           for f in fields(kind)})


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                    st.sampled_from(["${N}", "${N:-}", "x${N}", "http://[::1", "http://u:p@h/v1",
                                     "http://h:99999/v1", "Europe/Paris", "../../etc", "gpt-*"]))
_TREES = st.recursive(_VALUES, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(_config_keys()) | st.text(max_size=4),
                                        inner, max_size=4), max_leaves=30)


def _leaves(value: object) -> Iterator[object]:
    if isinstance(value, dict):
        for inner in value.values():
            yield from _leaves(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from _leaves(inner)
    else:
        yield value


@given(tree=st.dictionaries(st.sampled_from(_config_keys()), _TREES, max_size=6),
       variable=st.text(max_size=10))
def test_any_parsed_yaml_gives_settings_or_a_config_error(tree: dict[str, Any],
                                                          variable: str) -> None:
    try:
        settings = parse_settings(tree, {"N": variable})
    except ConfigError:
        return
    # What check-config prints is plain data (no `str` subclass for yaml.safe_dump to refuse).
    plain = (str, int, float, bool, type(None))
    assert all(type(leaf) in plain for leaf in _leaves(masked(settings)))


def test_a_whole_env_reference_is_read_as_the_number_or_boolean_the_key_takes() -> None:
    settings = _settings(BASE + "server:\n  port: ${PORT}\n  shutdown_grace_s: '${GRACE}'\n"
                         "threads:\n  forward_headers: ${FORWARD}\n"
                         "compaction:\n  enabled: ${ON:-false}\n  trigger_ratio: ${RATIO}\n",
                         PORT="8080", GRACE="5", FORWARD="no", RATIO="0.5")
    assert settings.server.port == 8080 and type(settings.server.port) is int
    assert settings.server.shutdown_grace_s == 5.0
    assert settings.threads.forward_headers is False
    assert settings.compaction.enabled is False
    assert settings.compaction.trigger_ratio == 0.5


def test_check_config_reads_a_port_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PROXY_TEST_PORT", "8080")
    config = tmp_path / "env.yaml"
    config.write_text(BASE + "server:\n  port: ${PROXY_TEST_PORT}\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["server"]["port"] == 8080


def test_interpolation_inside_longer_text_stays_text() -> None:
    problems = _problems(BASE + "server:\n  port: 80${TAIL}\n", TAIL="80")
    assert ("server.port: expected an integer, got a string of 4 characters (not shown: it may "
            "be a secret)") in problems


def test_text_keys_keep_a_numeric_env_value_as_text() -> None:
    settings = _settings("upstreams:\n  u:\n    base_url: http://h/v1\n    api_key: ${KEY}\n"
                         "compaction:\n  manual_command: ${COMMAND}\n", KEY="12345", COMMAND="true")
    assert settings.upstreams["u"].api_key == "12345"
    assert type(settings.upstreams["u"].api_key) is str
    assert settings.compaction.manual_command == "true"


@pytest.mark.parametrize("value", ["{port: 1}", "[8080]", "8080\n", " 8080", "&a 8080",
                                   "!!int 8080", "8080 # the port", "", "null", "2024-01-01"])
def test_an_env_value_that_is_not_a_plain_number_stays_text(value: str) -> None:
    problems = _problems(BASE + "server:\n  port: ${PORT}\n", PORT=value)
    got = f"a string of {len(value)} characters" if value else "an empty string"
    assert any(p.startswith(f"server.port: expected an integer, got {got}") for p in problems)


def test_an_env_value_never_becomes_a_list_or_a_mapping() -> None:
    problems = _problems(BASE + "threads:\n  headers: ${HEADERS}\n", HEADERS="[x-a, x-b]")
    assert "threads.headers: expected a list of non-empty strings" in problems
    settings = _settings(BASE + "compaction:\n  manual_command: ${COMMAND}\n", COMMAND="{a: 1}")
    assert settings.compaction.manual_command == "{a: 1}"


def test_credentials_in_base_url_are_refused_without_showing_the_password(tmp_path: Path) -> None:
    # aiohttp cannot send URL credentials beside an Authorization header, and every request
    # carries one: such a base_url would turn every request into a 500.
    config = tmp_path / "creds.yaml"
    config.write_text("upstreams:\n  u:\n    base_url: http://user:pa55word@127.0.0.1:9/v1\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 1 and "pa55word" not in result.stdout + result.stderr
    assert ("upstreams.u.base_url: must not carry credentials (user:password@), got "
            "'http://user:***@127.0.0.1:9/v1'; set api_key instead" in result.stderr)

    config.write_text("upstreams:\n  u:\n    base_url: ftp://user:pa55word@host/v1\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 1 and "pa55word" not in result.stderr
    assert ("upstreams.u.base_url: must be an http(s) URL, got 'ftp://user:***@host/v1'"
            in result.stderr)


@pytest.mark.parametrize("url, shown", [
    ("http://user:pa55word@h/v1", "http://user:***@h/v1"),
    ("https://user:p@ss@h:8443/v1?k=1", "https://user:***@h:8443/v1?k=***"),
    ("http://user@h/v1", "http://user@h/v1"),
    ("http://h:8080/v1/a@b", "http://h:8080/v1/a@b"),
    ("http://[::1/v1", "http://[::1/v1"),
    ("https://h/v1beta/openai?key=AIzaSECRET", "https://h/v1beta/openai?key=***"),
    ("https://h/v1?api-version=1&api-key=S3CRET#top", "https://h/v1?api-version=***&api-key=***#top"),
    ("https://h/v1?flag&k=", "https://h/v1?flag&k=***"),
])
def test_redacted_url_hides_the_password_and_query_values(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_check_config_masks_a_key_carried_in_the_base_url_query(tmp_path: Path) -> None:
    config = tmp_path / "query.yaml"
    config.write_text("upstreams:\n  g:\n    base_url: https://h.invalid/v1?key=QUERYSECRET123\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "QUERYSECRET123" not in result.stdout
    assert yaml.safe_load(result.stdout)["upstreams"]["g"]["base_url"] == "https://h.invalid/v1?key=***"


def test_an_unset_variable_is_one_problem_not_two() -> None:
    assert _problems(BASE + "server:\n  port: ${UNSET_PORT}\n") == [
        "server.port: environment variable UNSET_PORT is not set (export it, or give a "
        "default: ${UNSET_PORT:-value})"]


def test_a_default_stands_in_for_a_variable_set_empty_as_in_a_shell() -> None:
    # `docker compose` passes `VAR=${VAR}` through as an empty value when the host has none.
    settings = _settings("upstreams:\n  u:\n    base_url: ${URL:-http://h/v1}\n"
                         "server:\n  port: ${PORT:-8080}\n", URL="", PORT="")
    assert settings.upstreams["u"].base_url == "http://h/v1"
    assert settings.server.port == 8080


@pytest.mark.parametrize("text, env", [
    ("upstreams:\n  u:\n    base_url: ''\n", {}),
    ("upstreams:\n  u:\n    base_url: ${URL}\n", {"URL": ""}),
], ids=["empty", "empty variable"])
def test_an_empty_base_url_is_refused(text: str, env: dict[str, str]) -> None:
    assert _problems(text, **env) == ["upstreams.u.base_url: must be an http(s) URL, got ''"]


@pytest.mark.parametrize("command", ["", " /compact", "/compact\t"])
def test_a_manual_command_that_cannot_be_typed_as_such_is_refused(command: str) -> None:
    # "" made every empty user message a /compact, answered without the model; a command with
    # a space at either end never matched (messages are read stripped).
    assert _problems(BASE + "compaction:\n  manual_command: ${C}\n", C=command) == [
        "compaction.manual_command: must be non-empty, without spaces at either end, "
        f"got {command!r}"]


def test_two_upstreams_without_routes_are_refused() -> None:
    # Only one upstream makes a default route: without routes every request was a 404.
    two = BASE + "  v:\n    base_url: http://127.0.0.1:10/v1\n"
    assert _problems(two) == ["routes: is required with more than one upstream (u, v)"]
    assert _settings(two + "routes:\n  - {model: '*', upstream: v}\n").route("m").name == "v"


def test_an_empty_api_key_forwards_client_credentials_with_a_warning(tmp_path: Path) -> None:
    config = tmp_path / "empty.yaml"
    config.write_text("upstreams:\n  u:\n    base_url: http://h/v1\n    api_key: ${UNSET_KEY:-}\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert (f"compaction-proxy: warning: {config}: upstreams.u.api_key: is empty, so upstream 'u' "
            "gets each client's own Authorization header") in result.stderr
    assert yaml.safe_load(result.stdout)["upstreams"]["u"]["api_key"] is None


def test_serve_warns_at_start_about_an_empty_api_key(tmp_path: Path, fake) -> None:
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          upstreams={"fake": {"base_url": fake.url, "api_key": ""}})
    proxy = ProxyProcess(config)
    try:
        assert b"upstreams.fake.api_key: is empty, so upstream 'fake'" in b"".join(proxy.raw)
    finally:
        proxy.signal(signal.SIGTERM)
        assert proxy.wait() == 0
        proxy.kill()


@pytest.mark.parametrize("key", ["sk-abc\n", "sk-abc\r\nX-Injected: 1"])
def test_an_api_key_with_a_line_break_is_rejected(key: str) -> None:
    problems = _problems(BASE + "    api_key: ${KEY}\n", KEY=key)
    assert ("upstreams.u.api_key: contains a line break (a trailing newline from a secret file?)"
            in problems)


def _startup_failure(result: Any) -> str:
    """The one stderr line of a start that failed, after checking that it is one line."""
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and "Logging error" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_port_in_use_is_one_line_naming_the_address(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
        line = _startup_failure(cli("serve", "--config", str(config), "--port", str(port)))
    assert line.startswith(f"compaction-proxy: cannot listen on 127.0.0.1:{port}: "), line
    assert line.endswith(f"(server.host/server.port in {config}, or --host/--port)"), line


@pytest.mark.parametrize("make_state, fragment", [
    (lambda d: d.write_text("a file, not a directory"), "Not a directory"),
    (lambda d: (d.mkdir(), (d / "state.db").write_bytes(b"garbage" * 1000)),
     "file is not a database"),
])
def test_a_state_that_cannot_be_opened_is_one_line_naming_it(tmp_path: Path, make_state: Any,
                                                              fragment: str) -> None:
    state = tmp_path / "state"
    make_state(state)
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", state)
    line = _startup_failure(cli("serve", "--config", str(config)))
    assert line.startswith(f"compaction-proxy: cannot open the state in {state}: "), line
    assert fragment in line and line.endswith(f"(state.path in {config})"), line


@pytest.mark.parametrize("port", ["99999", "-5", "http"])
def test_a_bad_port_flag_is_refused_before_anything_starts(tmp_path: Path, port: str) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    result = cli("serve", "--config", str(config), "--port", port)
    assert result.returncode == 2 and "argument --port" in result.stderr, result.stderr
    assert not (tmp_path / "state").exists()


def test_a_tokenizer_that_names_no_known_encoding_is_a_config_error(tmp_path: Path) -> None:
    # It would never load: every estimate would count with the fallback, without a word.
    config = tmp_path / "tokenizer.yaml"
    config.write_text(BASE + "models:\n  'gpt-4o*':\n    tokenizer: o200k\n"
                             "  big:\n    tokenizer: cl100k_base\n")
    for command in ("check-config", "serve"):
        result = cli(command, "--config", str(config))
        assert result.returncode == 1, (command, result.stderr)
        assert "models.gpt-4o*.tokenizer: unknown encoding 'o200k' (known: " in result.stderr
        assert "models.big" not in result.stderr


def test_an_empty_host_flag_is_refused_not_ignored(tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text(BASE)
    result = cli("serve", "--config", str(config), "--host", " ")
    assert result.returncode == 2 and "argument --host: must not be empty" in result.stderr
