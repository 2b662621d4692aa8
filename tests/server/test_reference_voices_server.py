"""Voices from a reference clip on real servers: upload, list, speak (HTTP, SSE, the WebSocket, `lyre say`),
delete, bad input, one namespace with adapters, a request's own reference (cached, its encodes bounded), a fleet
of two sharing its voices through Redis and racing for a name, a restart.

Two `lyre serve --register` processes and a real redis-server, shared by the tests; each test uploads the voices
it needs under names of its own, so each passes alone and in any order.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis as redis_client
import websockets

from adapters import make_adapter
from fleet_processes import Process, Redis, close_all, serve, wait_ready
from lyre.models.demo import DemoPaths
from lyre.fleet.records import ServerRecord, server_key
from lyre.orpheus import SAMPLES_PER_FRAME
from polling import eventually
from serving import running_server
from speech import speak_wav, wav_bytes, wer

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": "Bearer voice-admin"}
SAID = "I would like to book a table for dinner tomorrow evening."
SPEECH = {"input": "Hello there.", "response_format": "pcm", "max_tokens": 28, "seed": 3, "trim_silence": False}


class Pair:
    def __init__(self, redis: Redis, a: Process, b: Process, folders: list[Path]) -> None:
        self.redis, self.a, self.b, self.folders = redis, a, b, folders


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    folders = [tmp_path_factory.mktemp("voices-a"), tmp_path_factory.mktemp("voices-b")]
    redis = Redis().start()
    common = ("--admin-key", "voice-admin", "--max-streams", "4", "--max-inline-references", "1")
    a = serve(redis.url, *common, "--voices-dir", str(folders[0]), "--stt")  # hears clips sent without text
    b = serve(redis.url, *common, "--voices-dir", str(folders[1]))
    try:
        wait_ready([a, b])
        yield Pair(redis, a, b, folders)
    finally:
        close_all([a, b])
        redis.stop()


def _upload(url: str, name: str, clip: bytes | None, text: str | None = SAID, **headers: str) -> httpx.Response:
    data = {"name": name} if text is None else {"name": name, "text": text}
    files = {"file": ("clip.wav", clip, "audio/wav")} if clip is not None else None
    return httpx.post(url + "/v1/audio/voices", data=data, files=files, headers={**ADMIN, **headers}, timeout=120)


def _references(url: str) -> dict[str, dict]:  # type: ignore[type-arg]
    voices = httpx.get(url + "/v1/audio/voices", timeout=10).json()["voices"]
    return {v["name"]: v for v in voices if v.get("kind") == "reference"}


def _speak(url: str, **body: object) -> httpx.Response:
    return httpx.post(url + "/v1/audio/speech", json={**SPEECH, **body}, timeout=60)


def _alike(a: bytes, b: bytes) -> bool:
    """The same speech: seeded, a request's tokens are the same every time, but a streamed request's audio is
    decoded in windows its measured rates choose, and a window's edge differs from one decoded whole by a
    little (up to about 2% of full scale seen). Another voice's or another seed's audio is unrelated."""
    x, y = np.frombuffer(a, np.int16).astype(float), np.frombuffer(b, np.int16).astype(float)
    return len(x) == len(y) > 0 and float(np.corrcoef(x, y)[0, 1]) > 0.999


def _wav(seconds: float, loud: bool = True, seed: int = 1) -> bytes:
    n = int(24_000 * seconds)
    rng = np.random.default_rng(seed)
    return wav_bytes(0.2 * np.sin(np.arange(n) * 0.07) + 0.05 * rng.standard_normal(n) if loud else np.zeros(n),
                     24_000)


def test_an_uploaded_voice_is_listed_and_spoken_everywhere_a_voice_is(pair: Pair) -> None:
    made = _upload(pair.a.url, "diner", speak_wav(SAID))
    assert made.status_code == 201, made.text
    voice = made.json()
    assert voice["kind"] == "reference" and voice["text"] == SAID and not voice["transcribed"]
    assert 2.5 < voice["duration_s"] < 6 and voice["frames"] > 0
    assert _references(pair.a.url)["diner"] == voice
    assert (pair.folders[0] / "diner.json").is_file()

    spoken = _speak(pair.a.url, voice="diner")
    assert spoken.status_code == 200, spoken.text
    assert len(spoken.content) == 4 * SAMPLES_PER_FRAME * 2
    assert _alike(_speak(pair.a.url, voice="diner").content, spoken.content)  # seeded: the same every time
    assert not _alike(_speak(pair.a.url).content, spoken.content)  # the model's own voice says it otherwise

    with httpx.stream("POST", pair.a.url + "/v1/audio/speech", json={**SPEECH, "voice": "diner",
                                                                    "stream_format": "sse"}, timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    assert _alike(b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"),
                  spoken.content)

    async def over_the_socket() -> bytes:
        async with websockets.connect(pair.a.url.replace("http", "ws") + "/v1/tts/websocket") as ws:
            await ws.send(json.dumps({"context_id": "c", "voice": {"mode": "id", "id": "diner"},
                                      "transcript": "Hello there.", "continue": False, "max_tokens": 28, "seed": 3,
                                      "output_format": {"encoding": "pcm_s16le", "sample_rate": 24000}}))
            messages = []
            while not messages or not messages[-1]["done"]:
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
        assert messages[-1]["type"] == "done", messages[-1]
        return b"".join(base64.b64decode(m["data"]) for m in messages if m["type"] == "chunk")

    assert _alike(asyncio.run(over_the_socket()), spoken.content)

    out = pair.folders[0].parent / "said.wav"
    said = subprocess.run([sys.executable, "-m", "lyre.cli", "say", "Hello there.", "--voice", "diner",
                           "--voices-dir", str(pair.folders[0]), "--max-tokens", "28", "--seed", "3", "--no-trim",
                           "-o", str(out)], capture_output=True, text=True, timeout=180)
    assert said.returncode == 0, said.stderr
    with wave.open(str(out)) as w:
        assert w.getnframes() == 4 * SAMPLES_PER_FRAME


def test_a_clip_sent_without_text_is_transcribed_and_the_transcript_returned(pair: Pair) -> None:
    made = _upload(pair.a.url, "heard", speak_wav(SAID), text=None)
    assert made.status_code == 201, made.text
    assert made.json()["transcribed"] is True
    assert wer([SAID], [made.json()["text"]]) <= 0.3, made.json()["text"]
    # Speech to text is another server's: this one says what it needs.
    refused = _upload(pair.b.url, "unheard", speak_wav(SAID), text=None)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "text", refused.text
    assert "--stt" in refused.json()["error"]["message"]


@pytest.mark.parametrize("name, clip, text, status, param, says", [
    ("tara", "speech", SAID, 409, "name", "one of the model's voices"),
    ("alloy", "speech", SAID, 409, "name", "an alias of the model's voice"),
    ("existing", "speech", SAID, 409, "name", "exists"),
    ("no/slash", "speech", SAID, 400, "name", "cannot name a voice"),
    ("empty", None, SAID, 400, "file", ""),
    ("junk", "junk", SAID, 400, "file", "unreadable"),
    ("silent", "silence", SAID, 400, "file", "silent"),
    ("short", "short", SAID, 400, "file", "at least 3"),
    ("long", "long", SAID, 400, "file", "at most 15"),
    ("wordy", "speech", SAID * 8, 400, "text", "more than"),
    ("control", "speech", "I would like <|eot_id|> a table.", 400, "text", "control tokens"),
])
def test_a_bad_upload_is_refused_naming_the_field_and_nothing_is_written(
        pair: Pair, name: str, clip: str | None, text: str, status: int, param: str, says: str) -> None:
    clips = {"speech": speak_wav(SAID), "junk": b"not an audio file" * 50, "silence": _wav(5, loud=False),
             "short": _wav(1.5), "long": _wav(20)}
    if name == "existing" and "existing" not in _references(pair.a.url):
        assert _upload(pair.a.url, "existing", speak_wav(SAID)).status_code == 201
    before = sorted(p.name for p in pair.folders[0].iterdir())
    refused = _upload(pair.a.url, name, clips[clip] if clip else None, text)
    assert refused.status_code == status, refused.text
    error = refused.json()["error"]
    assert error["param"] == param and says in error["message"], error
    assert sorted(p.name for p in pair.folders[0].iterdir()) == before  # no file, no temporary file


def test_the_admin_key_guards_uploads_and_deletes_but_not_the_list(pair: Pair) -> None:
    no_key = httpx.post(pair.a.url + "/v1/audio/voices", data={"name": "x", "text": SAID},
                        files={"file": ("c.wav", speak_wav(SAID), "audio/wav")}, timeout=30)
    assert no_key.status_code == 401
    assert httpx.delete(pair.a.url + "/v1/audio/voices/diner", timeout=10).status_code == 401
    assert httpx.get(pair.a.url + "/v1/audio/voices", timeout=10).status_code == 200
    assert httpx.delete(pair.a.url + "/v1/audio/voices/nobody", headers=ADMIN, timeout=10).status_code == 404


def test_a_request_may_carry_its_own_reference(pair: Pair) -> None:
    clip = base64.b64encode(speak_wav(SAID)).decode()
    own = _speak(pair.b.url, reference_audio=clip, reference_text=SAID)
    assert own.status_code == 200, own.text
    assert len(own.content) == 4 * SAMPLES_PER_FRAME * 2 and not _alike(own.content, _speak(pair.b.url).content)
    for body, param in (({"reference_audio": "%%% not base64"}, "reference_audio"),
                        ({"reference_audio": base64.b64encode(_wav(1.0)).decode(), "reference_text": "Hi."},
                         "reference_audio"),
                        ({"reference_audio": clip, "reference_text": SAID * 8}, "reference_text"),
                        ({"reference_audio": clip}, "reference_text")):  # no text, and no Whisper on B
        refused = _speak(pair.b.url, **body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.text
    assert "inline" not in _references(pair.b.url)  # a request's own voice is not kept


def test_a_voice_uploaded_to_one_server_is_spoken_by_the_other_and_a_delete_reaches_both(pair: Pair) -> None:
    assert _upload(pair.a.url, "shared", speak_wav(SAID)).status_code == 201
    assert eventually(lambda: "shared" in _references(pair.b.url), timeout=10)
    assert _references(pair.b.url)["shared"]["digest"] == _references(pair.a.url)["shared"]["digest"]
    on_b = _speak(pair.b.url, voice="shared")
    assert on_b.status_code == 200 and _alike(on_b.content, _speak(pair.a.url, voice="shared").content)
    assert not (pair.folders[1] / "shared.json").exists()  # B holds the fleet's voice in memory, not in its folder

    deleted = httpx.delete(pair.b.url + "/v1/audio/voices/shared", headers=ADMIN, timeout=10)
    assert deleted.status_code == 200, deleted.text
    assert eventually(lambda: "shared" not in _references(pair.a.url), timeout=10)
    assert not (pair.folders[0] / "shared.json").exists()
    gone = _speak(pair.a.url, voice="shared")
    assert gone.status_code == 400 and "unknown voice" in gone.json()["error"]["message"]


def test_two_uploads_of_one_name_at_once_give_one_voice_and_a_409(pair: Pair) -> None:
    clip = speak_wav(SAID)
    with ThreadPoolExecutor(2) as pool:
        for name, urls in (("raced", (pair.a.url, pair.b.url)), ("twice", (pair.a.url, pair.a.url))):
            answers = list(pool.map(lambda url: _upload(url, name, clip), urls))
            codes = sorted(a.status_code for a in answers)
            assert codes == [201, 409], [a.text for a in answers]
            refused = next(a for a in answers if a.status_code == 409).json()["error"]
            assert refused["param"] == "name" and name in refused["message"], refused
            # Both servers speak the one that won; only its server keeps its file.
            won = next(a for a in answers if a.status_code == 201).json()["digest"]
            assert eventually(lambda: all(_references(url).get(name, {}).get("digest") == won
                                          for url in (pair.a.url, pair.b.url)), timeout=10)
            kept = [f for f in pair.folders if (f / f"{name}.json").exists()]
            assert len(kept) == 1, kept


def test_an_adapter_and_a_reference_voice_never_share_a_name(pair: Pair, demo: DemoPaths, tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "calm", demo.model, seed=11)
    assert _upload(pair.a.url, "spoken-by-clip", speak_wav(SAID)).status_code == 201
    clash = httpx.post(pair.a.url + "/v1/adapters", headers=ADMIN, json={"name": "spoken-by-clip", "path": str(folder)},
                       timeout=60)
    assert clash.status_code == 409 and "a reference voice" in clash.json()["error"]["message"], clash.text
    # The fleet's voice is one on B too, once B has it.
    assert eventually(lambda: "spoken-by-clip" in _references(pair.b.url), timeout=10)
    on_b = httpx.post(pair.b.url + "/v1/adapters", headers=ADMIN, json={"name": "spoken-by-clip", "path": str(folder)},
                      timeout=60)
    assert on_b.status_code == 409, on_b.text

    added = httpx.post(pair.a.url + "/v1/adapters", headers=ADMIN, json={"name": "calm", "path": str(folder)},
                       timeout=60)
    assert added.status_code == 201, added.text
    here = _upload(pair.a.url, "calm", speak_wav(SAID))
    assert here.status_code == 409 and "adapter" in here.json()["error"]["message"], here.text
    # B knows A's adapter from A's record in the fleet, once A's heartbeat has written it.
    records = redis_client.Redis.from_url(pair.redis.url)
    try:
        assert eventually(lambda: "calm" in ServerRecord.from_json(records.get(server_key(pair.a.url))).adapters,
                          timeout=10)
    finally:
        records.close()
    there = _upload(pair.b.url, "calm", speak_wav(SAID))
    assert there.status_code == 409 and pair.a.url in there.json()["error"]["message"], there.text
    names = [v["name"] for v in httpx.get(pair.a.url + "/v1/audio/voices", timeout=10).json()["voices"]]
    assert len(names) == len(set(names)), names
    assert httpx.delete(pair.a.url + "/v1/adapters/calm", headers=ADMIN, timeout=30).status_code == 200


def test_a_request_s_own_reference_is_made_once_and_only_so_many_are_made_at_once(pair: Pair) -> None:
    def made(outcome: str) -> float:
        series = f'lyre_inline_references_total{{outcome="{outcome}"}} '
        lines = httpx.get(pair.b.url + "/metrics", timeout=10).text.splitlines()
        return next((float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(series)), 0.0)

    clip = base64.b64encode(_wav(4.0, seed=7)).decode()
    first, cached = made("made"), made("cached")
    one = _speak(pair.b.url, reference_audio=clip, reference_text=SAID)
    again = _speak(pair.b.url, reference_audio=clip, reference_text=SAID)
    assert one.status_code == again.status_code == 200 and _alike(one.content, again.content), again.text
    assert made("made") == first + 1 and made("cached") == cached + 1

    async def at_once() -> tuple[list[httpx.Response], httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            clips = [base64.b64encode(_wav(4.0, seed=100 + i)).decode() for i in range(6)]  # none cached
            requests = [client.post(pair.b.url + "/v1/audio/speech",
                                    json={**SPEECH, "reference_audio": own, "reference_text": SAID}) for own in clips]
            upload = client.post(pair.b.url + "/v1/audio/voices", data={"name": "uploaded-meanwhile", "text": SAID},
                                 files={"file": ("clip.wav", speak_wav(SAID), "audio/wav")}, headers=ADMIN)
            *spoken, uploaded = await asyncio.gather(*requests, upload)
        return spoken, uploaded

    spoken, uploaded = asyncio.run(at_once())
    codes = [r.status_code for r in spoken]
    assert 200 in codes and 429 in codes and set(codes) <= {200, 429}, [r.text[:200] for r in spoken]
    busy = next(r for r in spoken if r.status_code == 429)
    assert busy.headers["Retry-After"] == "1" and "reference clips" in busy.json()["error"]["message"]
    assert uploaded.status_code == 201, uploaded.text  # uploads are not counted against requests' own clips


def test_a_restarted_server_speaks_the_voices_it_kept(tmp_path: Path) -> None:
    folder = tmp_path / "voices"
    with running_server("--voices-dir", str(folder), "--admin-key", "voice-admin", "--max-streams", "4") as first:
        assert _upload(first.url, "kept", speak_wav(SAID)).status_code == 201
        before = _speak(first.url, voice="kept").content
    with running_server("--voices-dir", str(folder), "--max-streams", "4") as again:
        assert set(_references(again.url)) == {"kept"}
        assert _alike(_speak(again.url, voice="kept").content, before)
