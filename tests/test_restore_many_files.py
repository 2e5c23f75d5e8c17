"""Gemini CLI's `read_many_files` is not restored after a summary, even when named a file tool:
its per-file separators are not escaped, so its output cannot be split into files for sure."""

from __future__ import annotations

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api
from proxy.settings import RestoreSettings
from tests.test_compaction_support import assistant_calls, conv, count, tool_result, user

# The shape of gemini-cli's output (tools/read-many-files.ts): a separator per file, then the
# terminator; a file whose own text holds a separator line makes the split ambiguous.
OUTPUT = ("--- /repo/a.md ---\n\nnotes\n--- /repo/b.py ---\nnot a file boundary\n\n\n"
          "--- /repo/b.py ---\n\nx = 1\n\n\n\n--- End of content ---")


def _restored(settings: RestoreSettings):
    call = assistant_calls(("a", "read_many_files", {"include": ["/repo/a.md", "/repo/b.py"]}))
    entries = conv(Api.CHAT, [user("go"), call, tool_result("a", OUTPUT), user("tail")])
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    return collect(entries, cutoff, settings, count)


def test_read_many_files_is_not_restored() -> None:
    assert _restored(RestoreSettings()).file_paths == ()
    configured = RestoreSettings(file_tools=(*RestoreSettings().file_tools, "read_many_files"))
    assert _restored(configured).file_paths == ()
