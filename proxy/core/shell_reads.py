"""Whether a shell command line only reads, decided conservatively from its text alone.

A line only reads when it is one command, or a pipeline (`|`) of commands, or such pipelines
joined by `&&`, where every command is a known read-only program called without its writing
options (`sed -n` with a print-only script, `find` without `-exec`/`-delete`, `git` with a
looking sub-command, ...), and `cd DIR` may stand alone between `&&`. Anything else is not a
read: `;`, `||`, `&`, subshells, any redirection other than to `/dev/null` or between
descriptors, command or variable substitution (`$`, backquote outside single quotes), a line
break, an environment assignment other than locale and colour ones, an unknown program.
An unparseable line is not a read. Wrongly calling a write a read would fold or restore it as
if nothing changed, so every doubt answers "not a read".

`file_read` further picks the forms whose output is a file's own text, verbatim: `cat FILE`,
`sed -n 'A,Bp' FILE`, `head [-n N] FILE`, `tail -n N FILE`, after an optional `cd DIR &&`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "/bin/bash", "/bin/sh", "/bin/zsh",
                     "/usr/bin/bash", "/usr/bin/zsh"})
_SHELL_FLAGS = frozenset({"-c", "-lc", "-cl", "-ic", "-lic"})
_MAX_DEPTH = 2  # `bash -lc "sh -c '...'"`: deeper nesting is not worth reading
# Programs that never write files or run other programs, whatever their arguments.
_PLAIN = frozenset({"cat", "head", "tail", "nl", "wc", "ls", "pwd", "stat", "du", "grep",
                    "egrep", "fgrep", "cut", "tr", "echo", "basename", "dirname",
                    "realpath", "readlink", "true", "diff", "cmp", "jq", "md5sum", "sha1sum",
                    "sha256sum", "column", "rev", "tac", "od", "hexdump", "strings"})
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint",
                           "-fprint0", "-fprintf", "-fls"})
_GIT_LOOKS = frozenset({"status", "diff", "log", "show", "ls-files", "grep", "blame",
                        "rev-parse", "shortlog", "describe", "ls-tree", "cat-file"})
_GIT_WRITES = ("--output", "--ext-diff", "-O", "--open-files-in-pager", "--textconv",
               "--filters")  # textconv drivers and filters are configured programs
_DEV_NULL = "/dev/null"
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HARMLESS_ASSIGNMENT = re.compile(r"^(?:LC_[A-Z]+|LANG|LANGUAGE|NO_COLOR|COLUMNS)=")
_SED_RANGE = re.compile(r"^(\d+)(?:,(\d+|\$))?p$")
_COUNT = re.compile(r"^\d+$")


@dataclass(frozen=True, slots=True)
class FileRead:
    """A command whose output is the text of one file: whole, or the lines it names."""

    path: str
    whole: bool
    written: str = ""  # the operand as the line names it, before `cd DIR` or a workdir

    @property
    def names(self) -> tuple[str, ...]:
        return (self.path,) if self.written in ("", self.path) else (self.path, self.written)


def only_reads(line: str) -> bool:
    return _commands(line, 0) is not None


def argv_only_reads(argv: Sequence[str]) -> bool:
    """An argv run without a shell (Codex's `command` list): a `bash -lc LINE` wrapper is
    unwrapped; any other argv is one command, its operators plain words."""
    return _argv_commands(argv, 0) is not None


def file_read(line: str) -> FileRead | None:
    commands = _commands(line, 0)
    return None if commands is None else _file_read_of(commands)


def argv_file_read(argv: Sequence[str]) -> FileRead | None:
    commands = _argv_commands(argv, 0)
    return None if commands is None else _file_read_of(commands)


# ---------------------------------------------------------------- parsing

# A parsed line: its commands in order, each with the operator that joins it to the previous
# one ("" first, "|" or "&&"), and whether it had a (harmless) redirection.
_Command = tuple[str, tuple[str, ...], bool]
_Token = tuple[str, bool, bool]


def _argv_commands(argv: Sequence[str], depth: int) -> list[_Command] | None:
    if not argv or not all(isinstance(a, str) for a in argv):
        return None
    if argv[0] in _SHELLS:
        if len(argv) == 3 and argv[1] in _SHELL_FLAGS and depth < _MAX_DEPTH:
            return _commands(argv[2], depth + 1)
        return None
    words = tuple(argv)
    return [("", words, False)] if _reads(words, depth) else None


def _commands(line: str, depth: int) -> list[_Command] | None:
    tokens = _tokens(line.strip())
    if not tokens:
        return None
    out: list[_Command] = []
    joint = ""
    words: list[str] = []
    redirected = False
    position = 0
    while position < len(tokens):
        token, operator, _ = tokens[position]
        if not operator:
            words.append(token)
        elif token in ("|", "&&"):
            if not words:
                return None
            out.append((joint, tuple(words), redirected))
            joint, words, redirected = token, [], False
        elif token in (">", ">>", ">&", "&>"):
            target = tokens[position + 1] if position + 1 < len(tokens) else None
            if target is None or target[1] or not _harmless_redirect(token, target[0]):
                return None
            if len(words) > 1 and _COUNT.match(words[-1]) and tokens[position - 1][2]:
                words.pop()  # the descriptor of `2>`
            redirected = True
            position += 1
        else:
            return None  # ; || & ( ) < << |& ...
        position += 1
    if not words:
        return None
    out.append((joint, tuple(words), redirected))
    for joint, command, _ in out:
        if command[0] == "cd":
            if joint == "|" or len(command) != 2:
                return None
        elif not _reads(command, depth):
            return None
    if all(command[0] == "cd" for _, command, _ in out):
        return None  # `cd DIR` alone reads nothing: no exploration step
    return out


_OPERATOR_CHARS = frozenset("();<>|&")


def _tokens(line: str) -> list[_Token] | None:
    """The words and operators of a line as a POSIX shell splits them: (text, is an operator,
    touches the next token). A quoted `|` is a word, never an operator. None: a line break,
    an unclosed quote, or a `$` or backquote a shell would expand (outside single quotes):
    substitutions run programs and hide what is read."""
    if not line or "\n" in line or "\r" in line:
        return None
    out: list[_Token] = []
    word: list[str] = []
    in_word = False
    position = 0
    n = len(line)

    def end_word(touching: bool) -> None:
        nonlocal in_word
        if in_word:
            out.append(("".join(word), False, touching))
            word.clear()
            in_word = False

    while position < n:
        char = line[position]
        if char in " \t":
            end_word(False)
        elif char in _OPERATOR_CHARS:
            end_word(True)
            run = position
            while run < n and line[run] in _OPERATOR_CHARS:
                run += 1
            out.append((line[position:run], True, False))
            position = run
            continue
        elif char in "$`":
            return None
        elif char == "\\":
            if position + 1 >= n:
                return None
            word.append(line[position + 1])
            in_word = True
            position += 1
        elif char == "'":
            close = line.find("'", position + 1)
            if close < 0:
                return None
            word.append(line[position + 1:close])
            in_word = True
            position = close
        elif char == '"':
            position += 1
            while position < n and line[position] != '"':
                if line[position] in "$`":
                    return None
                if line[position] == "\\" and position + 1 < n and line[position + 1] in '"\\':
                    position += 1
                word.append(line[position])
                position += 1
            if position >= n:
                return None
            in_word = True
        else:
            word.append(char)
            in_word = True
        position += 1
    end_word(False)
    return out


def _harmless_redirect(operator: str, target: str | None) -> bool:
    if target is None:
        return False
    if operator == ">&":
        return target in ("1", "2")
    return target == _DEV_NULL


# ---------------------------------------------------------------- programs

def _reads(words: Sequence[str], depth: int) -> bool:
    # By index: a slice a word would copy the rest each time (quadratic in a line of
    # thousands of assignments, on the event loop).
    start = 0
    while start < len(words) and _ASSIGNMENT.match(words[start]):
        if not _HARMLESS_ASSIGNMENT.match(words[start]):
            return False
        start += 1
    if start == len(words):
        return False
    program, args = words[start], words[start + 1:]
    if program in _PLAIN:
        return True
    check = _CHECKS.get(program)
    if check is not None:
        return check(args)
    if program in _SHELLS and len(args) == 2 and args[0] in _SHELL_FLAGS and depth < _MAX_DEPTH:
        return _commands(args[1], depth + 1) is not None
    return False


def _sed(args: Sequence[str]) -> bool:
    """`sed -n` with print-only scripts: no `-i`, no `w`/`e`/`s` commands."""
    quiet = False
    scripts: list[str] = []
    position = 0
    while position < len(args):
        arg = args[position]
        if arg in ("-n", "--quiet", "--silent"):
            quiet = True
        elif arg in ("-e", "--expression"):
            if position + 1 >= len(args):
                return False
            scripts.append(args[position + 1])
            position += 1
        elif arg.startswith("-"):
            return False  # -i, -f FILE, -s, -E ...: not worth telling apart
        elif not scripts:
            scripts.append(arg)
        position += 1
    return quiet and bool(scripts) and all(_print_only(s) for s in scripts)


def _print_only(script: str) -> bool:
    return all(_SED_RANGE.match(part.strip()) for part in script.split(";"))


def _find(args: Sequence[str]) -> bool:
    return not any(a in _FIND_ACTIONS for a in args)


def _rg(args: Sequence[str]) -> bool:
    return not any(a == "--pre" or a.startswith("--pre=") for a in args)


def _ag(args: Sequence[str]) -> bool:
    # `--pager COMMAND` runs a program of the line's choosing.
    return not any(a == "--pager" or a.startswith("--pager=") for a in args)


def _git(args: Sequence[str]) -> bool:
    at = 0  # by index, as in `_reads`
    while at < len(args) and args[at] in ("-C", "--no-pager"):
        at += 2 if args[at] == "-C" else 1
    if at >= len(args) or args[at] not in _GIT_LOOKS:
        return False
    return not any(a.startswith(_GIT_WRITES) for a in args[at + 1:])


def _tree(args: Sequence[str]) -> bool:
    return not any(a == "-o" or a.startswith("--output") for a in args)


def _file(args: Sequence[str]) -> bool:
    return not any(a in ("-C", "--compile") for a in args)


def _sort(args: Sequence[str]) -> bool:
    for arg in args:
        if arg.startswith(("--output", "--compress-program")):
            return False
        if arg.startswith("-") and not arg.startswith("--") and "o" in arg:
            return False
    return True


def _uniq(args: Sequence[str]) -> bool:
    return all(a.startswith("-") for a in args)  # a second operand is a file it writes


_CHECKS = {"sed": _sed, "find": _find, "rg": _rg, "ag": _ag, "git": _git, "tree": _tree, "file": _file,
           "sort": _sort, "uniq": _uniq}


# ---------------------------------------------------------------- one file's text

def _file_read_of(commands: list[_Command]) -> FileRead | None:
    directory = None
    if len(commands) == 2 and commands[0][1][0] == "cd" and commands[1][0] == "&&":
        directory = commands[0][1][1]
        if directory.startswith(("-", "~")):
            return None  # `cd -`, `cd ~user`: where that is is not in the line
        commands = commands[1:]
    if len(commands) != 1 or commands[0][2]:
        return None
    found = _one_file(commands[0][1])
    if found is None:
        return None
    written, whole = found
    path = written
    if directory is not None and not path.startswith("/"):
        path = posixpath.normpath(posixpath.join(directory, path))
    return FileRead(path, whole, written)


def _one_file(words: tuple[str, ...]) -> tuple[str, bool] | None:
    program, args = words[0], words[1:]
    if program == "cat" and len(args) == 1:
        return _operand(args[0], True)
    if program == "sed" and len(args) == 3 and args[0] == "-n" and _SED_RANGE.match(args[1]):
        return _operand(args[2], False)
    if program in ("head", "tail"):
        if len(args) == 3 and args[0] == "-n" and _COUNT.match(args[1]):
            return _operand(args[2], False)
        if program == "head" and len(args) == 2 and re.match(r"^-\d+$", args[0]):
            return _operand(args[1], False)
        if program == "head" and len(args) == 1:
            return _operand(args[0], False)
    return None


def _operand(word: str, whole: bool) -> tuple[str, bool] | None:
    """A single file operand: not an option, not stdin, no glob that may name several."""
    if not word or word.startswith("-") or any(c in word for c in "*?[{~"):
        return None
    return word, whole
