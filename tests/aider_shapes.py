"""An Aider-shaped chat session: the client rebuilds `messages` every turn.

Aider's `format_messages` (aider `coders/base_coder.py`, from memory [MEM]): a long system
prompt (edit-format rules), few-shot example pairs, the repo map as a user message answered by
the assistant's "Ok", the finished turns (`done_messages`), the chat files' content as a user
message answered by "Ok", the current turn, and a closing system reminder. No tools; replies
are SEARCH/REPLACE blocks. Continue sends `stop` sequences the same way [MEM]. The chat files'
message and the reminder move as the history grows, so the list is not append-only.
"""

from __future__ import annotations

from typing import Any

Wire = dict[str, Any]
SYSTEM = "".join(f"Aider rule {i:03d}: describe each change as a SEARCH/REPLACE block.\n"
                 for i in range(150))
REMINDER = "Reply with SEARCH/REPLACE blocks only. Never invent file paths."
STOP = ["<<<<<<< SEARCH-END", "\n\n\n\n"]


def repo_map() -> str:
    lines = [f"src/pkg_{i // 10}/mod_{i}.py:\n│def function_{i}(value):\n│class Model{i}:\n⋮"
             for i in range(90)]
    return "Here are summaries of some files present in my git repository.\n" + "\n".join(lines)


def chat_files(turn: int) -> str:
    body = "".join(f"    total_{j} = compute_{j}(value) + {turn}\n" for j in range(60))
    return f"I have *added these files to the chat*:\n\nsrc/app.py\n```\ndef run(value):\n{body}```"


def answer(turn: int) -> str:
    body = "".join(f"    result_{turn}_{j} = step_{j}(value)\n" for j in range(50))
    return (f"src/app.py\n```\n<<<<<<< SEARCH\ndef run(value):\n=======\ndef run(value):\n{body}"
            f">>>>>>> REPLACE\n```")


def request(turn: int) -> str:
    return f"Turn {turn}: change run() so that step {turn} is applied before totals."


def aider_messages(turn: int) -> list[Wire]:
    """What Aider sends for its `turn`-th request (turns 0..turn-1 are done)."""
    out: list[Wire] = [{"role": "system", "content": SYSTEM},
                       {"role": "user", "content": "Change get_factorial() to use math.factorial"},
                       {"role": "assistant", "content": "mathweb/flask/app.py\n```\n<<<<<<< SEARCH\n"
                        "=======\nimport math\n>>>>>>> REPLACE\n```"},
                       {"role": "user", "content": repo_map()},
                       {"role": "assistant", "content": "Ok, I won't try and edit those files without asking first."}]
    for done in range(turn):
        out += [{"role": "user", "content": request(done)},
                {"role": "assistant", "content": answer(done)}]
    out += [{"role": "user", "content": chat_files(turn)},
            {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
            {"role": "user", "content": request(turn)},
            {"role": "system", "content": REMINDER}]
    return out
