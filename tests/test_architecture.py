"""Imports go one way, down the layers ARCHITECTURE.md draws: the engine knows no audio and no chat, the server
no torch, the bench and the quality gate only HTTP, the router only the fleet's wire format, the training recipe
no serving; and no module of lyre needs, through any others, one that needs it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lyre"

# Each part of lyre, and the parts of lyre it may import: only those below it (ARCHITECTURE.md draws them).
# A part is a package, or a folder of one: the server's routes, sockets and calls, the fleet's router.
LAYERS: dict[str, frozenset[str]] = {
    "common": frozenset(),
    "orpheus": frozenset(),
    "text": frozenset(),
    "models": frozenset({"common", "orpheus"}),
    "engine": frozenset({"common", "models"}),  # no audio: not the format, not the codec
    "codec": frozenset({"common", "models", "orpheus"}),
    "stt": frozenset({"common", "models", "orpheus", "text"}),
    "llm": frozenset({"common", "models", "engine"}),  # no audio either
    "tts": frozenset({"common", "models", "orpheus", "text", "engine", "codec"}),
    "agent": frozenset({"common", "orpheus", "text", "stt", "llm", "tts"}),  # no tensors, no transport
    "baseline": frozenset({"common", "models", "orpheus", "text", "engine", "codec", "tts"}),
    "train": frozenset({"common", "models", "orpheus", "text", "engine", "codec", "tts"}),  # serves nothing
    "fleet": frozenset({"common", "orpheus", "text", "tts"}),  # records, membership, shared voices
    "fleet.router": frozenset({"common", "fleet"}),  # HTTP to the servers, and the fleet's wire format
    "server": frozenset({"common", "models", "orpheus", "text", "stt", "llm", "tts", "agent", "baseline", "fleet"}),
    "server.routes": frozenset({"common", "models", "orpheus", "text", "stt", "llm", "tts", "server"}),
    "server.sockets": frozenset({"common", "orpheus", "text", "stt", "tts", "agent", "server"}),
    "server.calls": frozenset({"common", "orpheus", "text", "stt", "tts", "agent", "fleet", "server"}),
    "bench": frozenset({"common", "orpheus"}),  # HTTP and WebSocket only
    "eval": frozenset({"common", "orpheus", "text", "bench", "stt"}),  # HTTP, and Whisper as lyre.stt loads it
}
# Only the app assembles the server's surfaces; the command line, anything.
ASSEMBLERS = {"lyre/server/app.py": frozenset({"server.routes", "server.sockets", "server.calls"})}
# Libraries a part must not import itself (its own modules; what lyre.tts brings along is lyre.tts's).
NOT_THEIRS = {
    "engine": ("snac", "av"), "llm": ("snac", "av"),
    "server": ("torch", "snac", "transformers"), "server.routes": ("torch", "snac", "transformers"),
    "server.sockets": ("torch", "snac", "transformers"), "server.calls": ("torch", "snac", "transformers"),
    "agent": ("torch", "snac"), "stt": ("torch", "snac"), "bench": ("torch", "snac"), "eval": ("torch", "snac"),
    "fleet.router": ("torch", "snac"),
}
_SURFACES = ("server.routes", "server.sockets", "server.calls", "fleet.router")


def _part(module: str) -> str | None:
    """The part a ``lyre.`` module belongs to (None: not lyre's, or the command line)."""
    parts = module.split(".")
    if parts[0] != "lyre" or len(parts) < 2 or parts[1] == "cli":
        return None
    two = ".".join(parts[1:3])
    return two if two in _SURFACES else parts[1]


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # a module, when it is one
    return names


def test_every_part_has_its_layer_and_no_folder_is_left_out() -> None:
    parts = {part for module in _modules() if (part := _part(module)) is not None}
    assert parts == set(LAYERS)


@pytest.mark.parametrize("part", sorted(LAYERS))
def test_a_part_imports_only_what_lies_below_it(part: str) -> None:
    modules = _modules()
    offending = []
    for module, path in sorted(modules.items()):
        if _part(module) != part:
            continue
        allowed = LAYERS[part] | ASSEMBLERS.get(str(path.relative_to(PACKAGE.parent)), frozenset()) | {part}
        for name in _imports(path):
            target = _part(name) if name in modules or name.rsplit(".", 1)[0] in modules else None
            if target is not None and target not in allowed:
                offending.append(f"{path.relative_to(PACKAGE.parent)} imports {name} ({target})")
            if any(name == bad or name.startswith(bad + ".") for bad in NOT_THEIRS.get(part, ())):
                offending.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert not offending, "\n".join(offending)


def test_the_layers_are_a_ladder() -> None:
    # Nothing a part may import may import it back, directly or through others: the layers have an order.
    graph = {part: set(below) for part, below in LAYERS.items()}
    assert _circle(graph) is None, " -> ".join(_circle(graph) or [])


def test_speech_to_text_runs_without_torch() -> None:
    # Nothing on the speech-to-text path, indirect imports included, loads torch.
    code = ("import sys, lyre.stt, lyre.stt.realtime, lyre.stt.vad;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'snac', 'transformers')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_the_quality_gate_loads_no_serving_code() -> None:
    # Indirect imports too: nothing of the server, the engine or the TTS pipeline, and no torch until a
    # speaker embedding is made.
    code = ("import sys, lyre.eval, lyre.cli.evaluate;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'snac') or m.startswith("
            "('lyre.server', 'lyre.engine', 'lyre.tts', 'lyre.codec', 'lyre.baseline'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (module -> modules it imports), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for imported in sorted(graph.get(module, ())):
            if (found := visit(imported, path + [module])) is not None:
                return found
        done.add(module)
        return None

    return next((c for m in sorted(graph) if (c := visit(m, [])) is not None), None)


def test_no_module_of_lyre_imports_itself_back_through_others() -> None:
    # Type-checking imports count too: a circle through them is still two modules that need each other.
    modules = _modules()
    graph = {module: {name for name in _imports(path) if name in modules and name != module}
             for module, path in modules.items()}
    assert _circle(graph) is None, " -> ".join(_circle(graph) or [])
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check can fail
