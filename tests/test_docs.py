"""The documentation: the site builds strictly, the README stays short, and what the pages tell a reader to
type works: every ``lyre`` command parses with the real parser, every HTTP request names a route the server
has, and the getting-started requests answer from a real demo server."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from serving import running_server

from lyre.cli import build_parser

pytestmark = pytest.mark.slow  # starts a demo server for the getting-started page's requests

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SETUP_COMMANDS = ["bash scripts/setup.sh && .venv/bin/lyre serve", "bash scripts/test.sh"]
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_CONTROL = re.compile(r"^[;&|()<>]+$")
_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_URL = re.compile(r"^(?:https?://)?(?:[\w.-]+|\[[0-9a-f:]+\]):\d+(/[^\s?#]*)?")
_WS_URL = re.compile(r"wss?://[^/\s\"']+(/[^\s\"'?#]*)")
_METHOD_PATH = re.compile(r"(?<![\w/-])(GET|POST|PUT|DELETE|PATCH) (/[\w/{}.-]*)")
_CURL_DATA = {"-d", "--data", "--data-raw", "--data-binary", "--data-urlencode", "-F", "--form", "--json", "-T"}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository's root
    line: int  # of the block's first line of code
    language: str
    code: str


@dataclass(frozen=True)
class Line:
    """One logical shell line: continuations joined, a console's prompt taken off."""

    page: str
    line: int
    text: str

    def where(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]


def _blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    start, language, indent, body = 0, "", "", []
    in_block = False
    for number, line in enumerate(lines, 1):
        fence = _FENCE.match(line)
        if not in_block and fence:
            in_block, indent, language, start, body = True, fence.group(1), fence.group(2), number + 1, []
        elif in_block and line.strip() == "```":
            in_block = False
            yield Block(str(path.relative_to(ROOT)), start, language, "\n".join(body))
        elif in_block:
            body.append(line.removeprefix(indent))


def _shell_lines(block: Block) -> Iterator[Line]:
    pending, first = "", 0
    for offset, raw in enumerate(block.code.split("\n")):
        if block.language == "console":
            if not raw.startswith("$ ") and not pending:
                continue  # the command's output
            raw = raw.removeprefix("$ ")
        if not pending:
            first = block.line + offset
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        text = (pending + raw).strip()
        pending = ""
        if text and not text.startswith("#"):
            yield Line(block.page, first, text)


def _all_blocks() -> list[Block]:
    return [block for page in _pages() for block in _blocks(page)]


def _shell(blocks: list[Block]) -> list[Line]:
    return [line for block in blocks if block.language in SHELL_LANGUAGES for line in _shell_lines(block)]


def _commands(text: str) -> list[list[str]]:
    """The simple commands of a shell line, split at ``&&``, ``|``, ``;``, ``&``, comments dropped, ``$VAR``
    placeholders given a value."""
    lexer = shlex.shlex(_VARIABLE.sub("1", text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if _CONTROL.match(token):
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def _lyre_argv(command: list[str]) -> list[str] | None:
    """The arguments after ``lyre`` (or ``.venv/bin/lyre``), past any ``NAME=value`` before it."""
    words = list(command)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    if words and Path(words[0]).name == "lyre":
        return words[1:]
    return None


def _parse_error(argv: list[str]) -> str | None:
    """What the real parser says of ``lyre ARGV``, or None when it parses. A command given as an argument
    (``lyre bench --serve "lyre serve --port {port}"``) is parsed too, ``{port}`` standing for a port."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return stderr.getvalue().strip().splitlines()[-1]
    for argument in argv:
        if Path(argument.split(" ", 1)[0]).name == "lyre":
            nested = _lyre_argv(shlex.split(argument.replace("{port}", "8000")))
            if nested is not None and (error := _parse_error(nested)) is not None:
                return f"in {argument!r}: {error}"
    return None


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def routes() -> tuple[dict[str, set[str]], list[str]]:
    """The server's HTTP routes (path template -> methods) from its OpenAPI schema, and its WebSocket paths."""
    reference = _hook("reference")
    app = reference._app()
    paths = {path: {method.upper() for method in item} for path, item in app.openapi()["paths"].items()}
    return paths, reference.websocket_paths(app)


def _template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(path)) + "$")


def _route_error(method: str, path: str, paths: dict[str, set[str]]) -> str | None:
    found = [template for template in paths if _template(template).match(path)]
    if not found:
        return f"no route {path}"
    if not any(method in paths[template] for template in found):
        return f"{path} takes {sorted(set().union(*(paths[t] for t in found)))}, not {method}"
    return None


def _curl_requests(command: list[str]) -> list[tuple[str, str]]:
    """(method, path) of each URL a curl command asks for."""
    method, data, urls = None, False, []
    for before, word in zip(["", *command], command, strict=False):
        if before in ("-X", "--request"):
            method = word
        elif word in _CURL_DATA:
            data = True
        elif (not word.startswith("-") and before not in ("-H", "--header", "-o", "--output", "-u", "-w")
              and (url := _URL.match(word)) is not None):
            urls.append(url.group(1) or "/")
    return [(method or ("POST" if data else "GET"), path) for path in urls]


# ---- the site


def test_the_site_builds_strictly_with_the_readme_and_both_reference_pages(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                           check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout + built.stderr
    front = (site / "index.html").read_text()
    assert "Serve LLM-backbone speech models to real-time voice agents" in front
    assert 'href="getting-started/"' in front  # the README's docs/ links, made the site's own
    http_api = (site / "reference" / "http-api" / "index.html").read_text()
    for route in ("POST /v1/audio/speech", "GET /v1/audio/voices", "/v1/tts/websocket", "SpeechRequest"):
        assert route in http_api, route
    configuration = (site / "reference" / "configuration" / "index.html").read_text()
    assert "--max-streams" in configuration and "--redis" in configuration
    assert (site / "architecture" / "overview" / "index.html").read_text().count("tests/test_architecture.py")
    assert (site / "search" / "search_index.json").is_file()


def test_the_readme_is_short_and_opens_with_the_two_set_up_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150
    blocks = list(_blocks(ROOT / "README.md"))
    assert blocks, "the README has no code block"
    first_commands = [line.text for line in _shell([blocks[0]])][:2]
    assert blocks[0].language == "bash" and first_commands == SETUP_COMMANDS, blocks[0]
    for command in first_commands:
        script = ROOT / command.split()[1]
        assert script.is_file(), f"{command}: {script} is missing"


# ---- what the pages tell a reader to type


def test_every_lyre_command_in_the_docs_parses() -> None:
    commands = [(line, argv) for line in _shell(_all_blocks()) for command in _commands(line.text)
                if (argv := _lyre_argv(command)) is not None]
    failures = [f"{line.where()}\n    {error}" for line, argv in commands if (error := _parse_error(argv))]
    assert not failures, "commands that do not parse:\n" + "\n".join(failures)
    # not vacuous: the commands the pages lean on are found
    assert len(commands) >= 30, len(commands)
    assert {argv[0] for _, argv in commands} >= {"serve", "say", "bench", "eval", "train-voice", "route"}


def test_a_command_that_does_not_parse_is_named() -> None:
    assert _parse_error(["serve", "--no-such-flag"]) is not None
    assert _parse_error(["bench", "--serve", "lyre serve --port {port} --no-such-flag"]) is not None
    assert _parse_error(["bench", "--serve", ".venv/bin/lyre serve --port {port} --no-such-flag"]) is not None
    assert _parse_error(["bench", "--serve", ".venv/bin/lyre serve --port {port}"]) is None
    assert _parse_error(["serve", "--port", "8001", "--stt"]) is None
    lines = list(_shell_lines(Block("x.md", 3, "bash", "lyre serve \\\n    --stt   # comment\nlyre say hi")))
    assert [(line.line, line.text) for line in lines] == [(3, "lyre serve      --stt   # comment"), (5, "lyre say hi")]
    assert _commands("redis-server & lyre route --admin-key \"$KEY\" &") == [
        ["redis-server"], ["lyre", "route", "--admin-key", "1"]]


def test_every_http_request_in_the_docs_names_a_route_the_server_has(
        routes: tuple[dict[str, set[str]], list[str]]) -> None:
    paths, websockets = routes
    blocks = _all_blocks()
    requests: list[tuple[str, str, str]] = []  # (where, method, path)
    for line in _shell(blocks):
        for command in _commands(line.text):
            if Path(command[0]).name == "curl":
                requests += [(line.where(), method, path) for method, path in _curl_requests(command)]
    for block in blocks:
        for number, text in enumerate(block.code.split("\n"), block.line):
            where = f"{block.page}:{number}: {text.strip()}"
            if not text.lstrip().startswith("curl"):
                requests += [(where, m.group(1), m.group(2)) for m in _METHOD_PATH.finditer(text)]
    failures = [f"{where}\n    {error}" for where, method, path in requests
                if (error := _route_error(method, path, paths))]
    sockets = [(f"{block.page}:{block.line}", m.group(1)) for block in blocks for m in _WS_URL.finditer(block.code)]
    failures += [f"{where}: no WebSocket route {path}" for where, path in sockets
                 if not any(_template(w).match(path) for w in websockets)]
    assert not failures, "requests the server does not serve:\n" + "\n".join(failures)
    assert len(requests) >= 15 and len(sockets) >= 4, (len(requests), len(sockets))
    assert {"GET", "POST", "DELETE"} <= {method for _, method, _ in requests}


def test_a_request_for_a_route_the_server_lacks_is_named(routes: tuple[dict[str, set[str]], list[str]]) -> None:
    paths, websockets = routes
    assert _route_error("POST", "/v1/audio/speech", paths) is None
    assert _route_error("DELETE", "/v1/adapters/ava", paths) is None
    assert _route_error("GET", "/v1/audio/speech", paths) is not None
    assert _route_error("POST", "/v1/audio/speeches", paths) is not None
    assert _curl_requests(["curl", "-X", "DELETE", "-H", "Authorization: Bearer 1",
                           "localhost:8000/v1/adapters/ava?force=true"]) == [("DELETE", "/v1/adapters/ava")]
    assert _curl_requests(["curl", "-s", "http://127.0.0.1:8000/v1/audio/voices", "-F", "name=maya"]) == [
        ("POST", "/v1/audio/voices")]
    assert "/v1/realtime" in websockets and "/v1/tts/websocket" in websockets


def test_the_getting_started_requests_answer_from_a_demo_server(tmp_path: Path) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    page = DOCS / "getting-started.md"
    lines = [line.text for line in _shell(list(_blocks(page))) if line.text.startswith("curl ")]
    assert len(lines) >= 2, lines
    with running_server("--max-streams", "1") as server:
        answers: dict[str, Any] = {}
        for text in lines:
            # --fail: an HTTP error is curl's exit code 22, not a page of JSON written as the audio
            argv = [curl, "--fail", "--max-time", "120", *shlex.split(text.replace("http://127.0.0.1:8000", server.url),
                                                                        comments=True)[1:]]
            done = subprocess.run(argv, check=False, cwd=tmp_path, capture_output=True, timeout=150)
            assert done.returncode == 0, (text, done.returncode, done.stderr.decode())
            answers[text] = done.stdout
    speech = (tmp_path / "hello.wav").read_bytes()
    assert speech[:4] == b"RIFF" and speech[8:12] == b"WAVE" and len(speech) > 44 + 24_000, len(speech)
    voices = json.loads(next(out for text, out in answers.items() if "/v1/audio/voices" in text))
    assert "tara" in json.dumps(voices)
