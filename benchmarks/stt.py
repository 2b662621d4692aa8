"""Speech-to-text figures on this machine, on the demo Whisper base (or --model).

The speech is the tests' sentences (tests/speech.py), spoken by espeak-ng.

1. Final passes: real-time factor over the sentences, beam 5 and greedy.
2. Partial passes: cost by utterance length. A partial encodes the audio and
   2 s of silence (a final pass always encodes 30 s), so it grows with length.
3. Partial batching: n partials in one batch (PartialPolicy(max_batch=n))
   against the same n one after another, and the CPU policy that implies:
   a batch size is worth it if a round over n sessions ends sooner and no
   session waits longer on average.
4. Realtime sessions: a real ``lyre serve --no-tts``, N WebSocket sessions at
   once (OpenAI's realtime transcription events, server VAD), each streaming
   pcm16 at 24 kHz in 40 ms chunks at real time, as a microphone delivers
   them, with silence after each sentence. Partial latency: from the moment a
   word's end was spoken (its end in the final pass's word timestamps on the
   same audio) to the delta that holds it. A session keeps real time when
   every sentence's completed transcript arrives within --max-lag seconds of
   the end of its speech.
5. With --final-windows, only this: the final pass's first window. Each
   sentence (the tests' and more, by several espeak-ng voices and speeds),
   as a file holds it and as a live turn does (300 ms before, 500 ms after),
   through the final pass on the audio plus each --pads of silence and on
   Whisper's 30 s: word error rate and time per pass, for each of --kernels
   (CTranslate2's CPU kernels: CT2_FORCE_CPU_ISA, +MKL for the GEMM library
   an Intel CPU gets), each in its own process since CTranslate2 reads them
   when it loads.

    .venv/bin/python benchmarks/stt.py
    .venv/bin/python benchmarks/stt.py --levels 1 2 4 8 --turns 3 --json stt.json
    .venv/bin/python benchmarks/stt.py --final-windows --kernels AVX2 AVX --json windows.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from websockets.asyncio.client import connect

from lyre.stt import SAMPLE_RATE, PartialPolicy, STTConfig, TranscribeOptions, Transcriber
from lyre.stt.whisper import final_pass
from lyre.stt.window import FULL_WINDOW, FinalWindow

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' speech and server runner
from serving import running_server
from speech import SENTENCES, speak, speak_pcm16, wer

# A batch size must lower the mean wait of one-by-one passes by this much to be worth it.
MIN_GAIN = 0.05
CLIENT_RATE = 24_000  # what OpenAI's realtime clients send
CHUNK_S = 0.040


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _p90(values: list[float]) -> float:
    return float(np.percentile(values, 90)) if values else float("nan")


def _s(seconds: float) -> str:
    return "-" if np.isnan(seconds) else f"{seconds:.2f}"


# -- 1-3: the transcriber in process --


async def _timed_finals(stt: Transcriber, beams: list[int]) -> dict[int, tuple[list[str], list[float]]]:
    """Each sentence's text and wall time per beam size; the beam sizes take turns, so drift hits both."""
    out: dict[int, tuple[list[str], list[float]]] = {beam: ([], []) for beam in beams}
    for sentence in SENTENCES:
        for beam in beams:
            start = time.perf_counter()
            transcript = await stt.transcribe(speak(sentence), TranscribeOptions(language="en", beam_size=beam), "bench")
            out[beam][1].append(time.perf_counter() - start)
            out[beam][0].append(transcript.text)
    return out


def final_passes(stt: Transcriber, beams: list[int]) -> list[dict[str, float]]:
    audio = sum(speak(s).size for s in SENTENCES) / SAMPLE_RATE
    rows = []
    for beam, (texts, walls) in asyncio.run(_timed_finals(stt, beams)).items():
        rows.append({"beam": beam, "audio_s": audio, "wall_s": sum(walls), "x_realtime": audio / sum(walls),
                     "wall_per_audio": sum(walls) / audio, "ms_per_pass": 1000 * _median(walls),
                     "wer": wer(SENTENCES, texts)})
    return rows


def partial_cost(stt: Transcriber, seconds: float, runs: int) -> dict[str, float]:
    speech = np.concatenate([speak(s) for s in SENTENCES])[: int(seconds * SAMPLE_RATE)]
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        asyncio.run(stt.partial(speech, "en", session="bench"))
        walls.append(time.perf_counter() - start)
    return {"audio_s": seconds, "ms_per_pass": 1000 * _median(walls), "wall_per_audio": _median(walls) / seconds}


async def _partials_at_once(stt: Transcriber, audios: list[np.ndarray]) -> list[float]:
    """Each partial's completion time (s) when all are submitted at once, by different sessions."""
    start = time.perf_counter()

    async def one(session: Hashable, audio: np.ndarray) -> float:
        await stt.partial(audio, "en", session=session)
        return time.perf_counter() - start

    return list(await asyncio.gather(*(one(i, a) for i, a in enumerate(audios))))


def partial_batching(stt: Transcriber, n: int, runs: int) -> dict[str, float]:
    batching = Transcriber(stt.model, STTConfig(partial_policy=PartialPolicy(max_batch=n, max_wait_ms=50.0)))
    alone = Transcriber(stt.model, STTConfig(partial_policy=PartialPolicy(max_batch=1)))
    audios = [speak(SENTENCES[i % len(SENTENCES)]) for i in range(n)]
    try:
        batched, single = [], []
        for _ in range(runs):  # taking turns, so drift in the machine's load hits both
            batched.append(asyncio.run(_partials_at_once(batching, audios)))
            single.append(asyncio.run(_partials_at_once(alone, audios)))
        mean_batch = batching.stats().mean_partial_batch
    finally:
        batching.close()
        alone.close()
    return {"n": n, "mean_batch": mean_batch,
            "batched_wall_ms": 1000 * _median([max(r) for r in batched]),
            "single_wall_ms": 1000 * _median([max(r) for r in single]),
            "batched_mean_wait_ms": 1000 * _median([statistics.fmean(r) for r in batched]),
            "single_mean_wait_ms": 1000 * _median([statistics.fmean(r) for r in single])}


def implied_policy(rows: list[dict[str, float]]) -> PartialPolicy:
    """The largest batch that finishes a round of partials at least MIN_GAIN sooner than one by one,
    without making sessions wait longer on average (by more than MIN_GAIN); else 1.

    A live session asks for its next partial as soon as the last is done, so
    under load the time for one round over every session is how often each
    session gets a new partial: that is what a batch must shorten.
    """
    good = [r["n"] for r in rows if r["n"] > 1
            and r["batched_wall_ms"] <= (1 - MIN_GAIN) * r["single_wall_ms"]
            and r["batched_mean_wait_ms"] <= (1 + MIN_GAIN) * r["single_mean_wait_ms"]]
    return PartialPolicy(max_batch=int(max(good)), max_wait_ms=10.0) if good else PartialPolicy()


# -- 4: realtime sessions over the WebSocket --


@dataclass(frozen=True)
class Turn:
    """One sentence a session speaks, placed in the session's audio stream."""

    sentence: str
    offset_s: float  # where it starts in the stream
    word_ends_s: tuple[float, ...]  # from the stream's start
    speech_end_s: float  # from the stream's start


@dataclass
class SessionResult:
    turns: int
    items: int
    partial_latencies_s: list[float]
    words_by_partials: int
    words: int
    completed_lags_s: list[float]  # from the end of the speech
    commit_lags_s: list[float]  # from the committed event: the server's own time
    transcripts: list[str]
    send_late_max_s: float

    def real_time(self, max_lag: float) -> bool:
        lags = self.completed_lags_s
        return self.items == self.turns == len(lags) and all(lag <= max_lag for lag in lags)


def speech_end(audio: np.ndarray) -> float:
    """Seconds to the last sample above -40 dB of the peak: where espeak-ng stops speaking."""
    loud = np.flatnonzero(np.abs(audio) > 0.01 * np.abs(audio).max())
    return (loud[-1] + 1) / SAMPLE_RATE


def word_ends(stt: Transcriber, sentences: list[str]) -> dict[str, tuple[float, ...]]:
    options = TranscribeOptions(language="en", beam_size=1, word_timestamps=True)

    async def run() -> list:
        return [await stt.transcribe(speak(s), options, session="bench") for s in sentences]

    return {s: tuple(w.end for seg in t.segments for w in seg.words) for s, t in zip(sentences, asyncio.run(run()))}


def plan(sentences: list[str], ends: dict[str, tuple[float, ...]], silence_s: float) -> tuple[list[Turn], bytes]:
    """The turns of one session and its whole pcm16 stream: each sentence, then silence."""
    turns, pcm, offset = [], bytearray(), 0.0
    for sentence in sentences:
        turns.append(Turn(sentence, offset, tuple(offset + e for e in ends[sentence]),
                          offset + speech_end(np.asarray(speak(sentence)))))
        spoken = speak_pcm16(sentence, CLIENT_RATE) + bytes(2 * round(silence_s * CLIENT_RATE))
        pcm += spoken
        offset += len(spoken) / 2 / CLIENT_RATE
    return turns, bytes(pcm)


async def realtime_session(ws_url: str, turns: list[Turn], pcm: bytes, timeout_s: float) -> SessionResult:
    update = {"type": "transcription_session.update", "session": {
        "input_audio_format": "pcm16",
        "input_audio_transcription": {"model": "whisper-1", "language": "en"},
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}
    events: list[tuple[float, dict]] = []
    async with connect(f"{ws_url}/v1/realtime?intent=transcription", max_size=None) as ws:
        await ws.send(json.dumps(update))
        while (event := json.loads(await ws.recv()))["type"] != "transcription_session.updated":
            if event["type"] == "error":
                raise RuntimeError(f"the session update was refused: {event['error']}")

        async def read() -> None:
            done = 0
            async for message in ws:
                event = json.loads(message)
                events.append((time.perf_counter(), event))
                done += event["type"] == "conversation.item.input_audio_transcription.completed"
                if done == len(turns):
                    return

        reader = asyncio.ensure_future(read())
        step = round(CHUNK_S * CLIENT_RATE) * 2
        start, late = time.perf_counter(), 0.0
        for i, at in enumerate(range(0, len(pcm), step)):
            # Chunk i holds audio [40i, 40i + 40) ms: a microphone has it at 40(i + 1) ms.
            due = start + (i + 1) * CHUNK_S
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            late = max(late, time.perf_counter() - due)
            await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                      "audio": base64.b64encode(pcm[at:at + step]).decode()}))
        try:
            await asyncio.wait_for(reader, timeout_s)
        except TimeoutError:
            _log(f"a session waited {timeout_s:.0f} s for its transcripts and gave up")
    return _score(turns, events, start, late)


def _score(turns: list[Turn], events: list[tuple[float, dict]], start: float, late: float) -> SessionResult:
    items: list[str] = []  # in the order the server opened them
    committed: dict[str, float] = {}
    said: dict[str, int] = {}  # words delivered per item
    latencies, by_partials, lags, commit_lags, transcripts = [], 0, [], [], []
    for at, event in events:
        kind, item = event["type"], event.get("item_id")
        if item is not None and item not in items:
            items.append(item)
        if kind == "input_audio_buffer.committed":
            committed[item] = at
        elif kind == "conversation.item.input_audio_transcription.delta":
            turn = items.index(item)
            new = event["delta"].split()
            first, said[item] = said.get(item, 0), said.get(item, 0) + len(new)
            if item in committed or turn >= len(turns):
                continue  # the final pass's remainder, or an utterance the VAD split off
            ends = turns[turn].word_ends_s
            for position in range(first, min(first + len(new), len(ends))):
                latencies.append(at - start - ends[position])
                by_partials += 1
        elif kind == "conversation.item.input_audio_transcription.completed":
            turn = items.index(item)
            transcripts.append(event["transcript"])
            if turn < len(turns):
                lags.append(at - start - turns[turn].speech_end_s)
            if item in committed:
                commit_lags.append(at - committed[item])
    return SessionResult(turns=len(turns), items=len(items), partial_latencies_s=latencies,
                         words_by_partials=by_partials, words=sum(len(t.word_ends_s) for t in turns),
                         completed_lags_s=lags, commit_lags_s=commit_lags, transcripts=transcripts, send_late_max_s=late)


async def realtime_level(ws_url: str, sessions: list[tuple[list[Turn], bytes]], timeout_s: float) -> list[SessionResult]:
    return list(await asyncio.gather(*(realtime_session(ws_url, t, pcm, timeout_s) for t, pcm in sessions)))


def realtime_rows(long: list[str], ends: dict[str, tuple[float, ...]],
                  args: argparse.Namespace) -> tuple[list[dict], int]:
    """Per level of concurrent sessions, its figures; and the most sessions that all kept real time."""
    rows, held = [], 0
    serve = ["--no-tts", "--stt-device", args.device, *(["--stt-model", str(args.model)] if args.model else [])]
    with running_server(*serve, *args.serve_args) as server:
        for n in args.levels:
            _log(f"4. {n} realtime sessions")
            sessions = [plan([long[(i * args.turns + k) % len(long)] for k in range(args.turns)], ends, args.silence)
                        for i in range(n)]
            results = asyncio.run(realtime_level(server.ws_url, sessions, args.timeout))
            latencies = [x for r in results for x in r.partial_latencies_s]
            lags = [x for r in results for x in r.completed_lags_s]
            kept = sum(r.real_time(args.max_lag) for r in results)
            references = [t.sentence for turns, _ in sessions for t in turns]
            heard = [r.transcripts[k] if k < len(r.transcripts) else "" for r in results for k in range(r.turns)]
            rows.append({"sessions": n, "partial_p50_s": _median(latencies), "partial_p90_s": _p90(latencies),
                         "words_by_partials": sum(r.words_by_partials for r in results) / sum(r.words for r in results),
                         "completed_p50_s": _median(lags), "completed_max_s": max(lags, default=float("nan")),
                         "commit_to_completed_p50_s": _median([x for r in results for x in r.commit_lags_s]),
                         "real_time": kept / n, "split_or_missing": sum(r.items != r.turns for r in results),
                         "wer": wer(references, heard), "send_late_max_s": max(r.send_late_max_s for r in results)})
            if kept == n:
                held = n
    return rows, held


# -- 5: the final pass's first window --

# More requests than the tests' 14 sentences, as plain (no numbers, no words Whisper may join or split).
MORE_SENTENCES = (
    "Could you move my reservation to Friday afternoon instead?",
    "The package was left outside the front door in the rain.",
    "Please read me the last message from my sister.",
    "I forgot my password and cannot open my account.",
    "Is there a quiet table near the window available tonight?",
    "My train was delayed, so I will be about half an hour late.",
    "Find me a good Italian restaurant close to the station.",
    "The heating in the bedroom has stopped working again.",
    "Would you like me to repeat the address slowly?",
    "We are out of milk, bread and coffee.",
    "Please add a reminder to water the plants on Thursday.",
    "Which platform does the next train to the airport leave from?",
)
SPEAKERS = (("en-us", 150), ("en-gb", 175), ("en-us+f3", 130))  # espeak-ng voice, words a minute; the tests' first
TURN_PADDING_S = (0.3, 0.5)  # what a server-VAD turn holds: prefix padding before the speech, the silence after


def window_speech(speakers: int) -> list[tuple[str, str, np.ndarray]]:
    """(shape, sentence, audio) for each sentence and speaker: as a file holds it, and as a live turn."""
    before, after = (np.zeros(round(s * SAMPLE_RATE), np.float32) for s in TURN_PADDING_S)
    out = []
    for voice, wpm in SPEAKERS[:speakers]:
        for sentence in SENTENCES + MORE_SENTENCES:
            audio = np.asarray(speak(sentence, voice=voice, wpm=wpm))
            out += [("file", sentence, audio), ("turn", sentence, np.concatenate([before, audio, after]))]
    return out


def window_worker(pads: list[float], speakers: int) -> None:
    """Every utterance through every first window on this process's kernels; JSON rows on stdout."""
    stt = Transcriber.load()
    model = stt.model  # the passes run here, one at a time, not on the transcriber's worker thread
    windows = [FinalWindow(pad) for pad in pads] + [FULL_WINDOW]
    options = TranscribeOptions(language="en")
    final_pass(model, np.asarray(speak(SENTENCES[0])), options)  # warm-up
    rows = []
    for shape, sentence, audio in window_speech(speakers):
        for window in windows:  # taking turns, so drift in the machine's load hits every window alike
            cpu, wall = time.process_time(), time.perf_counter()  # CPU time: every thread of this process
            text = final_pass(model, audio, options, window).text
            rows.append({"shape": shape, "sentence": sentence, "audio_s": audio.size / SAMPLE_RATE,
                         "pad_s": window.pad_s, "frames": window.frames(audio.size), "text": text,
                         "cpu_ms": 1000 * (time.process_time() - cpu), "wall_ms": 1000 * (time.perf_counter() - wall)})
        _log(f"{len(rows)} passes")
    stt.close()
    json.dump(rows, sys.stdout)


def kernel_env(kernels: str) -> dict[str, str]:
    """CTranslate2's settings for ``AVX2``, ``AVX``, ``GENERIC`` (its own kernels), ``+MKL`` (Intel's GEMMs)."""
    isa, _, gemm = kernels.partition("+")
    return {"CT2_FORCE_CPU_ISA": isa, "CT2_USE_MKL": "1" if gemm == "MKL" else "0"}


def final_windows(args: argparse.Namespace) -> None:
    if args.from_json is not None:  # the table again from a run's figures, without measuring
        figures = json.loads(args.from_json.read_text())
    else:
        figures = {}
        for kernels in args.kernels:
            _log(f"5. final windows on {kernels}")
            worker = [sys.executable, __file__, "--final-windows-worker", "--speakers", str(args.speakers),
                      "--pads", *map(str, args.pads)]
            done = subprocess.run(worker, env={**os.environ, **kernel_env(kernels)}, stdout=subprocess.PIPE,
                                  text=True, check=True)
            figures[kernels] = json.loads(done.stdout)
    first = next(iter(figures.values()))
    pads = sorted({r["pad_s"] for r in first if r["pad_s"] is not None})
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Whisper base (demo), beam 5, "
          f"language en; {len(first) // 2 // (len(pads) + 1)} utterances per shape; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("\n| kernels | audio | first window | WER | CPU ms per pass | wall ms per pass | encoder frames (mean) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for kernels, rows in figures.items():
        for shape in ("file", "turn"):
            for label, passes in _policies([r for r in rows if r["shape"] == shape], pads, args.full_under):
                print(f"| {kernels} | {shape} | {label} "
                      f"| {100 * wer([r['sentence'] for r in passes], [r['text'] for r in passes]):.1f}% "
                      f"| {statistics.fmean(r['cpu_ms'] for r in passes):.0f} "
                      f"| {statistics.fmean(r['wall_ms'] for r in passes):.0f} "
                      f"| {statistics.fmean(r['frames'] for r in passes):.0f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


def _policies(rows: list[dict], pads: list[float], full_under: list[float]) -> list[tuple[str, list[dict]]]:
    """(a window policy, the passes it runs) for each pad, the full window, and the full window only for
    audio under each of ``full_under`` seconds (else the shortest pad), chosen from the same passes."""
    by_pad = {pad: [r for r in rows if r["pad_s"] == pad] for pad in [*pads, None]}  # each in utterance order
    out = [(str(FinalWindow(pad)), passes) for pad, passes in by_pad.items()]
    for under in full_under:
        mixed = [full if full["audio_s"] < under else fitted for fitted, full in zip(by_pad[pads[0]], by_pad[None])]
        out.append((f"30 s under {under:g} s, else audio + {pads[0]:g} s", mixed))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="a CTranslate2 Whisper folder (default: the demo)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=3, help="runs per partial measurement (median)")
    parser.add_argument("--lengths", type=float, nargs="+", default=[1.0, 3.0, 10.0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4], help="concurrent realtime sessions")
    parser.add_argument("--turns", type=int, default=2, help="sentences each realtime session speaks")
    parser.add_argument("--silence", type=float, default=1.0, help="seconds of silence after each sentence")
    parser.add_argument("--max-lag", type=float, default=3.0,
                        help="seconds from speech end to its completed transcript that still count as real time")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a session waits for its transcripts")
    parser.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[], help="more `lyre serve` arguments")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--final-windows", action="store_true", help="measure only the final pass's first window (5)")
    parser.add_argument("--final-windows-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pads", type=float, nargs="+", default=[2.0, 5.0, 10.0],
                        help="seconds of silence after the audio in a fitted first window (5)")
    parser.add_argument("--speakers", type=int, default=len(SPEAKERS), help="espeak-ng voices and speeds (5)")
    parser.add_argument("--kernels", nargs="+", default=["AVX2", "AVX"],
                        help="CTranslate2 CPU kernels to measure on (5): AVX2, AVX, GENERIC, optionally +MKL")
    parser.add_argument("--full-under", type=float, nargs="*", default=[4.0],
                        help="also the policy: the full window for audio under this many seconds (5)")
    parser.add_argument("--from-json", type=Path, default=None, help="(5) print the table of an earlier --json")
    args = parser.parse_args()
    if args.final_windows_worker:
        return window_worker(args.pads, args.speakers)
    if args.final_windows:
        return final_windows(args)

    stt = Transcriber.load(args.model, STTConfig(device=args.device))
    asyncio.run(stt.transcribe(speak(SENTENCES[0]), TranscribeOptions(language="en"), session="warm-up"))
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Whisper "
          f"{'base (demo)' if args.model is None else args.model}, {args.device}; "
          f"load average {os.getloadavg()[0]:.2f} at the start (the figures are timings: run nothing else)")

    _log("1. final passes")
    finals = final_passes(stt, [5, 1])
    print(f"\n1. final passes over {len(SENTENCES)} sentences ({finals[0]['audio_s']:.1f} s of speech), language en")
    print("| decoding | ms per pass (median) | x real time | wall s per audio s | WER |")
    print("|---|---:|---:|---:|---:|")
    for r in finals:
        print(f"| {'beam 5' if r['beam'] > 1 else 'greedy'} | {r['ms_per_pass']:.0f} | {r['x_realtime']:.2f} "
              f"| {r['wall_per_audio']:.3f} | {100 * r['wer']:.1f}% |")

    _log("2. partial passes")
    partials = [partial_cost(stt, s, args.runs) for s in args.lengths]
    print(f"\n2. partial pass (greedy, no timestamps) by utterance length, median of {args.runs}")
    print("| audio s | ms per pass | wall s per audio s |")
    print("|---:|---:|---:|")
    for r in partials:
        print(f"| {r['audio_s']:.0f} | {r['ms_per_pass']:.0f} | {r['wall_per_audio']:.2f} |")

    _log("3. partial batching")
    batching = [partial_batching(stt, n, args.runs) for n in args.batches]
    print(f"\n3. n partials (one per session) submitted at once, median of {args.runs}")
    print("| n | mean batch | batched: wall ms | one by one: wall ms | batched: mean wait ms "
          "| one by one: mean wait ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in batching:
        print(f"| {r['n']} | {r['mean_batch']:.1f} | {r['batched_wall_ms']:.0f} | {r['single_wall_ms']:.0f} "
              f"| {r['batched_mean_wait_ms']:.0f} | {r['single_mean_wait_ms']:.0f} |")
    print(f"implied CPU policy: {implied_policy(batching)}")
    print(f"PartialPolicy.for_device('cpu') now: {PartialPolicy.for_device('cpu')}")

    long = [s for s in SENTENCES if speak(s).size >= 3 * SAMPLE_RATE]
    _log("4. word timestamps")
    ends = word_ends(stt, long[: max(args.levels) * args.turns])
    stt.close()  # the server loads its own model; this one would only hold memory
    realtime, held = realtime_rows(long, ends, args)
    print(f"\n4. realtime sessions: `lyre serve --no-tts`, {args.turns} sentences each, "
          f"{args.silence:g} s of silence after each, server VAD (500 ms of silence ends a turn)")
    print(f"   real time: every completed transcript within {args.max_lag:g} s of the end of its speech")
    print("| sessions | partial latency p50 s | p90 s | words sent as partials | speech end to completed p50 s "
          "| max s | committed to completed p50 s | real time | WER |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in realtime:
        print(f"| {r['sessions']} | {_s(r['partial_p50_s'])} | {_s(r['partial_p90_s'])} "
              f"| {100 * r['words_by_partials']:.0f}% | {_s(r['completed_p50_s'])} | {_s(r['completed_max_s'])} "
              f"| {_s(r['commit_to_completed_p50_s'])} | {100 * r['real_time']:.0f}% | {100 * r['wer']:.1f}% |")
    print(f"most concurrent sessions all in real time: {held}")
    for r in realtime:
        if r["split_or_missing"] or r["send_late_max_s"] > 0.1:
            print(f"   {r['sessions']} sessions: {r['split_or_missing']} with a turn split or missing, "
                  f"audio sent up to {1000 * r['send_late_max_s']:.0f} ms late")

    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.json is not None:
        figures = {"finals": finals, "partials": partials, "batching": batching,
                   "implied_policy": asdict(implied_policy(batching)), "realtime": realtime, "realtime_held": held}
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
