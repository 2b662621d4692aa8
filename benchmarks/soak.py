"""A leak soak: one server under mixed load for a long while, its resources read every minute.

One ``lyre serve --stt`` on the demo model, its agent thinking at a scripted endpoint, under:
HTTP speech requests, TTS WebSocket contexts, realtime transcription sessions (benchmarks/mixed_load.py),
WebRTC calls (each says a sentence, hears the start of the reply, then ends one of three ways: hung up,
its connection closed, or its microphone gone quiet), and requests that are refused (a codec the server
lacks, a body that is not JSON, an unknown voice, a decode bomb, an offer that is no SDP).

Every minute, and once the load has stopped and the server settled: its resident memory, open file
descriptors, threads (the process's, and Python's), asyncio tasks, realtime sessions and engine slots.
Then each figure's slope over the run after its first minute (a least-squares line, per minute): what
grows without bound shows as a slope that does not fade.

    .venv/bin/python benchmarks/soak.py --minutes 20 --json docs/bench/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from mixed_load import Load  # this folder's

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from scripted_thinker import thinking_at  # noqa: E402
from serving import Server, running_server  # noqa: E402
from speech import SENTENCES, speak_pcm16  # noqa: E402

FIGURES = ("rss_mb", "fds", "threads", "python_threads", "loop_tasks", "sessions", "engine_slots")


def sample(server: Server, minute: float) -> dict[str, float]:
    pid = server.process.pid
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f)
    return {"minute": round(minute, 2), "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
            "fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": int(status["Threads"]),
            "python_threads": server.metric("lyre_python_threads"), "loop_tasks": server.metric("lyre_event_loop_tasks"),
            "sessions": server.metric("lyre_realtime_sessions"), "engine_slots": server.metric("lyre_engine_running")}


def slopes(samples: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's least-squares slope per minute, over the samples after the first minute (warm-up)."""
    during = [s for s in samples if s["minute"] >= 1.0]
    if len(during) < 2:
        return {}
    x = np.array([s["minute"] for s in during])
    return {name: round(float(np.polyfit(x, [s[name] for s in during], 1)[0]), 3) for name in FIGURES}


async def calls(base: str, stop: asyncio.Event, counts: dict[str, int]) -> None:
    """WebRTC calls one after another, ending three ways in turn."""
    from webrtc_peer import Peer

    sentence = speak_pcm16(SENTENCES[3])
    n = 0
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        while not stop.is_set():
            n += 1
            peer = Peer()
            try:
                answer = await http.post("/v1/realtime/calls", content=await peer.offer(),
                                         headers={"content-type": "application/sdp"})
                if answer.status_code != 201:
                    counts[f"call refused {answer.status_code}"] = counts.get(f"call refused {answer.status_code}", 0) + 1
                    await asyncio.sleep(1)
                    continue
                await peer.connect(answer.text)
                await peer.until("session.created", timeout=20)
                peer.mic.say(sentence)
                await peer.until("output_audio_buffer.started", timeout=60)
                how = ("hang up", "close", "go quiet")[n % 3]
                if how == "hang up":
                    await http.delete(answer.headers["location"])
                elif how == "go quiet":
                    peer.mic.stop()
                    await asyncio.sleep(8)  # the server's to notice: no media, then gone
                counts[how] = counts.get(how, 0) + 1
            except (TimeoutError, httpx.HTTPError) as exc:
                counts[f"call failed: {type(exc).__name__}"] = counts.get(f"call failed: {type(exc).__name__}", 0) + 1
            finally:
                await peer.close()


def _bomb() -> bytes:
    """Ten minutes of silence as FLAC: a few hundred kB that decode to 19 MB of samples and more."""
    import av

    out = io.BytesIO()
    with av.open(out, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=16_000, layout="mono")
        for _ in range(600):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 16_000), np.int16), format="s16", layout="mono")
            frame.sample_rate = 16_000
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


async def refused(base: str, stop: asyncio.Event, counts: dict[str, int]) -> None:
    """Bad requests one after another; each must be a 4xx."""
    speex = ("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 97\r\n"
             "c=IN IP4 0.0.0.0\r\na=rtpmap:97 speex/16000\r\na=sendrecv\r\na=mid:0\r\n"
             "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\n")
    bomb = await asyncio.to_thread(_bomb)
    bad = [("POST", "/v1/realtime/calls", {"content": speex, "headers": {"content-type": "application/sdp"}}),
           ("POST", "/v1/realtime/calls", {"content": "hello", "headers": {"content-type": "application/sdp"}}),
           ("POST", "/v1/audio/speech", {"content": "{not json", "headers": {"content-type": "application/json"}}),
           ("POST", "/v1/audio/speech", {"json": {"input": "Hi.", "voice": "nobody"}}),
           ("POST", "/v1/audio/transcriptions", {"files": {"file": ("bomb.flac", bomb)}, "data": {"model": "w"}})]
    n = 0
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        while not stop.is_set():
            method, path, kwargs = bad[n % len(bad)]
            n += 1
            answer = await http.request(method, path, **kwargs)
            key = f"{path} {answer.status_code}"
            counts[key] = counts.get(key, 0) + 1
            await asyncio.sleep(0.5)


async def soak(server: Server, minutes: float) -> dict[str, Any]:
    load = Load(lambda: server.url)
    stop = asyncio.Event()
    call_counts: dict[str, int] = {}
    refusals: dict[str, int] = {}
    started = time.monotonic()
    samples = [await asyncio.to_thread(sample, server, 0.0)]
    print(json.dumps(samples[-1]), flush=True)
    work = [asyncio.create_task(load.run(http=1, sockets=1, transcriptions=1)),
            asyncio.create_task(calls(server.url, stop, call_counts)),
            asyncio.create_task(refused(server.url, stop, refusals))]
    for minute in range(1, int(minutes) + 1):
        await asyncio.sleep(max(0.0, started + 60 * minute - time.monotonic()))
        samples.append(await asyncio.to_thread(sample, server, (time.monotonic() - started) / 60))
        print(json.dumps(samples[-1]), flush=True)
    load.stop()
    stop.set()
    await asyncio.gather(*work, return_exceptions=True)
    await asyncio.sleep(15)  # calls hung up, sessions closed, slots freed
    after = await asyncio.to_thread(sample, server, (time.monotonic() - started) / 60)
    print(json.dumps(after), flush=True)
    return {"samples": samples, "after": after, "slopes_per_minute": slopes(samples), "load": load.summary(),
            "calls": call_counts, "refused": refusals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted",
                                                  "--no-smart-turn", "--max-streams", "4",
                                                  "--stt-max-sessions", "8") as server:
        report = asyncio.run(soak(server, args.minutes))
    print(f"slopes per minute: {report['slopes_per_minute']}")
    print(f"load: {report['load']}; calls: {report['calls']}; refused: {report['refused']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
