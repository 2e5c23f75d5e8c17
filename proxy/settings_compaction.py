"""The `compaction:` section of the configuration: its frozen dataclasses and its parser.

Split from `proxy/settings.py` by topic; `proxy.settings` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.settings_reader import Reader, shown

# Tool names (globs, case-sensitive) as common coding agents send them: Codex CLI (read_file,
# list_dir, grep_files, update_plan), opencode (read, grep, glob, list, webfetch, websearch,
# todowrite), Cline / Roo Code (read_file, list_files, search_files,
# list_code_definition_names, codebase_search, update_todo_list), Continue (read_file, ls,
# grep_search, file_glob_search, view_subdirectory, search_web, fetch_url_content), OpenHands
# (str_replace_editor's view, task_tracker), Claude-Code-style tools (Read, Grep, Glob, LS,
# WebFetch, WebSearch, TodoWrite), Gemini CLI (read_file, list_directory, glob,
# search_file_content, read_many_files, google_web_search, web_fetch, write_todos).
# Shell tools are listed apart (`shell_tools`): a call of one counts as exploration, or as a
# file read for restore, only when its command line only reads (`core/shell_reads`).
DEFAULT_EXPLORATION_TOOLS = (
    "read_file", "read", "Read", "read_many_files", "str_replace_editor",
    "grep", "Grep", "grep_files", "grep_search", "search_files", "search_file_content",
    "glob", "Glob", "file_glob_search", "search", "codebase_search",
    "list_dir", "list_directory", "list_files", "list", "ls", "LS", "view_subdirectory",
    "list_code_definition_names",
    "web_search", "WebSearch", "websearch", "google_web_search", "search_web",
    "web_fetch", "WebFetch", "webfetch", "fetch_url_content")
# Codex CLI (shell, exec_command, shell_command, Responses local_shell_call and shell_call),
# OpenHands (execute_bash; its agent SDK's terminal), Claude-Code-style tools (Bash), opencode
# and mini-swe-agent (bash), Gemini CLI (run_shell_command), Cline / Roo Code (execute_command).
DEFAULT_SHELL_TOOLS = ("shell", "exec_command", "shell_command", "local_shell_call", "shell_call",
                       "execute_bash", "terminal", "Bash", "bash", "run_shell_command",
                       "execute_command")
DEFAULT_FILE_TOOLS = ("read_file", "read", "Read", "view", "open", "cat", "str_replace_editor")
DEFAULT_PLAN_TOOLS = ("todo_write", "TodoWrite", "todowrite", "update_plan", "write_todos",
                      "update_todo_list", "task_tracker", "plan")


@dataclass(frozen=True)
class CollapseSettings:
    enabled: bool = True
    tools: tuple[str, ...] = DEFAULT_EXPLORATION_TOOLS
    shell_tools: tuple[str, ...] = DEFAULT_SHELL_TOOLS


@dataclass(frozen=True)
class TruncateSettings:
    enabled: bool = True
    max_arg_chars: int = 2000
    keep_chars: int = 500


@dataclass(frozen=True)
class MicrocompactSettings:
    enabled: bool = True
    idle_seconds: float = 21600.0
    keep_recent: int = 5
    tools: tuple[str, ...] = ("*",)


@dataclass(frozen=True)
class SummarizerSettings:
    model: str | None = None
    upstream: str | None = None
    max_output_tokens: int = 4096
    timeout_s: float = 120.0
    max_calls: int = 64  # summarizer calls one compaction may make (chunks and re-plans)


@dataclass(frozen=True)
class RestoreSettings:
    max_files: int = 5
    per_file_tokens: int = 4000
    total_tokens: int = 12000
    user_messages_tokens: int = 4000
    file_tools: tuple[str, ...] = DEFAULT_FILE_TOOLS
    plan_tools: tuple[str, ...] = DEFAULT_PLAN_TOOLS
    shell_tools: tuple[str, ...] = DEFAULT_SHELL_TOOLS


@dataclass(frozen=True)
class BreakerSettings:
    failures: int = 3
    base_cooldown_s: float = 60.0
    max_cooldown_s: float = 1800.0


@dataclass(frozen=True)
class CompactionSettings:
    enabled: bool = True
    strategy: str = "partial"
    trigger_ratio: float = 0.75
    keep_ratio: float = 0.10
    fallback_trigger_tokens: int = 100_000
    fallback_keep_messages: int = 6
    rearm_ratio: float = 0.05
    window_step_ratio: float = 0.05
    timezone: str | None = None
    manual_command: str = "/compact"
    collapse: CollapseSettings = field(default_factory=CollapseSettings)
    truncate: TruncateSettings = field(default_factory=TruncateSettings)
    microcompact: MicrocompactSettings = field(default_factory=MicrocompactSettings)
    summarizer: SummarizerSettings = field(default_factory=SummarizerSettings)
    restore: RestoreSettings = field(default_factory=RestoreSettings)
    breaker: BreakerSettings = field(default_factory=BreakerSettings)


def parse_compaction(r: Reader) -> CompactionSettings:
    return _compaction(r)


def _compaction(r: Reader) -> CompactionSettings:
    d = CompactionSettings()
    s = CompactionSettings(
        enabled=r.boolean("enabled", d.enabled),
        strategy=r.string("strategy", d.strategy, choices=("partial", "full")),
        trigger_ratio=r.number("trigger_ratio", d.trigger_ratio, 0.05, 1.0),
        keep_ratio=r.number("keep_ratio", d.keep_ratio, 0.0, 0.9),
        fallback_trigger_tokens=r.integer("fallback_trigger_tokens", d.fallback_trigger_tokens, 256),
        fallback_keep_messages=r.integer("fallback_keep_messages", d.fallback_keep_messages, 0),
        rearm_ratio=r.number("rearm_ratio", d.rearm_ratio, 0.0, 1.0),
        window_step_ratio=r.number("window_step_ratio", d.window_step_ratio, 0.0, 0.5),
        timezone=_timezone(r),
        manual_command=_manual_command(r),
        collapse=_collapse(r.mapping("collapse")),
        truncate=_truncate(r.mapping("truncate")),
        microcompact=_microcompact(r.mapping("microcompact")),
        summarizer=_summarizer(r.mapping("summarizer")),
        restore=_restore(r.mapping("restore")),
        breaker=_breaker(r.mapping("breaker")),
    )
    if s.keep_ratio >= s.trigger_ratio:
        r.problem("keep_ratio", f"must be smaller than trigger_ratio ({s.trigger_ratio:g}), "
                                f"got {s.keep_ratio:g}")
    r.finish()
    return s


def _timezone(r: Reader) -> str | None:
    name = r.string("timezone", None)
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        r.problem("timezone", f"unknown time zone {shown(name)} (an IANA name such as "
                              "Europe/Paris, or null for the machine's)")
        return None
    return name


def _manual_command(r: Reader) -> str:
    command = r.string("manual_command", CompactionSettings.manual_command)
    # Messages are matched stripped: "" would make every empty user message a command, and a
    # space at either end would match none.
    if not command or command != command.strip():
        r.problem("manual_command", f"must be non-empty, without spaces at either end, "
                                    f"got {shown(command)}")
    return command


def _collapse(r: Reader) -> CollapseSettings:
    s = CollapseSettings(enabled=r.boolean("enabled", True),
                         tools=r.strings("tools", DEFAULT_EXPLORATION_TOOLS),
                         shell_tools=r.strings("shell_tools", DEFAULT_SHELL_TOOLS))
    r.finish()
    return s


def _truncate(r: Reader) -> TruncateSettings:
    d = TruncateSettings()
    s = TruncateSettings(
        enabled=r.boolean("enabled", d.enabled),
        max_arg_chars=r.integer("max_arg_chars", d.max_arg_chars, 100),
        keep_chars=r.integer("keep_chars", d.keep_chars, 0),
    )
    if s.keep_chars >= s.max_arg_chars:
        r.problem("keep_chars", f"must be smaller than max_arg_chars ({s.max_arg_chars}), "
                                f"got {s.keep_chars}")
    r.finish()
    return s


def _microcompact(r: Reader) -> MicrocompactSettings:
    d = MicrocompactSettings()
    s = MicrocompactSettings(
        enabled=r.boolean("enabled", d.enabled),
        idle_seconds=r.number("idle_seconds", d.idle_seconds, 0),
        keep_recent=r.integer("keep_recent", d.keep_recent, 0),
        tools=r.strings("tools", d.tools),
    )
    r.finish()
    return s


def _summarizer(r: Reader) -> SummarizerSettings:
    d = SummarizerSettings()
    s = SummarizerSettings(
        model=_summarizer_model(r),
        upstream=r.string("upstream", None),
        max_output_tokens=r.integer("max_output_tokens", d.max_output_tokens, 256),
        timeout_s=r.number("timeout_s", d.timeout_s, 1),
        max_calls=r.integer("max_calls", d.max_calls, 1),
    )
    r.finish()
    return s


def _summarizer_model(r: Reader) -> str | None:
    model = r.string("model", None)
    if model is not None and not model.strip():
        r.problem("model", "must not be empty (null: the request's own model)")
        return None
    return model


def _restore(r: Reader) -> RestoreSettings:
    d = RestoreSettings()
    s = RestoreSettings(
        max_files=r.integer("max_files", d.max_files, 0),
        per_file_tokens=r.integer("per_file_tokens", d.per_file_tokens, 0),
        total_tokens=r.integer("total_tokens", d.total_tokens, 0),
        user_messages_tokens=r.integer("user_messages_tokens", d.user_messages_tokens, 0),
        file_tools=r.strings("file_tools", d.file_tools),
        plan_tools=r.strings("plan_tools", d.plan_tools),
        shell_tools=r.strings("shell_tools", d.shell_tools),
    )
    r.finish()
    return s


def _breaker(r: Reader) -> BreakerSettings:
    d = BreakerSettings()
    s = BreakerSettings(
        failures=r.integer("failures", d.failures, 1),
        base_cooldown_s=r.number("base_cooldown_s", d.base_cooldown_s, 0),
        max_cooldown_s=r.number("max_cooldown_s", d.max_cooldown_s, 0),
    )
    if s.max_cooldown_s < s.base_cooldown_s:
        r.problem("max_cooldown_s", f"must be at least base_cooldown_s ({s.base_cooldown_s:g}), "
                                    f"got {s.max_cooldown_s:g}")
    r.finish()
    return s
