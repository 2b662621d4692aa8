"""SIP calls at rising concurrency against one ``lyre serve --stt --sip`` on this machine.

The server is the tests' (demo TTS, Whisper base, thinking at tests/scripted_thinker.py over --llm-url: the
call path is measured, not a chat model). Each call is a SIPp process (tests/server/calls/sip/call_lyre_bye.xml)
for the signalling and a tests/sip_peer.py RTP peer for the media: it waits for lyre's first packet, speaks one
of the tests' espeak-ng sentences as PCMU at real time, sends silence until the reply's first non-silent
packet, listens to HOLD_S more of lyre's stream, then goes quiet, and lyre hangs up (BYE) after its media
timeout. For each number of calls at once:

- INVITE to 200: SIPp's own response time (``rtd``), per call;
- end of speech to the reply's first RTP packet, per call;
- late media: the longest gap between two of lyre's packets to a caller while it was answering (20 ms is
  on time); a gap over LATE_MS counts as late;
- CPU per call: the server process's CPU seconds over the round, per call and per second of call;
- failed calls: a SIPp exit other than 0, or no reply.

    .venv/bin/python benchmarks/sip.py                     # 1, 2, 4, 8 calls at once
    .venv/bin/python benchmarks/sip.py --calls 1 4 12
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from scripted_thinker import thinking_at  # noqa: E402
from serving import running_server  # noqa: E402
from sip_peer import SILENCE, RtpPeer, ulaw_speech  # noqa: E402
from speech import SENTENCES  # noqa: E402

from lyre.server.calls.sip_media import read_rtp  # noqa: E402

SCENARIO = ROOT / "tests" / "server" / "calls" / "sip" / "call_lyre_bye.xml"
SESSION = {"max_speech_tokens": 70, "audio": {"input": {"transcription": {"language": "en"}}}}  # ~0.8 s replies
HOLD_S = 2.0  # lyre's stream listened to after the reply starts
LATE_MS = 60.0  # a gap between two of lyre's packets longer than this is late media


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _call(sip_port: int, sentence: str, workdir: str, out: dict[str, object]) -> None:
    peer = RtpPeer()
    sipp = subprocess.Popen(
        ["sipp", "127.0.0.1", "-p", str(_free_udp_port()), "-i", "127.0.0.1", "-s", "agent", "-sf", str(SCENARIO),
         "-m", "1", "-nostdin", "-timeout", "90s", "-timeout_error", "-trace_rtt", "-rtt_freq", "1",
         "-key", "codec", "0", "-key", "rtp_port", str(peer.port), f"127.0.0.1:{sip_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)
    try:
        peer.answered()
        spoke = peer.talk(ulaw_speech(sentence), until=lambda: bool(peer.replies()), limit_s=60)
        first = peer.replies()[0][0]
        peer.talk(b"", until=lambda: time.monotonic() > first + HOLD_S)
        out["reply_s"] = first - spoke
        times = [t for t, d in peer.received if t >= first and read_rtp(d) is not None]
        out["max_gap_ms"] = 1000 * max(b - a for a, b in zip(times, times[1:]))
        out["loud"] = sum(1 for t, d in peer.received if t >= first and read_rtp(d).payload != SILENCE)
    except AssertionError as exc:
        out["error"] = str(exc)
    finally:
        peer.close()
        out["sipp_rc"] = sipp.wait(timeout=120)
        rtt = glob.glob(os.path.join(workdir, f"call_lyre_bye_{sipp.pid}_rtt.csv"))
        if rtt:
            with open(rtt[0]) as f:
                rows = [r for r in csv.reader(f, delimiter=";") if r and r[0][:1].isdigit()]
            out["invite_200_ms"] = float(rows[0][1]) if rows else None


def round_of(n: int, sip_port: int, server_pid: int) -> dict[str, object]:
    calls: list[dict[str, object]] = [{} for _ in range(n)]
    with tempfile.TemporaryDirectory() as workdir:
        cpu0, t0 = _cpu_s(server_pid), time.monotonic()
        threads = [threading.Thread(target=_call, args=(sip_port, SENTENCES[i % len(SENTENCES)], workdir, calls[i]))
                   for i in range(n)]
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        for thread in threads:
            thread.join()
        cpu, wall = _cpu_s(server_pid) - cpu0, time.monotonic() - t0
    failed = [c for c in calls if c.get("sipp_rc") != 0 or "error" in c]
    ok = [c for c in calls if c not in failed]
    gaps = [float(c["max_gap_ms"]) for c in ok]  # type: ignore[arg-type]
    setups = [float(c["invite_200_ms"]) for c in calls if c.get("invite_200_ms") is not None]  # type: ignore[arg-type]
    replies = [float(c["reply_s"]) for c in ok]  # type: ignore[arg-type]
    return {"calls": n, "failed": len(failed), "late": sum(g > LATE_MS for g in gaps),
            "invite_200_ms_p50": statistics.median(setups) if setups else None,
            "invite_200_ms_max": max(setups) if setups else None,
            "reply_s_p50": statistics.median(replies) if replies else None,
            "reply_s_max": max(replies) if replies else None,
            "max_gap_ms": max(gaps) if gaps else None,
            "cpu_s_per_call": cpu / n, "cpu_share_per_call": cpu / n / wall, "wall_s": wall,
            "errors": [c.get("error") for c in failed]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    if shutil.which("sipp") is None:
        sys.exit("sipp is missing: apt-get install sip-tester")
    sip_port = _free_udp_port()
    most = max(args.calls)
    with thinking_at() as thinker, running_server(
            "--stt", "--llm-url", thinker, "--llm-model", "scripted", "--max-streams", str(max(4, most)),
            "--sip", f"127.0.0.1:{sip_port}", "--stt-max-sessions", str(most), "--sip-session",
            json.dumps(SESSION)) as server:
        pid = server.process.pid
        print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; lyre serve --stt "
              f"--sip (demo TTS, Whisper base, scripted think step); PCMU", flush=True)
        print("| calls at once | failed | late media | INVITE to 200 p50 / max (ms) | end of speech to reply's first"
              " RTP p50 / max (s) | longest gap in lyre's RTP (ms) | server CPU per call (s; share of a core) |")
        print("|---|---|---|---|---|---|---|")
        for n in args.calls:
            r = round_of(n, sip_port, pid)
            print(f"| {n} | {r['failed']} | {r['late']} | {_f(r['invite_200_ms_p50'], 1)} / "
                  f"{_f(r['invite_200_ms_max'], 1)} | {_f(r['reply_s_p50'], 2)} / {_f(r['reply_s_max'], 2)} | "
                  f"{_f(r['max_gap_ms'], 0)} | {r['cpu_s_per_call']:.1f}; {r['cpu_share_per_call']:.0%} |", flush=True)
            if r["errors"]:
                print(f"#   failures: {r['errors']}", flush=True)


def _f(value: object, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
