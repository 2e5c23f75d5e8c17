"""Which shell command lines only read: writes disguised as reads never count."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import shell_reads
from proxy.core.shell_reads import (FileRead, _tokens, argv_file_read, argv_only_reads,
                                    file_read, only_reads)

READS = [
    "cat src/a.py",
    "cat -n src/a.py",
    "sed -n '10,40p' src/a.py",
    "sed -n -e '1,5p' -e '9p' a.py",
    "head -n 50 README.md",
    "tail -n 20 log.txt",
    "nl -ba a.py | sed -n '1,80p'",
    "wc -l src/*.py",
    "ls -la",
    "pwd && ls -la",
    "tree -L 2 src",
    "find . -name '*.py' -not -path './node_modules/*'",
    'grep -rn "class Exists\\|def foo" django/db | head -20',
    "grep -E 'a|b;c>d' src/x.py",
    "rg -n 'TODO' src",
    "ag foo",
    "git status",
    "git diff HEAD~1 -- src/a.py",
    "git log --oneline -5",
    "git -C repo show HEAD:src/a.py",
    "git --no-pager blame a.py",
    "cd /repo && cat src/a.py",
    "cd django && grep -rn Subquery . | wc -l",
    "cat a.py 2>/dev/null",
    "grep -rn foo . 2>&1 | head",
    "ls > /dev/null",
    "LC_ALL=C grep -n x a.py",
    "find . -type f | sort | uniq -c",
    "file a.bin && stat a.bin",
    "bash -lc 'cat src/a.py'",
    "grep -n 'price$' a.py",
    "cat 'weird # name.py'",
    "echo ---- && cat a.py",
]

WRITES = [
    "cat a.py > b.py",
    "cat a.py >> b.py",
    "cat a.py | tee b.py",
    "ls; rm -rf build",
    "ls || rm -rf build",
    "ls & rm -rf build",
    "cat a.py\nrm -rf build",
    "cat a.py\rrm -rf build",
    "cat $(rm -rf build)",
    "cat `rm -rf build`",
    'cat "$(rm -rf build)"',
    "cat $HOME/.ssh/id_rsa",
    "sed -i 's/a/b/' a.py",
    "sed -n 's/a/b/w out.txt' a.py",
    "sed -n '1p;w out' a.py",
    "sed -n 'e rm -rf build' a.py",
    "sed 's/a/b/' a.py",
    "find . -name '*.pyc' -delete",
    "find . -exec rm {} +",
    "find . -execdir rm {} ;",
    "find . -fprint out.txt",
    "find . -ok rm {} ;",
    'find . "|" grep -delete',
    "rg --pre ./evil foo",
    "rg --pre=./evil foo",
    "ag --pager ./evil foo",
    "ag --pager=./evil foo",
    "git cat-file --filters HEAD:a.py",
    "git commit -am wip",
    "git checkout -- a.py",
    "git branch new",
    "git diff --output=patch.txt",
    "git -c core.pager=evil log",
    "git grep -Oevil foo",
    "git diff --ext-diff",
    "PAGER=evil git log",
    "GIT_EXTERNAL_DIFF=evil git diff",
    "python -c 'print(1)'",
    "python manage.py test",
    "xargs rm < files.txt",
    "cat < a.py",
    "cat <<EOF > a.py",
    "diff <(ls a) <(ls b)",
    "(cd src && rm -rf build)",
    "{ cat a; }",
    "sort -o out.txt in.txt",
    "sort -uo out.txt in.txt",
    "sort --output=out.txt in.txt",
    "sort --compress-program=evil in.txt",
    "uniq in.txt out.txt",
    "tree -o out.txt",
    "file -C -m magic",
    "awk '{print > \"out\"}' a.py",
    "perl -ne print a.py",
    "cd src",
    "cat a.py &> out.txt",
    "cat a.py 2> err.txt",
    "cat a.py >| b.py",
    "cat 'unclosed",
    "cat a.py \\",
    "",
    "   ",
    "&& cat a.py",
    "cat a.py &&",
    "bash -lc 'cat a.py > b.py'",
    "bash -c 'rm -rf build'",
    "sh -c 'sh -c \"sh -c cat\"'",
    "env cat a.py",
    "timeout 5 cat a.py",
    "sudo cat /etc/shadow",
    "./cat a.py",
    "tee a.py",
    "cp a.py b.py",
    "mv a.py b.py",
    "touch a.py",
    "npm install",
]


@pytest.mark.parametrize("line", READS)
def test_a_read_only_line_is_a_read(line: str) -> None:
    assert only_reads(line)


@pytest.mark.parametrize("line", WRITES)
def test_a_line_that_may_write_run_anything_or_hide_what_it_reads_is_not_a_read(line: str) -> None:
    assert not only_reads(line)


_READ_PARTS = ("cat a.py", "grep -n 'x|y' src", "sed -n '3,9p' a.py", "git log -3", "ls -la",
               "find . -name '*.py'", "rg -n foo", "head -n 5 a.py", "wc -l a.py", "pwd")
_WRITE_PARTS = ("rm -rf build", "sed -i s/a/b/ a.py", "find . -delete", "tee out.txt",
                "python x.py", "git commit -am x", "sort -o out a", "cat a > b", "echo $(rm x)",
                "cat `rm x`", "PAGER=rm git log", "rg --pre ./x foo", "find . -exec rm {} +",
                "tree -o out", "cat a 2> err")
_JOINS = ((" | ", True), (" && ", True), ("|", True), ("&&", True), ("; ", False), (" || ", False),
          (" & ", False), ("\n", False), (";", False))


@st.composite
def _line(draw: st.DrawFn) -> tuple[str, bool]:
    """A line of parts joined by operators, and whether it only reads."""
    n = draw(st.integers(1, 4))
    parts = [draw(st.sampled_from((*_READ_PARTS, *_WRITE_PARTS))) for _ in range(n)]
    joins = [draw(st.sampled_from(_JOINS)) for _ in range(n - 1)]
    line = parts[0]
    for part, (join, _) in zip(parts[1:], joins):
        line += join + part
    prefix = draw(st.sampled_from(("", "cd /repo && ", "bash -lc ")))
    reads = all(p in _READ_PARTS for p in parts) and all(ok for _, ok in joins)
    if prefix == "bash -lc ":
        line = "bash -lc '" + line.replace("'", "'\\''") + "'"
        return line, reads
    return prefix + line, reads


@given(_line())
def test_a_composed_line_reads_only_when_every_part_reads_and_every_join_is_safe(drawn) -> None:
    line, reads = drawn
    assert only_reads(line) is reads, line


@given(st.text(alphabet=st.sampled_from("cat rm>|&;$`'\"\\\n()<a.py-n"), max_size=40))
def test_any_text_is_answered_without_error(line: str) -> None:
    if only_reads(line):
        # Newlines around the command are no second command ('tr\n' reads); one inside is.
        assert "\n" not in line.strip() and "rm" not in line.split()[:1]


def test_an_argv_runs_without_a_shell_unless_it_names_one() -> None:
    assert argv_only_reads(["bash", "-lc", "cat src/a.py"])
    assert argv_only_reads(["cat", "a;", "rm", "-rf"])  # no shell: `;` is a file name
    assert argv_only_reads(["rg", "-n", "foo", "src"])
    assert not argv_only_reads(["bash", "-lc", "cat a.py > b.py"])
    assert not argv_only_reads(["bash", "-lc", "cat a.py", "extra"])
    assert not argv_only_reads(["rm", "-rf", "build"])
    assert not argv_only_reads([])


def test_only_a_verbatim_print_of_one_file_is_a_file_read() -> None:
    assert file_read("cat src/a.py") == FileRead("src/a.py", True, "src/a.py")
    assert file_read("cd /repo && cat src/a.py") == FileRead("/repo/src/a.py", True, "src/a.py")
    assert file_read("cd /repo && cat /etc/hosts") == FileRead("/etc/hosts", True, "/etc/hosts")
    assert file_read("sed -n '10,40p' a.py") == FileRead("a.py", False, "a.py")
    assert file_read("head -n 50 a.py") == FileRead("a.py", False, "a.py")
    assert file_read("tail -n 5 a.py") == FileRead("a.py", False, "a.py")
    assert argv_file_read(["bash", "-lc", "cat a.py"]) == FileRead("a.py", True, "a.py")
    assert FileRead("/repo/a.py", True, "a.py").names == ("/repo/a.py", "a.py")
    for line in ("cat -n a.py", "nl a.py", "cat a.py b.py", "cat *.py", "cat a.py | head",
                 "cat a.py 2>/dev/null", "grep x a.py", "cat -", "cat a.py > b.py",
                 "sed -n '1,5p;9p' a.py", "ls a.py", "cd x && cd y && cat a.py", "head -c 10 a.py",
                 "cd - && cat a.py", "cd ~ && cat a.py"):
        assert file_read(line) is None, line


@given(st.text(alphabet=st.sampled_from("ab .-_/*'\"\\\t#~=é"), max_size=30))
def test_words_split_as_a_posix_shell_splits_them(line: str) -> None:
    """Without operators or expansions, the words are those `shlex` (POSIX mode) finds."""
    try:
        expected = shlex.split(line)
    except ValueError:  # an unclosed quote or a trailing escape: never a read
        assert not only_reads("cat " + line)
        return
    if not line.strip():
        assert expected == [] and _tokens(line.strip()) is None
        return
    tokens = _tokens(line)  # not stripped: a backslash and a space at the end are one word
    assert tokens is not None
    assert [word for word, operator, _ in tokens if not operator] == expected
    assert not any(operator for _, operator, _ in tokens)


class _Slices(list):  # type: ignore[type-arg]
    """A word list that counts the copies slicing makes of it."""

    copies = 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            _Slices.copies += 1
            return _Slices(super().__getitem__(index))  # a copy of a copy counts too
        return super().__getitem__(index)


@pytest.mark.parametrize("check", [
    lambda: shell_reads._reads(_Slices(["LANG=C"] * 5000 + ["cat", "x"]), 0),
    lambda: shell_reads._git(_Slices(["-C", "a"] * 5000 + ["log"])),
])
def test_a_long_line_is_read_once_not_copied_a_word_at_a_time(check) -> None:  # type: ignore[no-untyped-def]
    # A copy of the rest for each assignment or `-C` made the check quadratic: a 200 KB
    # command in a client's old tool call held the event loop (every tenant) for seconds.
    _Slices.copies = 0
    assert check() is True
    assert _Slices.copies <= 2
