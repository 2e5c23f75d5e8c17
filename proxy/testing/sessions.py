"""A synthetic, realistic coding-agent session, as chat `messages` or Responses `input` items.

`coding_session(n, seed, api)` is deterministic for its arguments and returns exactly `n`
wire elements: a long system prompt, then turns of a user task (some in Chinese), a plan
(`todo_write`), runs of exploration (`read_file` with line ranges, `grep`, `glob`, `list_dir`,
`web_search`, some of them parallel), edits with big arguments (`edit_file`, `write_file`),
test runs with tracebacks, and a closing summary. About 375 tokens per element on average.
The list always ends where a client would send a request: after a user message or after the
last result of a tool step. Used by the cascade benchmark and the tests, never by the proxy.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson



@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Step:
    """One model or user turn: a message with text, tool calls, or both."""

    role: str  # system | user | assistant
    text: str | None = None
    calls: tuple[Call, ...] = ()

    def size(self, api: str) -> int:
        if api == "chat":
            return 1 + len(self.calls)
        return (1 if self.text or not self.calls else 0) + 2 * len(self.calls)


def coding_session(n_messages: int, seed: int = 0, api: str = "chat") -> list[dict[str, Any]]:
    if api not in ("chat", "responses"):
        raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
    agent = _Agent(random.Random(f"session:{seed}"), seed)
    out: list[dict[str, Any]] = []
    for step in _fitted(agent, n_messages, api):
        out.extend(render(step, api))
    return out


def _fitted(agent: _Agent, n: int, api: str) -> Iterator[Step]:
    """The scripted steps that fit in `n` elements, padded so the count is exact."""
    used = 0
    script = agent.script()
    while used < n:
        step = next(script)
        if used + step.size(api) > n:
            break
        used += step.size(api)
        yield step
    while used < n:
        step = agent.single_read() if n - used >= 2 else agent.user_nudge()
        used += step.size(api)
        yield step


def render(step: Step, api: str) -> list[dict[str, Any]]:
    return _chat(step) if api == "chat" else _responses(step)


def _chat(step: Step) -> list[dict[str, Any]]:
    if not step.calls:
        return [{"role": step.role, "content": step.text or ""}]
    calls = [{"id": c.id, "type": "function",
              "function": {"name": c.name, "arguments": _json(c.arguments)}} for c in step.calls]
    message = {"role": "assistant", "content": step.text, "tool_calls": calls}
    return [message] + [{"role": "tool", "tool_call_id": c.id, "content": c.result} for c in step.calls]


def _responses(step: Step) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if step.text or not step.calls:
        part = "output_text" if step.role == "assistant" else "input_text"
        body: dict[str, Any] = {"type": part, "text": step.text or ""}
        if part == "output_text":
            body["annotations"] = []
        role = "developer" if step.role == "system" else step.role
        items.append({"type": "message", "role": role, "content": [body]})
    items += [{"type": "function_call", "call_id": c.id, "name": c.name,
               "arguments": _json(c.arguments)} for c in step.calls]
    items += [{"type": "function_call_output", "call_id": c.id, "output": c.result} for c in step.calls]
    return items


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


_ID_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789"


class _Agent:
    """Plays a coding agent on a fixed synthetic repository."""

    def __init__(self, rng: random.Random, seed: int) -> None:
        self.rng = rng
        self.repo = _Repository(seed)
        self.calls = 0
        self.chinese = False

    def call_id(self) -> str:
        self.calls += 1
        return "call_" + "".join(self.rng.choices(_ID_ALPHABET, k=22))

    def script(self) -> Iterator[Step]:
        yield Step("system", SYSTEM_PROMPT)
        while True:
            yield from self.turn()

    def turn(self) -> Iterator[Step]:
        self.chinese = self.rng.random() < 0.2
        focus = self.rng.sample(self.repo.sources, 3)
        yield Step("user", _task(self.rng, focus, self.chinese))
        if self.rng.random() < 0.6:
            yield self.plan(focus)
        for _ in range(self.rng.randint(1, 3)):
            yield from self.explore(focus)
            yield from self.change(focus)
            yield self.test_run(passing=self.rng.random() < 0.45)
        yield Step("assistant", _summary(self.rng, focus, self.chinese))

    def plan(self, focus: list[str]) -> Step:
        todos = _todos(self.rng, focus)
        return Step("assistant", _plan_note(self.rng, self.chinese),
                    (Call(self.call_id(), "todo_write", {"todos": todos}, "Todos have been updated."),))

    def explore(self, focus: list[str]) -> Iterator[Step]:
        for _ in range(self.rng.randint(2, 6)):
            kind = self.rng.choices(["read", "parallel", "grep", "glob", "list", "web"],
                                    weights=[40, 12, 22, 10, 8, 4])[0]
            yield getattr(self, f"_{kind}")(focus)

    def _read(self, focus: list[str]) -> Step:
        return Step("assistant", None, (self.read_call(self.rng.choice(focus + self.repo.sources[:4])),))

    def _parallel(self, focus: list[str]) -> Step:
        paths = self.rng.sample(focus + self.repo.tests[:3], self.rng.randint(2, 3))
        return Step("assistant", None, tuple(self.read_call(p) for p in paths))

    def read_call(self, path: str) -> Call:
        lines = self.repo.lines(path)
        if len(lines) < 90 or self.rng.random() < 0.15:
            args: dict[str, Any] = {"path": path}
            start, end = 1, min(len(lines), 160)
        else:
            start = self.rng.randint(1, max(1, len(lines) - 60))
            end = min(len(lines), start + self.rng.randint(40, 130))
            args = {"path": path, "start_line": start, "end_line": end}
        return Call(self.call_id(), "read_file", args, _numbered(lines, start, end))

    def _grep(self, focus: list[str]) -> Step:
        word = self.rng.choice(self.repo.symbols)
        args = {"pattern": word, "path": self.rng.choice(["src", "tests", "."]), "glob": "*.py"}
        return Step("assistant", None, (Call(self.call_id(), "grep", args, self.repo.grep(self.rng, word)),))

    def _glob(self, focus: list[str]) -> Step:
        pattern = self.rng.choice(["src/**/*.py", "tests/**/test_*.py", "**/*.toml", "src/shop/*/*.py"])
        found = self.repo.glob(self.rng)
        return Step("assistant", None, (Call(self.call_id(), "glob", {"pattern": pattern}, found),))

    def _list(self, focus: list[str]) -> Step:
        folder = self.rng.choice(["src/shop", "src/shop/api", "tests", "."])
        return Step("assistant", None, (Call(self.call_id(), "list_dir", {"path": folder},
                                             self.repo.listing(self.rng, folder)),))

    def _web(self, focus: list[str]) -> Step:
        query = _web_query(self.rng)
        return Step("assistant", None, (Call(self.call_id(), "web_search", {"query": query},
                                             _web_results(self.rng, query)),))

    def change(self, focus: list[str]) -> Iterator[Step]:
        for _ in range(self.rng.randint(1, 3)):
            path = self.rng.choice(focus)
            note = _edit_note(self.rng, path, self.chinese) if self.rng.random() < 0.5 else None
            if self.rng.random() < 0.3:
                target = self.rng.choice(self.repo.tests)
                body = _code_block(self.rng, self.rng.randint(70, 180))
                yield Step("assistant", note, (Call(self.call_id(), "write_file",
                                                    {"path": target, "content": body},
                                                    f"Wrote {body.count(chr(10)) + 1} lines to {target}"),))
            else:
                old = _code_block(self.rng, self.rng.randint(12, 45))
                new = _code_block(self.rng, self.rng.randint(15, 60))
                args = {"path": path, "old_string": old, "new_string": new}
                yield Step("assistant", note, (Call(self.call_id(), "edit_file", args,
                                                    f"The file {path} has been updated."),))

    def test_run(self, passing: bool) -> Step:
        target = self.rng.choice(self.repo.tests)
        command = f"python -m pytest -q {target}"
        return Step("assistant", None, (Call(self.call_id(), "bash", {"command": command, "timeout": 600},
                                             _test_output(self.rng, target, passing)),))

    def single_read(self) -> Step:
        return Step("assistant", None, (self.read_call(self.rng.choice(self.repo.sources)),))

    def user_nudge(self) -> Step:
        return Step("user", _nudge(self.rng, self.chinese))


# ---------------------------------------------------------------- the synthetic repository

_PACKAGES = ("api", "billing", "catalog", "orders", "search", "auth", "storage", "workers")
_MODULES = ("models", "service", "handlers", "schemas", "client", "cache", "errors", "utils")
_NOUNS = ("order", "invoice", "customer", "cart", "payment", "session", "token", "product",
          "refund", "webhook", "quota", "shipment")
_VERBS = ("load", "save", "validate", "render", "refresh", "resolve", "apply", "sync", "parse",
          "retry", "schedule", "merge")
_TYPES = ("str", "int", "dict[str, Any]", "list[str]", "float", "bool", "Decimal", "datetime")


class _Repository:
    """A fixed tree of Python files whose text is derived from the seed and the path."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.sources = [f"src/shop/{p}/{m}.py" for p in _PACKAGES for m in _MODULES[:5]]
        self.tests = [f"tests/{p}/test_{m}.py" for p in _PACKAGES for m in _MODULES[:2]]
        self.symbols = [f"{v}_{n}" for v in _VERBS for n in _NOUNS]
        self._files: dict[str, list[str]] = {}

    def lines(self, path: str) -> list[str]:
        if path not in self._files:
            rng = random.Random(f"file:{self.seed}:{path}")
            self._files[path] = _code_block(rng, rng.randint(60, 420)).split("\n")
        return self._files[path]

    def grep(self, rng: random.Random, word: str) -> str:
        if rng.random() < 0.1:
            return "No matches found"
        hits = []
        for path in rng.sample(self.sources + self.tests, rng.randint(2, 7)):
            lines = self.lines(path)
            for _ in range(rng.randint(1, 3)):
                n = rng.randrange(len(lines))
                hits.append(f"{path}:{n + 1}:{lines[n].replace('_x', word, 1)}")
        return "\n".join(hits)

    def glob(self, rng: random.Random) -> str:
        return "\n".join(sorted(rng.sample(self.sources + self.tests, rng.randint(6, 24))))

    def listing(self, rng: random.Random, folder: str) -> str:
        names = [p[len(folder) + 1:] if folder != "." else p for p in self.sources + self.tests
                 if p.startswith(folder) or folder == "."]
        picked = sorted({n.split("/")[0] + ("/" if "/" in n else "") for n in names})
        return "\n".join(picked[:30]) or "(empty directory)"


def _numbered(lines: list[str], start: int, end: int) -> str:
    return "\n".join(f"{n:>6}\t{lines[n - 1]}" for n in range(start, end + 1))


def _code_line(rng: random.Random, indent: int) -> str:
    noun, verb = rng.choice(_NOUNS), rng.choice(_VERBS)
    pad = "    " * indent
    return pad + rng.choice((
        f"def {verb}_{noun}(self, {noun}_id: {rng.choice(_TYPES)}) -> {rng.choice(_TYPES)}:",
        f"{noun} = self._{noun}s.get({noun}_id)",
        f"if {noun} is None:",
        f"raise {noun.capitalize()}NotFound(f\"{noun} {{{noun}_id}} does not exist\")",
        f"result = await self.client.{verb}({noun}, timeout=self.settings.timeout_s)",
        f"logger.info(\"{verb} {noun}\", extra={{\"{noun}_id\": {noun}_id, \"attempt\": attempt}})",
        f"return {noun}.{verb}(strict=True)",
        f"for item in {noun}.items:",
        f"total += item.quantity * item.unit_price  # {verb} before rounding",
        f"self._x = {rng.randint(2, 900)}",
        f"assert {verb}_{noun}(payload) == expected, \"{verb} changed the {noun}\"",
        f"class {noun.capitalize()}{verb.capitalize()}Error(ShopError):",
        f"\"\"\"{verb.capitalize()} the {noun} and keep its audit trail consistent.\"\"\"",
        "",
    ))


def _code_block(rng: random.Random, n_lines: int) -> str:
    return "\n".join(_code_line(rng, rng.randint(0, 3)) for _ in range(n_lines))


# ---------------------------------------------------------------- what the people say

SYSTEM_PROMPT = "\n".join([
    "You are a coding agent working in the user's repository through tools. You read before you "
    "write, you keep changes small and reviewable, and you verify them by running the tests.",
    "",
    "# Tools",
    "- read_file(path, start_line?, end_line?): returns the file with line numbers.",
    "- grep(pattern, path?, glob?): regular-expression search; returns path:line:text.",
    "- glob(pattern): lists files matching a glob pattern, sorted.",
    "- list_dir(path): lists a directory.",
    "- web_search(query): searches the web; returns titles, URLs and snippets.",
    "- edit_file(path, old_string, new_string): replaces one exact occurrence of old_string.",
    "- write_file(path, content): creates or overwrites a file.",
    "- bash(command, timeout?): runs a shell command in the repository root.",
    "- todo_write(todos): records the plan as a list of items with a status.",
    "",
    "# Rules",
    *[f"- {rule}" for rule in (
        "Never guess file contents: read the lines you are about to change.",
        "Prefer editing existing files to creating new ones; never create documentation files "
        "unless asked.",
        "Keep the user's code style: imports, naming, typing and docstrings as in the file.",
        "When a test fails, read the traceback, find the cause, fix the cause, and run it again.",
        "Do not disable, skip or weaken tests to make them pass.",
        "Ask before destructive operations: deleting files, rewriting history, dropping data.",
        "Report what you changed and what you verified, briefly, when the task is done.",
        "If the request is ambiguous, state your assumption and proceed with the smallest change.",
        "Use parallel tool calls for independent reads and searches.",
        "Keep secrets out of logs, commits and messages.",
        "Answer in the language the user wrote in.",
    )],
    "",
    "# Repository",
    "A Python 3.11 web shop: src/shop/<area>/<module>.py with tests under tests/<area>/. "
    "Run the tests with `python -m pytest -q`. Formatting: ruff format; typing: mypy --strict. "
    "The service talks to Postgres through src/shop/storage and to the payment provider through "
    "src/shop/billing/client.py; both are faked in tests by fixtures in tests/conftest.py.",
] * 3)

_TASKS = (
    "The {a} tests started failing after the last refactor. Find out why and fix it; keep the "
    "public API of {b} unchanged.",
    "Add retry with exponential backoff to the calls in {a}; the timeout must stay configurable. "
    "Cover it with tests.",
    "Refactor {a} so that the validation logic lives in one place, and update {b} accordingly.",
    "There is a race when two workers refresh the same token in {a}. Make it safe and add a test "
    "that reproduces it.",
)
_TASKS_ZH = (
    "请修复 {a} 里的超时问题，并补充相应的测试。不要改动 {b} 的公共接口。",
    "把 {a} 中重复的校验逻辑合并到一个地方，顺便检查一下 {b} 是否也需要调整。",
    "{a} 在并发刷新时偶尔会报错，请找出原因并修复，最后跑一遍测试。",
)


def _task(rng: random.Random, focus: list[str], chinese: bool) -> str:
    template = rng.choice(_TASKS_ZH if chinese else _TASKS)
    return template.format(a=focus[0], b=focus[1])


def _plan_note(rng: random.Random, chinese: bool) -> str:
    if chinese:
        return "我先梳理一下相关代码，再分步修改并运行测试。"
    return rng.choice(("I'll start by reading the relevant modules, then make the change and run "
                       "the tests.", "Let me map out the code paths involved before editing."))


def _todos(rng: random.Random, focus: list[str]) -> list[dict[str, str]]:
    steps = [f"Read {focus[0]} and its callers", f"Find where {focus[1]} handles the error path",
             f"Change {focus[0]} with the smallest diff", f"Add or update tests for {focus[2]}",
             "Run the full test suite and fix regressions"]
    return [{"content": s, "status": "pending" if i else "in_progress"}
            for i, s in enumerate(steps[: rng.randint(3, 5)])]


def _edit_note(rng: random.Random, path: str, chinese: bool) -> str:
    if chinese:
        return f"现在修改 {path}，把重复的逻辑提取出来。"
    return f"Now I'll update {path} so the {rng.choice(_NOUNS)} path goes through one validator."


def _summary(rng: random.Random, focus: list[str], chinese: bool) -> str:
    if chinese:
        return (f"已完成：修改了 {focus[0]} 和 {focus[1]}，重复的校验逻辑合并到了一个函数里，"
                "并新增了覆盖超时与重试的测试。全部测试通过。需要注意的是，配置项 timeout_s 的默认值"
                "保持不变，旧的调用方式依然兼容。")
    return (f"Done. I changed {focus[0]} and {focus[1]}: the {rng.choice(_NOUNS)} validation now "
            f"lives in one function, the retry uses exponential backoff capped at 30 s, and "
            f"{focus[2]} keeps its public signature. I added tests for the timeout and the retry "
            "paths; the full suite passes. One thing to review: the default of `timeout_s` is "
            "unchanged, so slow deployments may still want to raise it in their config.")


def _nudge(rng: random.Random, chinese: bool) -> str:
    if chinese:
        return rng.choice(("继续。", "好的，请接着做。", "先别提交，再检查一下边界情况。"))
    return rng.choice(("Go on.", "Looks good, continue.", "Also check the error path, please."))


def _web_query(rng: random.Random) -> str:
    return rng.choice(("python asyncio exponential backoff jitter best practice",
                       "postgres SELECT FOR UPDATE SKIP LOCKED worker queue",
                       "pytest freezegun vs time-machine async", "decimal rounding half even python"))


def _web_results(rng: random.Random, query: str) -> str:
    words = query.split()
    return "\n\n".join(
        f"{k + 1}. {' '.join(rng.sample(words, len(words))).title()}\n"
        f"https://example.org/{'-'.join(rng.sample(words, 3))}\n"
        f"{' '.join(rng.choice(words) for _ in range(40))}." for k in range(rng.randint(3, 5)))


def _test_output(rng: random.Random, target: str, passing: bool) -> str:
    count = rng.randint(8, 40)
    if passing:
        return f"{'.' * count}{' ' * 6}[100%]\n{count} passed in {rng.uniform(0.4, 9):.2f}s"
    noun, verb = rng.choice(_NOUNS), rng.choice(_VERBS)
    trace = "\n".join(f"    {_code_line(rng, 1).strip()}" for _ in range(rng.randint(10, 30)))
    return (f"{'.' * (count - 1)}F{' ' * 6}[100%]\n=================== FAILURES ===================\n"
            f"____________ test_{verb}_{noun} ____________\n\n{trace}\n"
            f"E       AssertionError: {verb} changed the {noun}\n\n{target}:{rng.randint(10, 300)}: "
            f"AssertionError\n=========== short test summary info ===========\nFAILED {target}::"
            f"test_{verb}_{noun} - AssertionError\n1 failed, {count - 1} passed in "
            f"{rng.uniform(0.4, 9):.2f}s")
