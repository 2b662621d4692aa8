"""Imports go one way: server -> tts / llm -> engine / codec; the engine knows no audio
and no chat, the server no torch, the bench only HTTP, the training recipe no serving."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lyre"

# package -> import prefixes its modules must not use
FORBIDDEN = {
    "engine": ("lyre.orpheus", "lyre.codec", "lyre.tts", "lyre.llm", "lyre.server", "lyre.bench", "lyre.baseline",
               "snac"),
    "llm": ("lyre.orpheus", "lyre.codec", "lyre.tts", "lyre.server", "lyre.bench", "lyre.baseline", "snac"),
    "codec": ("lyre.engine", "lyre.tts", "lyre.server", "lyre.bench", "lyre.baseline"),
    "tts": ("lyre.server", "lyre.bench", "lyre.baseline"),
    # The server reaches the pipeline through lyre.tts only: no engine, no codec, no torch.
    "server": ("torch", "snac", "transformers", "lyre.engine", "lyre.codec", "lyre.bench", "lyre.router"),
    "baseline": ("lyre.server", "lyre.bench"),
    # The voice recipe builds on the format, the codec and the adapter format; it serves nothing.
    "train": ("lyre.server", "lyre.bench", "lyre.baseline", "lyre.stt", "lyre.llm"),
    "bench": ("torch", "lyre.engine", "lyre.codec", "lyre.tts", "lyre.server", "lyre.baseline", "snac"),
    # The router talks HTTP to the servers: it shares the fleet's wire format (lyre.fleet) and nothing else.
    "router": ("torch", "lyre.engine", "lyre.codec", "lyre.tts", "lyre.stt", "lyre.llm", "lyre.server", "lyre.bench",
               "lyre.baseline", "snac"),
    # The agent joins stt, llm and tts; it builds no tensors and knows no transport.
    "agent": ("torch", "lyre.engine", "lyre.codec", "lyre.server", "lyre.bench", "lyre.baseline", "snac"),
    "stt": ("torch", "lyre.engine", "lyre.codec", "lyre.tts", "lyre.server", "lyre.bench", "lyre.baseline", "snac"),
    # The quality gate talks HTTP to servers, as the bench does; it loads Whisper the way lyre.stt does and a
    # speaker embedding, nothing of the serving code.
    "eval": ("torch", "lyre.engine", "lyre.codec", "lyre.tts", "lyre.server", "lyre.baseline", "lyre.router",
             "lyre.llm", "lyre.agent", "lyre.train", "snac"),
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_only_what_comes_before_it(package: str) -> None:
    offending = []
    for path in sorted((PACKAGE / package).glob("*.py")):
        for name in _imports(path):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[package]):
                offending.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert not offending, "\n".join(offending)


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


@pytest.mark.parametrize("package", ["engine", "tts"])
def test_a_package_s_modules_import_each_other_without_a_circle(package: str) -> None:
    # Type-checking imports count too: the loop (engine.py) once built the adapters' loader, which imported the
    # engine back to call into its lock and steps, and a speech stream reached into the pipeline that opened it
    # while the pipeline read the stream's private sampling. Both now meet in a module each depends on.
    prefix = f"lyre.{package}."
    graph = {prefix + path.stem: {name for name in _imports(path) if name.startswith(prefix)}
             for path in (PACKAGE / package).glob("*.py")}
    assert _circle(graph) is None, " -> ".join(_circle(graph) or [])
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check can fail
