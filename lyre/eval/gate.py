"""The whole gate: the prompts spoken by a server (and a second, to compare) or a folder's audio, each clip
transcribed and scored, and the two sides' paired differences.

    result = asyncio.run(run_eval([Target(url="http://127.0.0.1:8000")], EvalConfig()))
    result = asyncio.run(score_folder(Path("clips"), EvalConfig(references=(("en-us", Path("ref.wav")),))))

A server is a running one (``Target(url=...)``) or a command started for the run (``Target(serve=...)``,
``lyre.bench``'s ``--serve``: on a free ``{port}``, stopped once its clips are made and judged). The two
sides of a comparison run one after the other, never at once. Nothing here is lyre's serving code: the gate
talks HTTP to servers, and loads only Whisper (as ``lyre serve --stt`` does) and a speaker embedding.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import httpx

from lyre.bench.texts import BUILTIN_TEXTS
from lyre.bench.trials import check_command, served
from lyre.eval.clips import Clip, from_file
from lyre.eval.folder import read_folder
from lyre.eval.judges import BUILTIN_WHISPER, Judge, LocalWhisper, ServerStt
from lyre.eval.paired import RESAMPLES, Difference, similarity_difference, wer_difference
from lyre.eval.scoring import References, Scored, Utterance, score_clips
from lyre.eval.speakers import EMBEDDINGS, make_embedding
from lyre.eval.utterances import SpeechSettings, prompts, speak_all

__all__ = ["EvalConfig", "EvalResult", "Target", "load_references", "local_judge", "paired", "run_eval",
           "score_folder", "score_server"]


@dataclass(frozen=True)
class Target:
    """One side of the gate: a running server's URL, or a command to serve for the run."""

    url: str | None = None
    serve: str | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (self.serve is None):
            raise ValueError("a server is a URL or a command to serve, not both")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server URL must start with http:// or https://, got {self.url!r}")
        if self.serve is not None:
            check_command(self.serve)

    @property
    def label(self) -> str:
        return self.url.rstrip("/") if self.url is not None else str(self.serve)


@dataclass(frozen=True)
class EvalConfig:
    """Everything a gate run is, validated once."""

    texts: tuple[str, ...] = BUILTIN_TEXTS
    voices: tuple[str, ...] = ("tara",)
    seeds: tuple[int, ...] = (0,)
    speech: SpeechSettings = field(default_factory=SpeechSettings)
    whisper: str | None = None  # None: each server's own speech to text; a folder: the built-in Whisper base
    whisper_device: str = "cpu"
    language: str = "en"
    references: tuple[tuple[str, Path], ...] = ()  # (voice or speaker, clip)
    embedding: str = "resemblyzer"
    resamples: int = RESAMPLES
    bootstrap_seed: int = 0
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 300.0
    ready_timeout_s: float = 600.0
    save_audio: Path | None = None

    def __post_init__(self) -> None:
        if not self.texts or not self.voices or not self.seeds:
            raise ValueError("the gate needs at least one text, one voice and one seed")
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"--embedding must be one of {', '.join(EMBEDDINGS)}, got {self.embedding!r}")
        if self.resamples < 1:
            raise ValueError(f"--resamples must be at least 1, got {self.resamples}")
        if self.timeout_s <= 0:
            raise ValueError(f"--timeout must be positive, got {self.timeout_s}")
        speakers = [speaker for speaker, _ in self.references]
        if len(set(speakers)) != len(speakers):
            raise ValueError(f"--reference names a voice twice: {speakers}")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def settings(self) -> dict[str, object]:
        """The settings as recorded beside the results (the API key is never written)."""
        return {"texts": list(self.texts), "voices": list(self.voices), "seeds": list(self.seeds),
                "response_format": self.speech.response_format, "max_tokens": self.speech.max_tokens,
                "concurrency": self.speech.concurrency, "whisper": self.whisper, "language": self.language,
                "references": {speaker: str(path) for speaker, path in self.references},
                "embedding": self.embedding if self.references else None, "resamples": self.resamples,
                "bootstrap_seed": self.bootstrap_seed, "api_key_set": self.api_key is not None}


@dataclass(frozen=True)
class EvalResult:
    config: EvalConfig
    sides: list[Scored]  # one, or two to compare
    wer_difference: Difference | None = None  # B - A
    similarity_difference: Difference | None = None


def load_references(config: EvalConfig) -> References | None:
    """The references' embeddings (None: no --reference); a reference that cannot be used fails here."""
    return References(make_embedding(config.embedding), config.references) if config.references else None


def local_judge(config: EvalConfig) -> LocalWhisper | None:
    """The Whisper named by ``config.whisper``, loaded here; None: each server judges its own audio."""
    return LocalWhisper(config.whisper, config.language, config.whisper_device) if config.whisper else None


@asynccontextmanager
async def _running(target: Target, config: EvalConfig, stream: TextIO) -> AsyncIterator[str]:
    if target.url is not None:
        yield target.url.rstrip("/")
        return
    assert target.serve is not None
    async with served(target.serve, config.ready_timeout_s, stream) as (url, _):
        yield url


def _save(folder: Path, clips: Sequence[Clip], utterances: Sequence[Utterance]) -> None:
    """The clips in ``--audio-dir``'s layout, so the run can be scored again without a server."""
    for clip, utterance in zip(clips, utterances, strict=True):
        path = folder / utterance.speaker / f"{clip.name}.wav"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(clip.data)
        path.with_suffix(".txt").write_text(utterance.text + "\n", encoding="utf-8")


async def score_server(client: httpx.AsyncClient, url: str, label: str, config: EvalConfig, local: Judge | None,
                       references: References | None, save_to: Path | None = None,
                       stream: TextIO = sys.stderr) -> Scored:
    """The prompts spoken by the server at ``url``, judged by ``local`` (None: its own speech to text) and
    scored; kept under ``save_to`` when given."""
    # The judge first: a server that cannot judge is refused before anything is spoken.
    judge = local or await ServerStt.open(client, url, config.language, config.headers)
    asked = prompts(config.texts, config.voices, config.seeds)
    utterances = [Utterance(p.text, p.voice, p.seed) for p in asked]
    print(f"lyre: {len(asked)} utterances from {url}", file=stream)
    clips = await speak_all(client, url, asked, config.speech, config.headers)
    if save_to is not None:
        _save(save_to, clips, utterances)
    print(f"lyre: transcribing them with {judge.name}", file=stream)
    return await score_clips(label, clips, utterances, judge, references)


def paired(config: EvalConfig, a: Scored, b: Scored) -> EvalResult:
    """Two sides that answered the same prompts, and their paired differences (B - A)."""
    wer = wer_difference([r.words.errors for r in a.rows], [r.words.errors for r in b.rows],
                         [r.words.words for r in a.rows], config.resamples, config.bootstrap_seed)
    pairs = [(x.similarity, y.similarity) for x, y in zip(a.rows, b.rows, strict=True)
             if x.similarity is not None and y.similarity is not None]
    similarity = (similarity_difference([x for x, _ in pairs], [y for _, y in pairs], config.resamples,
                                        config.bootstrap_seed) if pairs else None)
    return EvalResult(config, [a, b], wer, similarity)


async def run_eval(targets: Sequence[Target], config: EvalConfig, stream: TextIO = sys.stderr) -> EvalResult:
    """The prompts spoken by each target in turn (one, or two to compare), judged, scored and paired."""
    if not 1 <= len(targets) <= 2:
        raise ValueError("the gate takes one server, and optionally a second to compare")
    references = load_references(config)  # a reference that cannot be used fails the run before any server works
    local = local_judge(config)
    sides = []
    try:
        async with httpx.AsyncClient(timeout=config.timeout_s) as client:
            for i, target in enumerate(targets):
                save_to = config.save_audio
                if save_to is not None and len(targets) == 2:
                    save_to = save_to / "ab"[i]
                async with _running(target, config, stream) as url:
                    sides.append(await score_server(client, url, target.label, config, local, references, save_to,
                                                    stream))
    finally:
        if local is not None:
            await local.aclose()
    return EvalResult(config, sides) if len(sides) == 1 else paired(config, *sides)


async def score_folder(folder: Path, config: EvalConfig, stream: TextIO = sys.stderr) -> EvalResult:
    """Every audio file of ``folder`` (`lyre.eval.folder`) scored against its text, by a Whisper loaded here."""
    items = read_folder(folder, [path for _, path in config.references])
    references = load_references(config)
    clips = [from_file(item.audio, item.name) for item in items]  # an unreadable file fails before Whisper loads
    judge = LocalWhisper(config.whisper or BUILTIN_WHISPER, config.language, config.whisper_device)
    try:
        print(f"lyre: transcribing {len(clips)} files with {judge.name}", file=stream)
        scored = await score_clips(str(folder), clips, [Utterance(item.text, item.speaker) for item in items],
                                   judge, references)
    finally:
        await judge.aclose()
    return EvalResult(config, [scored])
