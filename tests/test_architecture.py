"""The layers of STYLE.md: imports point down only, and the pure core does no I/O."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "proxy"

# Lowest first. A module may import its own layer and those below, never above.
LAYERS: dict[str, int] = {
    "proxy": 0, "proxy.settings": 0, "proxy.settings_compaction": 0, "proxy.settings_reader": 0,
    "proxy.settings_masked": 0, "proxy.settings_sections": 0, "proxy.settings_diff": 0, "proxy.settings_yaml": 0, "proxy.redaction": 0, "proxy.errors": 0,
    "proxy.conversation": 0, "proxy.identity": 0, "proxy.jsonio": 0, "proxy.jsonspan": 0,
    "proxy.lru": 0, "proxy.records": 0,
    "proxy.core": 1, "proxy.tokens": 1, "proxy.compaction": 1, "proxy.anchors": 1,
    "proxy.usage": 1, "proxy.sse": 1, "proxy.streams": 1, "proxy.threads": 1,
    "proxy.inbound": 1, "proxy.reparse": 1, "proxy.outbound": 1, "proxy.projection": 1,
    "proxy.zstd_frames": 1, "proxy.item_sizes": 1,
    # The storable form of a thread id is pure text work, shared by the log lines and the stores.
    "proxy.store.keys": 1,
    "proxy.store": 2, "proxy.testing": 2,
    "proxy.server": 3, "proxy.cli_state": 3, "proxy.__main__": 3, "proxy.hangups": 3,
}
PURE = ("proxy.core", "proxy.compaction", "proxy.tokens", "proxy.anchors", "proxy.usage",
        "proxy.sse", "proxy.streams", "proxy.conversation", "proxy.identity", "proxy.jsonspan",
        "proxy.records", "proxy.projection", "proxy.inbound", "proxy.reparse", "proxy.outbound",
        "proxy.threads", "proxy.store.keys", "proxy.zstd_frames", "proxy.item_sizes")
IO_MODULES = {"aiohttp", "asyncio", "sqlite3", "redis", "structlog", "socket", "subprocess"}


def _layer(module: str) -> int:
    best = ""
    for prefix in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    assert best and (best != "proxy" or module == "proxy"), f"{module} is in no layer"
    return LAYERS[best]


def _modules() -> dict[str, list[str]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(p for p in parts if p != "__init__")
        imports = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imports += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == "proxy":
                imports += [f"proxy.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imports.append(node.module)
        found[name] = imports
    return found


def test_imports_point_down_only() -> None:
    wrong = []
    for module, imports in _modules().items():
        for imported in imports:
            if imported.startswith("proxy") and _layer(imported) > _layer(module):
                if module.startswith("proxy.testing") and imported.startswith("proxy.testing"):
                    continue
                wrong.append(f"{module} imports {imported}")
    assert not wrong, "\n".join(wrong)


def test_the_pure_core_does_no_io_and_reads_no_clock() -> None:
    wrong = []
    for module, imports in _modules().items():
        if not module.startswith(PURE):
            continue
        for imported in imports:
            root = imported.split(".")[0]
            if root in IO_MODULES or imported == "time":
                wrong.append(f"{module} imports {imported}")
    assert not wrong, "\n".join(wrong)


def test_no_module_grows_without_reason() -> None:
    long = [f"{p.relative_to(PACKAGE.parent)}: {n} lines"
            for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450]
    assert not long, "\n".join(long)
