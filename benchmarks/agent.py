"""Voice agent turn latency on this machine: a real ``lyre serve --stt --llm demo`` (demo TTS, Whisper base,
SmolLM2-135M), N conversations at once on ``/v1/realtime``.

Each conversation speaks espeak-ng sentences as pcm16 at 24 kHz in 40 ms
appends at real time, each followed by silence; after a turn it waits for the
reply to end, then speaks the next. Every condition runs in the same process,
one after another, at each level:

- speculative on or off (``speculative`` in session.update's ``lyre`` settings);
- Smart Turn on or off (``smart_turn``);
- and, with ``--detections``, the turn detection: ``server_vad`` (``--silence-ms``) or ``semantic_vad`` at an
  eagerness (``semantic-low``, ``semantic-medium``, ``semantic-high``), as OpenAI's Agents SDKs and LiveKit open
  every session with; ``--default-only`` keeps speculative and Smart Turn on, as a session has them by default.

Per turn: the end of the person's speech (when the append holding the last
sample above 2% of the peak was sent; espeak-ng's own trailing silence is not speech) to the first assistant audio delta (p50/p90); how often the first
audio was made before the confirmed end released it (a speculative reply);
speculative replies thrown away; and where the time went, from the reply's
own timing (``response.lyre.timing``): confirmed end, LLM first token, text to
speech, first audio made.

    .venv/bin/python benchmarks/agent.py
    .venv/bin/python benchmarks/agent.py --levels 1 2 4 --turns 2 --json agent.json
    .venv/bin/python benchmarks/agent.py --levels 1 --turns 6 --default-only \
        --detections server_vad semantic-low semantic-medium semantic-high
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' speech and server runner
from serving import running_server  # noqa: E402
from speech import SENTENCES, speak_pcm16  # noqa: E402

CHUNK = 24 * 40 * 2  # 40 ms of 24 kHz pcm16
TURN_SENTENCES = (3, 6, 11, 2, 8, 12)  # short questions and answers


@dataclass
class Turn:
    speculative: bool
    smart_turn: bool
    sessions: int
    detection: str = "server_vad"
    speech_end_to_audio_s: float = float("nan")
    speech_end_to_stopped_s: float = float("nan")  # endpointing, as the client sees it
    ready_before_release: bool = False  # the first audio was made before the confirmed end released it
    discarded: int = 0
    timing: dict[str, Any] = field(default_factory=dict)
    status: str = ""


def _voiced_bytes(pcm: bytes) -> int:
    """Where the speech in ``pcm`` ends (espeak-ng ends its audio with silence of its own), in bytes."""
    samples = np.abs(np.frombuffer(pcm, "<i2").astype(np.int32))
    loud = np.flatnonzero(samples > 0.02 * samples.max())
    return 2 * (int(loud[-1]) + 1) if loud.size else len(pcm)


def _silence(seconds: float) -> bytes:
    return bytes(2 * int(24_000 * seconds))


class _Inbox:
    """Every server event of one socket, with its arrival time, read on a task of its own."""

    def __init__(self, ws: ClientConnection) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._arrived = asyncio.Event()
        self._task = asyncio.create_task(self._read(ws))

    async def _read(self, ws: ClientConnection) -> None:
        async for message in ws:
            self.events.append((time.perf_counter(), json.loads(message)))
            self._arrived.set()

    async def wait_for(self, kind: str, after: int) -> None:
        async with asyncio.timeout(180):
            while not any(e["type"] == kind for _, e in self.events[after:]):
                self._arrived.clear()
                await self._arrived.wait()

    def close(self) -> None:
        self._task.cancel()


def _detection(name: str, silence_ms: int) -> dict[str, Any]:
    if name == "server_vad":
        return {"type": "server_vad", "silence_duration_ms": silence_ms}
    return {"type": "semantic_vad", "eagerness": name.removeprefix("semantic-")}


async def _conversation(url: str, speculative: bool, smart_turn: bool, sessions: int, turns: int, offset: int,
                        silence_s: float, max_speech_tokens: int, silence_ms: int, detection: str) -> list[Turn]:
    out = []
    async with connect(url, max_size=None) as ws:
        inbox = _Inbox(ws)
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "instructions": "Answer in one short sentence.",
            "lyre": {"events": True, "speculative": speculative, "smart_turn": smart_turn,
                     "max_speech_tokens": max_speech_tokens},
            "audio": {"input": {"transcription": {"language": "en"},
                                "turn_detection": _detection(detection, silence_ms)}}}}))
        for t in range(turns):
            sentence = SENTENCES[TURN_SENTENCES[(offset + t) % len(TURN_SENTENCES)]]
            out.append(await _turn(ws, inbox, speak_pcm16(sentence), silence_s,
                                   Turn(speculative, smart_turn, sessions, detection)))
        inbox.close()
    return out


async def _turn(ws: ClientConnection, inbox: _Inbox, speech: bytes, silence_s: float, turn: Turn) -> Turn:
    seen = len(inbox.events)
    voiced = _voiced_bytes(speech)
    pcm = speech + _silence(silence_s)
    start = time.perf_counter()
    speech_end = None
    for i in range(0, len(pcm), CHUNK):
        await asyncio.sleep(max(0.0, start + i / 48_000 - time.perf_counter()))  # real time, without drift
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(pcm[i:i + CHUNK]).decode()}))
        if speech_end is None and i + CHUNK >= voiced:
            speech_end = time.perf_counter()
    await inbox.wait_for("response.done", seen)
    assert speech_end is not None
    events = inbox.events[seen:]
    first_audio = next((t for t, e in events if e["type"] == "response.output_audio.delta"), None)
    stopped = next((t for t, e in events if e["type"] == "input_audio_buffer.speech_stopped"), None)
    done = next(e for _, e in events if e["type"] == "response.done")["response"]
    turn.status = done["status"]
    if first_audio is not None:
        turn.speech_end_to_audio_s = first_audio - speech_end
    if stopped is not None:
        turn.speech_end_to_stopped_s = stopped - speech_end
    lyre = done.get("lyre", {})
    turn.timing = lyre.get("timing", {})
    turn.discarded = lyre.get("discarded", 0)
    made, released = turn.timing.get("first_audio_ms"), turn.timing.get("released_ms")
    turn.ready_before_release = bool(lyre.get("speculative")) and made is not None and released is not None \
        and made <= released
    await asyncio.sleep(0.3)  # the person listens, then speaks again
    return turn


def _pct(values: list[float], q: float) -> float:
    values = [v for v in values if not np.isnan(v)]
    return float(np.percentile(values, q)) if values else float("nan")


def _ms(values: list[float | None]) -> str:
    kept = [v for v in values if v is not None]
    return f"{statistics.median(kept):.0f}" if kept else "-"


def _report(turns: list[Turn]) -> str:
    lines = ["| sessions | turn detection | speculative | smart turn | turns | speech end to first audio p50 s | p90 s | "
             "speech end to confirmed end p50 s | audio ready before release | discarded | "
             "LLM first token ms | to speech ms | first audio made ms | released ms |",
             "|---:|:---|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    keys = sorted({(t.sessions, t.detection, t.speculative, t.smart_turn) for t in turns},
                  key=lambda k: (k[0], k[1], not k[2], not k[3]))
    for sessions, detection, speculative, smart in keys:
        group = [t for t in turns if (t.sessions, t.detection, t.speculative, t.smart_turn)
                 == (sessions, detection, speculative, smart)]
        audio = [t.speech_end_to_audio_s for t in group]
        ready = sum(t.ready_before_release for t in group)
        lines.append(
            f"| {sessions} | {detection} | {'on' if speculative else 'off'} | {'on' if smart else 'off'} | {len(group)} | "
            f"{_pct(audio, 50):.2f} | {_pct(audio, 90):.2f} | {_pct([t.speech_end_to_stopped_s for t in group], 50):.2f}"
            f" | {ready}/{len(group) if speculative else 0} | {max(t.discarded for t in group)} | "
            f"{_ms([t.timing.get('llm_first_token_ms') for t in group])} | "
            f"{_ms([t.timing.get('tts_start_ms') for t in group])} | "
            f"{_ms([t.timing.get('first_audio_ms') for t in group])} | "
            f"{_ms([t.timing.get('released_ms') for t in group])} |")
    return "\n".join(lines)


async def _run(url: str, args: argparse.Namespace) -> list[Turn]:
    turns: list[Turn] = []
    conditions = ((True, True),) if args.default_only else ((True, True), (False, True), (True, False), (False, False))
    for sessions in args.levels:
        for detection in args.detections:
            for speculative, smart in conditions:
                print(f"{sessions} session(s), {detection}, speculative {speculative}, smart turn {smart}",
                      file=sys.stderr, flush=True)
                results = await asyncio.gather(*(
                    _conversation(url, speculative, smart, sessions, args.turns, offset, args.silence,
                                  args.max_speech_tokens, args.silence_ms, detection) for offset in range(sessions)))
                turns += [t for r in results for t in r]
    return turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4], help="concurrent conversations")
    parser.add_argument("--turns", type=int, default=2, help="turns each conversation speaks per condition")
    parser.add_argument("--silence", type=float, default=1.2, help="seconds of silence after each sentence")
    parser.add_argument("--silence-ms", type=int, default=500, help="turn_detection.silence_duration_ms")
    parser.add_argument("--max-speech-tokens", type=int, default=140, help="audio tokens per spoken segment")
    parser.add_argument("--detections", nargs="+", default=["server_vad"],
                        choices=["server_vad", "semantic-low", "semantic-medium", "semantic-high", "semantic-auto"],
                        help="turn detections to run (default: server_vad)")
    parser.add_argument("--default-only", action="store_true",
                        help="only speculative and Smart Turn on, as a session has them by default")
    parser.add_argument("--json", type=Path, default=None, help="also write every turn here")
    parser.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[], help="more `lyre serve` arguments")
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start",
          flush=True)
    serve = ("--stt", "--llm", "demo", "--max-streams", "8", "--llm-max-batch", "4", "--llm-max-seq-len", "1024")
    with running_server(*serve, *args.serve_args) as server:
        turns = asyncio.run(_run(f"{server.ws_url}/v1/realtime?model=lyre", args))
    print(_report(turns))
    print(f"load average {os.getloadavg()[0]:.2f} at the end; failed or cancelled turns: "
          f"{sum(t.status != 'completed' for t in turns)}")
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in turns], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
