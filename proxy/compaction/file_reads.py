"""Which calls read a file, for restore: a file tool's call and its path, or a shell call that
prints one file's text; and whether a file tool's answer is a directory's listing instead."""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from proxy.conversation import ToolCall
from proxy.core.shell_calls import call_file_read
from proxy.core.tool_names import looks_only, named, shell_looks_only

# Gemini CLI's `read_many_files` is no file tool here (its `include` globs name no one path):
# its output joins `--- /abs/path ---` separators and the files' texts unescaped, so a file that
# holds such a line splits the rest wrongly, and how its text parts reach an OpenAI-compatible
# request (joined how, inside what) is each client's own (google-gemini/gemini-cli,
# `tools/read-many-files.ts`, `utils/generateContentResponseUtilities.ts`).
_PATH_KEYS = ("path", "file_path", "filePath", "filepath", "file", "filename", "target_file",
              "absolute_path", "relative_path", "notebook_path", "uri")
# How file tools answer a view of a directory: OpenHands' and Anthropic's str_replace_editor,
# Gemini CLI's listing; opencode's read answers `<path>DIR</path>` then `<type>directory</type>`
# (and `<type>file</type>` for a file).
_DIRECTORY_OPENINGS = ("Here's the files and directories up to", "Directory listing for")
_TAGGED_DIRECTORY = re.compile(r"\A\s*<path>[^\n]*</path>\n<type>directory</type>")


def file_path(call: ToolCall) -> str | None:
    try:
        args = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(args, dict):
        return None
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


@dataclass(frozen=True)
class ReadTools:
    files: frozenset[str]
    shells: frozenset[str]

    def path_of(self, call: ToolCall) -> tuple[str, bool, tuple[str, ...]] | None:
        """The path a call reads, whether its result is a shell command's wrapped output, and
        the names a later edit of the file may give it (a shell operand before `cd DIR`)."""
        if looks_only(call, self.files):
            path = file_path(call)
            return None if path is None else (path, False, (path,))
        if named(call.name, self.shells):
            found = call_file_read(call)
            return None if found is None else (found.path, True, found.names)
        return None

    def only_looks(self, call: ToolCall) -> bool:
        return looks_only(call, self.files) or shell_looks_only(call, self.shells)


def directory_view(path: str, text: str) -> bool:
    """A file tool's listing of a directory: its known openings, or a path named as a directory."""
    head = text.lstrip()[:200]
    return (path.endswith("/") or path in (".", "..") or head.startswith(_DIRECTORY_OPENINGS)
            or _TAGGED_DIRECTORY.match(text) is not None)
