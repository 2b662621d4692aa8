"""Phone calls through Twilio against the 24 kHz WebSocket, on this machine.

1. What the agent hears: the tests' espeak-ng sentences (tests/speech.py), each followed by silence,
   spoken into one call on each path of the same server (``lyre serve --stt --llm demo``'s app, served
   in this process):
   - Twilio: as Twilio sends a call, 8 kHz mu-law in 20 ms ``media`` messages at real time, to
     ``/v1/twilio/media-stream``; the transcripts are what the stream's conversation heard
     (``TwilioCall.heard``, read in process: Twilio's protocol carries no transcripts back);
   - WebSocket: pcm16 at 24 kHz in 40 ms ``input_audio_buffer.append``s to ``/v1/realtime``; the
     transcripts are its ``conversation.item.input_audio_transcription.completed`` events.
   Replies are off (``create_response: false``): only hearing is measured. Word error rate over all
   sentences (a sentence the VAD splits in two counts as the two transcripts joined), and the time from
   the end of each sentence's speech to its (last) transcript.
2. Where the phone's word errors come from: the same sentences through Whisper offline, whole, at
   16 kHz; at 8 kHz (band-limited as a phone line is), resampled to 16 kHz as the stream does; and at
   8 kHz through mu-law too.
3. CPU per call of the phone's media path alone, on one thread as the event loop runs it: a caller's
   20 ms messages in (JSON, base64, mu-law, 8 -> 16 kHz) and the agent's speech out (24 -> 8 kHz,
   mu-law, 20 ms frames, base64, JSON), for 1 and for 8 calls at once; CPU ms per second of call, each
   way. Whisper, the VAD and the models are not in it.

    .venv/bin/python benchmarks/phone.py
    .venv/bin/python benchmarks/phone.py --sentences 6 --calls 1 8 16
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI
from websockets.asyncio.client import connect

from lyre.server import ServerConfig, create_app
from lyre.server.calls.twilio_call import TwilioCalls
from lyre.server.calls.twilio_media import FRAME_BYTES, PHONE_RATE, Outbound, ulaw_decode, ulaw_encode
from lyre.common.resample import Resampler
from lyre.stt import TranscribeOptions, Transcriber
from lyre.tts import ServingConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' speech
from speech import SENTENCES, speak, wer  # noqa: E402

SILENCE_S = 1.5  # after each sentence: the turn ends (500 ms) and its transcript is made
SESSION = {"audio": {"input": {"transcription": {"language": "en"},
                               "turn_detection": {"type": "server_vad", "create_response": False}}}}


@contextmanager
def serving() -> Iterator[tuple[FastAPI, int]]:
    """The app of ``lyre serve --stt --llm demo`` on a thread of this process, once it is ready."""
    config = ServerConfig(stt=True, llm="demo", llm_max_batch=2, llm_max_seq_len=1024,
                          serving=ServingConfig(device="cpu", max_streams=4))
    app = create_app(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not become ready")
        time.sleep(0.25)
    try:
        yield app, port
    finally:
        server.should_exit = True
        thread.join(120)


def _pcm16(text: str, rate: int) -> bytes:
    return (np.clip(speak(text, rate), -1, 1) * 32767).astype("<i2").tobytes()


def _voiced_s(pcm: bytes, rate: int) -> float:
    """Where the speech in ``pcm`` ends (espeak-ng ends with silence of its own), in seconds."""
    samples = np.abs(np.frombuffer(pcm, "<i2").astype(np.int32))
    loud = np.flatnonzero(samples > 0.02 * samples.max())
    return (int(loud[-1]) + 1) / rate if loud.size else len(pcm) / 2 / rate


async def _paced(chunks: list[bytes], seconds: float, send: object) -> None:
    """Each chunk at its time: real time, without drift."""
    start = time.perf_counter()
    for i, chunk in enumerate(chunks):
        await asyncio.sleep(max(0.0, start + i * seconds - time.perf_counter()))
        await send(chunk)  # type: ignore[operator]


async def _settled(count: object, at_least: int) -> None:
    """Until ``count()`` reaches ``at_least`` and then holds for a second (a split sentence's second part)."""
    deadline = time.monotonic() + 60
    while count() < at_least and time.monotonic() < deadline:  # type: ignore[operator]
        await asyncio.sleep(0.02)
    seen = count()  # type: ignore[operator]
    await asyncio.sleep(1.0)
    if count() != seen:  # type: ignore[operator]
        await _settled(count, count())  # type: ignore[operator]


async def phone_path(app: FastAPI, port: int, sentences: list[str]) -> list[tuple[str, float]]:
    """Each sentence as a Twilio call sends it; (what the agent heard, seconds from speech end to it)."""
    sid = "MZ" + "0" * 32
    heard: list[tuple[str, float]] = []
    async with connect(f"ws://127.0.0.1:{port}/v1/twilio/media-stream", max_size=None) as ws:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": sid, "start": {
            "streamSid": sid, "callSid": "CA" + "0" * 32, "accountSid": "AC" + "0" * 32, "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"session": json.dumps(SESSION)}}}))
        while sid not in TwilioCalls.of(app).open:
            await asyncio.sleep(0.01)
        call = TwilioCalls.of(app).open[sid]
        chunk = 0

        async def send(frame: bytes) -> None:
            nonlocal chunk
            chunk += 1
            await ws.send(json.dumps({"event": "media", "sequenceNumber": str(chunk + 1), "streamSid": sid, "media": {
                "track": "inbound", "chunk": str(chunk), "timestamp": str(20 * chunk),
                "payload": base64.b64encode(frame).decode()}}))

        for text in sentences:
            pcm = _pcm16(text, PHONE_RATE)
            ulaw = ulaw_encode(pcm) + bytes([0xFF]) * int(PHONE_RATE * SILENCE_S)
            ulaw += bytes([0xFF]) * (-len(ulaw) % FRAME_BYTES)  # whole 20 ms frames, as Twilio sends
            frames = [ulaw[i:i + FRAME_BYTES] for i in range(0, len(ulaw), FRAME_BYTES)]
            before = len(call.heard)
            started = time.perf_counter()
            speaking = asyncio.create_task(_paced(frames, 0.02, send))
            await _settled(lambda before=before: len(call.heard) - before, 1)
            await speaking
            new = list(call.heard)[before:]
            heard.append((" ".join(t for _, t in new), new[-1][0] - started - _voiced_s(pcm, PHONE_RATE) if new
                          else float("nan")))
        await ws.send(json.dumps({"event": "stop", "streamSid": sid, "stop": {}}))
    return heard


async def websocket_path(port: int, sentences: list[str]) -> list[tuple[str, float]]:
    """Each sentence as pcm16 at 24 kHz on /v1/realtime; (the transcript, seconds from speech end to it)."""
    heard: list[tuple[str, float]] = []
    transcripts: list[tuple[float, str]] = []
    async with connect(f"ws://127.0.0.1:{port}/v1/realtime?model=lyre", max_size=None) as ws:
        async def read() -> None:
            async for message in ws:
                event = json.loads(message)
                if event["type"] == "conversation.item.input_audio_transcription.completed":
                    transcripts.append((time.perf_counter(), event["transcript"]))

        reader = asyncio.create_task(read())
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", **SESSION}}))

        async def send(chunk: bytes) -> None:
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}))

        for text in sentences:
            pcm = _pcm16(text, 24_000) + bytes(2 * int(24_000 * SILENCE_S))
            chunks = [pcm[i:i + 1920] for i in range(0, len(pcm), 1920)]  # 40 ms
            before = len(transcripts)
            started = time.perf_counter()
            speaking = asyncio.create_task(_paced(chunks, 0.04, send))
            await _settled(lambda before=before: len(transcripts) - before, 1)
            await speaking
            new = transcripts[before:]
            heard.append((" ".join(t for _, t in new), new[-1][0] - started - _voiced_s(_pcm16(text, 24_000), 24_000)
                          if new else float("nan")))
        reader.cancel()
    return heard


async def offline(sentences: list[str]) -> list[tuple[str, list[str]]]:
    """Each sentence through Whisper at once (0.3 s of silence before, 0.5 s after), as 16 kHz speech, as
    8 kHz speech and as 8 kHz mu-law, the last two resampled to 16 kHz as a phone stream's are."""
    def to_16k(pcm: bytes) -> np.ndarray:
        resampler = Resampler(PHONE_RATE, 16_000, 1)
        audio = np.frombuffer(resampler.push(pcm) + resampler.flush(), "<i2").astype(np.float32) / 32768
        return np.concatenate([np.zeros(4800, np.float32), audio, np.zeros(8000, np.float32)])

    stt = Transcriber.load()
    options = TranscribeOptions(language="en")
    rows: list[tuple[str, list[str]]] = [("Whisper offline: 16 kHz", []), ("Whisper offline: 8 kHz", []),
                                         ("Whisper offline: 8 kHz mu-law", [])]
    try:
        for text in sentences:
            narrow = _pcm16(text, PHONE_RATE)
            wide = np.concatenate([np.zeros(4800, np.float32), speak(text, 16_000), np.zeros(8000, np.float32)])
            for (_, heard), audio in zip(rows, (wide, to_16k(narrow), to_16k(ulaw_decode(ulaw_encode(narrow))))):
                heard.append((await stt.transcribe(audio, options, session="phone-bench")).text)
    finally:
        stt.close()
    return rows


def media_cpu(calls: int, seconds: float) -> tuple[float, float]:
    """CPU ms per second of call, in and out, of ``calls`` calls' media work interleaved on this thread."""
    caller = _pcm16(" ".join(SENTENCES[:4]), PHONE_RATE)
    agent = _pcm16(" ".join(SENTENCES[4:8]), 24_000)
    frames = int(seconds * 50)
    inbound = [json.dumps({"event": "media", "streamSid": "MZ", "media": {
        "payload": base64.b64encode(ulaw_encode(caller[(i * 320) % (len(caller) - 320):][:320])).decode()}})
        for i in range(frames)]
    resamplers = [Resampler(PHONE_RATE, 16_000, 1) for _ in range(calls)]
    start = time.thread_time()
    for message in inbound:
        for resampler in resamplers:
            resampler.push(ulaw_decode(base64.b64decode(json.loads(message)["media"]["payload"], validate=True)))
    in_ms = 1000 * (time.thread_time() - start) / calls / seconds
    chunk = 2 * 2048  # a reply's audio comes in chunks of about 85 ms
    pieces = [agent[(i * chunk) % (len(agent) - chunk):][:chunk] for i in range(int(seconds * 24_000 * 2 / chunk))]
    outbounds = [Outbound() for _ in range(calls)]
    start = time.thread_time()
    for piece in pieces:
        for outbound in outbounds:
            for frame in outbound.push(piece):
                payload = base64.b64encode(frame).decode()
                json.dumps({"event": "media", "streamSid": "MZ", "media": {"payload": payload}})
    out_ms = 1000 * (time.thread_time() - start) / calls / seconds
    return in_ms, out_ms


def _table(rows: list[tuple[str, list[str], list[tuple[str, float]]]]) -> str:
    lines = ["| path | sentences | WER | speech end to transcript p50 s | p90 s |", "|---|---:|---:|---:|---:|"]
    for name, references, heard in rows:
        delays = [d for _, d in heard if not np.isnan(d)]
        lines.append(f"| {name} | {len(references)} | {wer(references, [t for t, _ in heard]):.3f} | "
                     f"{statistics.median(delays):.2f} | {np.percentile(delays, 90):.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=len(SENTENCES), help="how many of the tests' sentences")
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 8], help="calls at once, for the CPU figure")
    parser.add_argument("--cpu-seconds", type=float, default=10.0, help="seconds of call audio per CPU measure")
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start",
          flush=True)
    print("| calls | CPU ms per call-second in (caller) | out (agent speaking) | share of a core per call |\n"
          "|---:|---:|---:|---:|")
    for calls in args.calls:
        in_ms, out_ms = media_cpu(calls, args.cpu_seconds)
        print(f"| {calls} | {in_ms:.2f} | {out_ms:.2f} | {(in_ms + out_ms) / 10:.2f}% |", flush=True)
    sentences = list(SENTENCES[:args.sentences])
    with serving() as (app, port):
        phone = asyncio.run(phone_path(app, port, sentences))
        socket_heard = asyncio.run(websocket_path(port, sentences))
    print(_table([("Twilio: 8 kHz mu-law, 20 ms media", sentences, phone),
                  ("WebSocket: 24 kHz pcm16, 40 ms appends", sentences, socket_heard)]))
    print("\n| offline | WER |\n|---|---:|")
    for name, heard in asyncio.run(offline(sentences)):
        print(f"| {name} | {wer(sentences, heard):.3f} |")
    for text, (on_phone, _), (on_socket, _) in zip(sentences, phone, socket_heard):
        print(f"  {text!r}\n    phone:     {on_phone.strip()!r}\n    websocket: {on_socket.strip()!r}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
