"""Voices from a reference clip, in process: Orpheus's zero-shot prompt, the cached reference, the store, which
models may speak them, the longest clip, the fleet's voices checked as uploads are."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from lyre import orpheus
from lyre.models.demo import DemoPaths
from lyre.engine import EngineConfig, SamplingParams
from lyre.engine.by_hand import ByHand
from lyre.models.loader import load_llama
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.models.folder import load_tokenizer
from lyre.tts import TTS, ServingConfig, SpeechOptions, TTSConfig
from lyre.tts.budget import chars_within
from lyre.tts.reference_store import ReferenceVoices, new_claim
from lyre.tts.reference_voices import MAX_SECONDS, ReferenceRejected, ReferenceVoice, read_reference_clip
from lyre.tts.voices import VoiceNameTaken
from speech import speak_wav, wav_bytes
from forcing import FEED, sampled_logits

ATOL = 1e-4
# Frames whose coarse codes all differ, so none is dropped as a repeat; 7 codes each.
FRAMES = tuple(tuple((97 * f + 13 * k) % orpheus.CODEBOOK_SIZE for k in range(orpheus.FRAME_TOKENS))
               for f in range(12))
SAID = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def tokenizer(demo: DemoPaths):  # type: ignore[no-untyped-def]
    return load_tokenizer(demo.model)


def test_the_prompt_is_orpheus_zero_shot_layout_with_the_reference_ids(tokenizer) -> None:  # type: ignore[no-untyped-def]
    said = tokenizer.encode(SAID, add_special_tokens=False).ids
    asked = tokenizer.encode("Hello there.", add_special_tokens=False).ids
    audio = [orpheus.AUDIO_TOKEN_BASE + orpheus.CODEBOOK_SIZE * k + c for frame in FRAMES for k, c in enumerate(frame)]
    prompt = orpheus.reference_ids(tokenizer, SAID, FRAMES) + orpheus.prompt_ids(tokenizer, "Hello there.")
    # The reference's zero-shot data processing: start_of_human (128259), the text with its BOS (128000),
    # end_of_text (128009), end_of_human (128260), start_of_ai (128261), start_of_speech (128257), the codes,
    # end_of_speech (128258), end_of_ai (128262); then the text to speak, ending where generation starts.
    assert prompt == [128259, 128000, *said, 128009, 128260, 128261, 128257, *audio, 128258, 128262,
                      128259, 128000, *asked, 128009, 128260, 128261, 128257]
    assert audio[:7] == [128266 + 0 + 0, 128266 + 4096 + 13, 128266 + 8192 + 26, 128266 + 12288 + 39,
                         128266 + 16384 + 52, 128266 + 20480 + 65, 128266 + 24576 + 78]
    with pytest.raises(ValueError, match="control tokens"):
        orpheus.reference_ids(tokenizer, "Say <|eot_id|> now.", FRAMES)
    with pytest.raises(ValueError, match="7 codes"):
        orpheus.reference_ids(tokenizer, SAID, [(1, 2, 3)])
    with pytest.raises(ValueError, match="code must be in"):
        orpheus.reference_ids(tokenizer, SAID, [(4096, 0, 0, 0, 0, 0, 0)])


def test_a_frame_repeating_the_last_kept_coarse_code_is_dropped_as_in_orpheus_training_data() -> None:
    frames = [(5, 1, 1, 1, 1, 1, 1), (5, 2, 2, 2, 2, 2, 2), (6, 3, 3, 3, 3, 3, 3), (6, 4, 4, 4, 4, 4, 4),
              (5, 9, 9, 9, 9, 9, 9)]
    assert orpheus.without_repeated_frames(frames) == [frames[0], frames[2], frames[4]]
    assert orpheus.without_repeated_frames(FRAMES) == list(FRAMES)


def _runner(model, caching: bool = False) -> ByHand:  # type: ignore[no-untyped-def]
    return ByHand(ModelRunner(model, EngineConfig(max_batch=4, max_seq_len=512, block_size=16)), caching=caching)


def _forced(hand: ByHand, req: Request, slot: int) -> torch.Tensor:
    hand.place(req, slot)
    with sampled_logits() as calls:
        while not hand.prefill([req]):
            pass
        for token in FEED:
            req.output_ids.append(token)
            hand.decode([req])
    return torch.cat(calls)


@torch.inference_mode()
def test_a_second_request_in_a_reference_voice_reuses_its_turn_with_the_logits_of_prefilling_it(
        demo: DemoPaths, tokenizer) -> None:  # type: ignore[no-untyped-def]
    model = load_llama(demo.model, max_seq_len=512, device="cpu", dtype="float32")
    reference = orpheus.reference_ids(tokenizer, SAID, FRAMES)
    first = reference + orpheus.prompt_ids(tokenizer, "Good morning to you.")
    second = reference + orpheus.prompt_ids(tokenizer, "See you tomorrow then.")

    def req(rid: str, prompt: list[int]) -> Request:
        return Request(rid, list(prompt), SamplingParams(temperature=0.6, max_tokens=64), seed=3)

    fresh = _forced(_runner(model), req("b", second), slot=0)
    hand = _runner(model, caching=True)
    _forced(hand, req("a", first), slot=1)
    b = req("b", second)
    reused = _forced(hand, b, slot=2)
    assert b.kv is not None and b.kv.reused == len(reference) // 16 * 16 >= 96  # every whole block of the turn
    gap = float((reused - fresh).abs().max())
    assert gap <= ATOL, f"logits after the cached reference differ from a fresh prefill's by {gap:.2e}"
    without = _forced(_runner(model), req("c", orpheus.prompt_ids(tokenizer, "See you tomorrow then.")), slot=0)
    assert float((without[0] - fresh[0]).abs().max()) > 100 * ATOL  # the reference does move the logits


def test_the_store_writes_each_voice_whole_and_reads_them_back(tmp_path: Path) -> None:
    folder = tmp_path / "voices"
    store = ReferenceVoices(folder, holder=lambda name: "one of the model's voices" if name == "tara" else None)
    voice = ReferenceVoice("fox", SAID, FRAMES, 4.5)
    claim = new_claim()
    with store.reserving("fox"):
        with pytest.raises(VoiceNameTaken, match="being uploaded"):
            store.check_new("fox")  # a second upload of the name, while the first is under way
        store.add(voice, claim)
    with pytest.raises(VoiceNameTaken, match="exists") as exists:
        store.check_new("fox")
    assert exists.value.param == "name"
    with pytest.raises(VoiceNameTaken, match="one of the model's voices") as taken:
        store.check_new("tara")
    assert taken.value.param == "name"
    for bad in ("", "a/b", "..", "x" * 65, "has space"):
        with pytest.raises(ReferenceRejected, match="cannot name a voice"):
            store.check_new(bad)
    (folder / "broken.json").write_text("{not json")
    (folder / "other.json").write_text(voice.to_json())  # a file whose name is not its voice's
    assert sorted(p.name for p in folder.iterdir()) == ["broken.json", "fox.json", "other.json"]  # no temp file
    again = ReferenceVoices(folder)
    assert [v.name for v in again] == ["fox"] and again.get("fox") == voice and again.on_disk() == ["fox"]
    assert again.get("fox").digest == voice.digest and again.claim_of("fox") == claim
    again.remove("fox")
    assert not (folder / "fox.json").exists() and len(ReferenceVoices(folder)) == 0
    with pytest.raises(ValueError, match="frames"):
        ReferenceVoice("bad", SAID, ((1, 2, 3),), 1.0)


def _copy_model(demo: DemoPaths, folder: Path, voices_json: dict | None = None) -> Path:  # type: ignore[type-arg]
    shutil.copytree(demo.model, folder)
    if voices_json is not None:
        (folder / "voices.json").write_text(json.dumps(voices_json))
    return folder


def test_a_finetune_not_marked_for_reference_voices_refuses_them_unless_allowed(
        demo: DemoPaths, tmp_path: Path) -> None:
    ft = _copy_model(demo, tmp_path / "orpheus-ft")
    tts = TTS.load(ft, "demo", config=TTSConfig(voices_dir=tmp_path / "v1"))
    try:
        refused = tts.references_refused()
        assert refused is not None and str(ft) in refused and "--allow-reference-voices" in refused
        tts.references.put(ReferenceVoice("fox", SAID, FRAMES, 4.5))
        with pytest.raises(ReferenceRejected, match="not known to continue a voice") as no:
            tts.stream("Hello there.", "fox")
        assert no.value.param == "voice"
    finally:
        tts.close()
    marked = _copy_model(demo, tmp_path / "marked", {"voices": ["tara", "leo"], "reference_voices": True})
    allowed = TTS.load(ft, "demo", config=TTSConfig(voices_dir=tmp_path / "v2", allow_reference_voices=True))
    for_it = TTS.load(marked, "demo", config=TTSConfig(voices_dir=tmp_path / "v3"))
    pretrained = TTS.load(_copy_model(demo, tmp_path / "orpheus-3b-0.1-pretrained"), "demo",
                          config=TTSConfig(voices_dir=tmp_path / "v4"))
    try:
        assert allowed.references_refused() is None and for_it.references_refused() is None
        assert pretrained.references_refused() is None
    finally:
        for t in (allowed, for_it, pretrained):
            t.close()


def test_a_clip_becomes_a_voice_whose_prompt_changes_what_is_said(demo: DemoPaths, tmp_path: Path) -> None:
    tts = TTS.load(config=TTSConfig(voices_dir=tmp_path / "voices"))
    try:
        assert tts.references_refused() is None  # the demo model: the API can be tried on it
        clip = read_reference_clip(speak_wav(SAID))
        assert 2.0 < clip.seconds < 6.0
        voice = tts.make_reference("fox", clip, f"  {SAID} ")
        assert voice.text == SAID and voice.frames and not voice.transcribed
        with pytest.raises(ReferenceRejected, match="more than") as long_text:
            tts.make_reference("fox", clip, SAID * 10)
        assert long_text.value.param == "text"
        tts.references.add(voice, new_claim())
        tts.check_voice("fox")  # what the agent's session.update asks
        with pytest.raises(ValueError, match="unknown voice"):
            tts.check_voice("nobody")

        async def speak(voice_name: str | None) -> tuple[int, np.ndarray]:
            stream = tts.stream("Hello there.", voice_name, SpeechOptions(seed=7, max_tokens=28), trim=False,
                                streamed=False)
            pcm = np.concatenate([chunk async for chunk in stream])
            return stream.prompt_tokens, pcm

        (cloned, a), (_, b) = asyncio.run(speak("fox")), asyncio.run(speak("fox"))
        plain, c = asyncio.run(speak(None))  # the same prompt but for the reference's turn, the same seed
        assert cloned == len(orpheus.reference_ids(tts.tokenizer, SAID, voice.frames)) + plain
        assert np.array_equal(a, b)  # the same request alone twice: the same audio
        assert len(a) == len(c) and not np.array_equal(a, c)  # the reference changed what was said
        # The request's room shrinks by the reference's turn: max_tokens past it is refused, naming the limit.
        with pytest.raises(ValueError, match="over this server's limit"):
            tts.stream("Hi.", "fox", SpeechOptions(max_tokens=tts.max_tokens_limit))
        # A long turn (150 frames, about 13 s of speech) leaves room for about 9 s a request: segments shrink to
        # the words whose budget fits (lyre.tts.budget), so none is cut short; a model voice keeps a bigger size.
        tts.references.put(ReferenceVoice("long", SAID, FRAMES * 12 + FRAMES[:6], 13.0))
        room = tts.max_tokens_limit - len(orpheus.reference_ids(tts.tokenizer, SAID, FRAMES * 12 + FRAMES[:6]))
        long_stream = tts.open("long")
        assert long_stream.intake.segment_chars == max(60, chars_within(room)) < 150
        assert tts.open("tara").intake.segment_chars == min(300, chars_within(tts.max_tokens_limit))
        text = " ".join(["This sentence is about forty characters."] * 8)
        segments = list(tts.stream(text, "long", SpeechOptions(max_tokens=7)).intake._ready)  # queued, none run yet
        assert len(segments) >= 2 and all(len(s.written) <= long_stream.intake.segment_chars for s in segments), segments
    finally:
        tts.close()


@pytest.mark.parametrize("seconds, match", [(0.0, "silent"), (1.0, "at least 3"), (20.0, "at most 15"),
                                            (26.0, "more than 25 s of audio")])
def test_a_clip_too_short_too_long_or_silent_is_refused_naming_the_file(seconds: float, match: str) -> None:
    rng = np.random.default_rng(0)
    n = int(24_000 * max(seconds, 4.0))
    pcm = np.zeros(n, np.float32)
    if seconds:
        pcm[:int(24_000 * seconds)] = 0.3 * np.sin(np.arange(int(24_000 * seconds)) * 0.05) \
            + 0.05 * rng.standard_normal(int(24_000 * seconds)).astype(np.float32)
    with pytest.raises(ReferenceRejected, match=match) as refused:
        read_reference_clip(wav_bytes(pcm, 24_000))
    assert refused.value.param == "file"
    for junk in (b"", b"not audio at all" * 10):
        with pytest.raises(ReferenceRejected) as bad:
            read_reference_clip(junk)
        assert bad.value.param == "file" and str(bad.value).startswith("file:")


def test_a_clip_as_long_as_the_api_takes_fits_a_server_at_its_default_max_seq_len(tmp_path: Path) -> None:
    # As many frames as MAX_SECONDS of real speech encodes to, every coarse code new: the demo codec repeats its
    # coarse codes, and keeps only a few frames of any clip.
    frames = tuple(tuple((97 * f + 13 * k) % orpheus.CODEBOOK_SIZE for k in range(orpheus.FRAME_TOKENS))
                   for f in range(math.ceil(MAX_SECONDS * orpheus.SAMPLE_RATE / orpheus.SAMPLES_PER_FRAME)))
    said = " ".join(["Speech at a steady rate says this much."] * round(MAX_SECONDS * 14 / 40))  # 14 chars a second
    tts = TTS.load(config=TTSConfig(voices_dir=tmp_path / "voices"))  # ServingConfig's defaults
    try:
        assert tts.engine.config.max_seq_len == ServingConfig().max_seq_len
        tts.references.check(ReferenceVoice("longest", said, frames, MAX_SECONDS))  # the turn and a reply fit
    finally:
        tts.close()


def test_the_fleet_shares_voices_through_redis_and_a_delete_removes_only_the_upload_it_deleted(
        tmp_path: Path) -> None:
    import redis as redis_client

    from fleet_processes import Redis
    from lyre.fleet.voices import FleetVoices

    server = Redis().start()
    try:
        a, b = ReferenceVoices(tmp_path / "a"), ReferenceVoices(tmp_path / "b")
        voice = ReferenceVoice("fox", SAID, FRAMES, 4.5)

        async def scenario() -> None:
            fa, fb = FleetVoices(server.url, a), FleetVoices(server.url, b)
            try:
                first = new_claim()
                a.add(voice, first)
                assert await fa.claim(voice, first)
                assert await fa.claim(voice, first)  # the same upload claiming again (a lost reply) holds it still
                with pytest.raises(VoiceNameTaken, match="another upload"):
                    await fb.claim(ReferenceVoice("fox", "Other words.", FRAMES, 4.5), new_claim())
                await fb.sync()
                assert b.get("fox") == voice and b.on_disk() == []  # held for the fleet, not kept on disk
                await fb.withdraw("fox")
                b.drop("fox")
                await fa.sync()
                assert "fox" not in a and not (tmp_path / "a" / "fox.json").exists()
                # Uploaded again, but Redis never heard of it (it was away): the delete removed another upload's
                # claim, so this one stays, and the next sync claims it for the fleet.
                a.add(voice, new_claim())
                await fa.sync()
                assert "fox" in a
                await fb.sync()
                assert b.get("fox") == voice
                # A Redis that restarted empty: the server that keeps the voice claims it again.
                redis_client.Redis.from_url(server.url).flushall()
                await fa.sync()
                await fb.sync()
                assert "fox" in b and "fox" in a
            finally:
                await fa.close()
                await fb.close()

        asyncio.run(scenario())
    finally:
        server.stop()


def test_voices_from_the_fleet_are_checked_as_uploads_are_off_the_event_loop_and_bad_ones_skipped(
        demo: DemoPaths, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import threading

    import redis as redis_client

    from fleet_processes import Redis
    from lyre.fleet.voices import DIGESTS_KEY, FleetVoices, voice_key

    # 1,024 positions leave 348 for a reference: a 50-frame turn (350 audio tokens) does not fit this server.
    tts = TTS.load(serving=ServingConfig(max_seq_len=1024), config=TTSConfig(voices_dir=tmp_path / "voices"))
    server = Redis().start()
    client = redis_client.Redis.from_url(server.url)
    good = ReferenceVoice("good", SAID, FRAMES, 4.5)
    record = json.loads(good.to_json())
    bad = {
        "too-long-here": {**record, "name": "too-long-here", "frames": [list(FRAMES[i % 12]) for i in range(50)]},
        "control": {**record, "name": "control", "text": "Say <|eot_id|> now."},
        "bloated": {**record, "name": "bloated", "seconds": 4000.0},
        "more-frames": {**record, "name": "more-frames", "seconds": 3.0, "frames": [list(f) for f in FRAMES] * 4},
        "not-text": {**record, "name": "not-text", "text": 42},
        "other-name": {**record, "name": "someone-else"},
    }
    try:
        for name, data in [("good", record), *bad.items()]:
            client.set(voice_key(name), json.dumps(data))
            client.hset(DIGESTS_KEY, name, f"digest-of-{name}")
        client.set(voice_key("nested"), "[" * 100_000)
        client.hset(DIGESTS_KEY, "nested", "digest-of-nested")
        checked_on: list[threading.Thread] = []

        def check(voice: ReferenceVoice) -> None:  # the pipeline's, noting where it runs
            checked_on.append(threading.current_thread())
            tts.references.check(voice)

        store = ReferenceVoices(None, check=check)

        async def sync() -> tuple[int, threading.Thread]:
            fleet = FleetVoices(server.url, store)
            try:
                await fleet.sync()
                await fleet.sync()  # a voice refused once is not fetched, nor logged, again
                return fleet.syncs, threading.current_thread()
            finally:
                await fleet.close()

        with caplog.at_level("WARNING", logger="lyre.fleet.records"):
            syncs, loop_thread = asyncio.run(sync())
        assert syncs == 2
        assert [v.name for v in store] == ["good"]
        assert checked_on and loop_thread not in checked_on
        skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert sorted(m.split("'")[1] for m in skipped) == sorted([*bad, "nested"]), skipped
    finally:
        client.close()
        server.stop()
        tts.close()
