"""The agent in the caller's language: a real ``lyre serve --stt --llm-url`` (Whisper base, the demo TTS, the
scripted think endpoint of tests/scripted_thinker.py) driven over loopback with espeak-ng speech in German and
Mandarin.

The demo's weights are served from a folder whose ``voices.json`` gives it voices in three languages (an
English, a German and a Mandarin voice of the multilingual checkpoints' names), so one server can show the
voice following the session's language both ways. The language is heard (German: Whisper detects it on the
first turn) or set (Mandarin: the transcription's ``language``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import numpy as np
import pytest
from scripted_thinker import ASKED, thinking_at
from serving import Server, running_server
from speech import speak
from test_agent import SHORT, Talk
from websockets.asyncio.client import connect

from lyre.agent import AgentSession
from lyre.agent.events import AgentSettings
from lyre.agent.session_update import fit_voice
from lyre.agent.think import in_language
from lyre.models.demo import DemoPaths
from lyre.tts import Voices

# ("Guten Morgen" would not do: Whisper base hears espeak-ng's "good morning" and takes it for English.)
GERMAN = "Entschuldigung, können Sie mir bitte sagen, wann der nächste Zug nach München fährt?"
# Written in pinyin for espeak-ng's Mandarin voice that reads it (its Han-character reading spells tones out).
MANDARIN = "wo3 shi4 zhong1 guo2 ren2, wo3 zhu4 zai4 bei3 jing1."
SESSION = {"type": "realtime", "instructions": "Be brief.", "lyre": {"events": True, "max_speech_tokens": SHORT,
                                                                      "smart_turn": False}}


def _pcm16(text: str, voice: str) -> bytes:
    """``text`` spoken by espeak-ng's ``voice``, then a second of silence: pcm16 at 24 kHz."""
    audio = np.concatenate([speak(text, 24_000, voice=voice, wpm=140), np.zeros(24_000, np.float32)])
    return (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()


@pytest.fixture(scope="module")
def server(demo: DemoPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("models") / "trilingual"
    folder.mkdir()
    for file in demo.model.iterdir():
        (folder / file.name).symlink_to(file)
    (folder / "voices.json").write_text(json.dumps({"voices": ["tara", "jana", "长乐"],
                                                    "languages": {"tara": "en", "jana": "de", "长乐": "zh"}}))
    with thinking_at() as url:
        with running_server("--model", str(folder), "--codec", str(demo.codec), "--stt", "--llm-url", url,
                            "--llm-model", "scripted", "--no-smart-turn") as running:
            yield running


def _converse(server: Server, session: dict, pcm: bytes) -> tuple[Talk, list[list[dict]]]:
    """One spoken turn after ``session``'s update, to the reply's end; and what the think step was asked."""
    asked_before = len(ASKED)

    async def run() -> Talk:
        async with connect(f"{server.ws_url}/v1/realtime?model=lyre", max_size=None) as ws:
            talk = Talk(ws, lyre=True)
            await talk.send({"type": "session.update", "session": session})
            await talk.until("session.updated")
            await talk.speak(pcm)
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    return talk, ASKED[asked_before:]


def test_a_german_caller_is_heard_in_german_answered_in_german_by_the_german_voice(server: Server) -> None:
    talk, asked = _converse(server, {**SESSION, "audio": {"output": {"voice": "tara"}}}, _pcm16(GERMAN, "de"))
    assert not talk.of("error"), talk.of("error")
    first, heard = talk.of("session.updated")[:2]  # the client's update, then the language heard
    assert first["session"]["audio"]["input"]["transcription"]["language"] is None
    # Whisper detected German on the first turn: the transcription is pinned to it from now on.
    assert heard["session"]["audio"]["input"]["transcription"]["language"] == "de"
    assert heard["session"]["audio"]["output"]["voice"] == "jana"
    (note,) = heard["session"]["lyre"]["refused"]
    assert note["param"] == "session.audio.output.voice" and "'tara'" in note["message"] and "'jana'" in note["message"]
    # The reply spoken in the German voice, thought with the language asked for.
    assert talk.of("response.done")[-1]["response"]["audio"]["output"]["voice"] == "jana"
    assert asked and asked[-1][0]["role"] == "system"
    assert asked[-1][0]["content"] == "Be brief.\n\nReply in German."


def test_a_session_set_to_mandarin_is_transcribed_and_answered_in_it(server: Server) -> None:
    session = {**SESSION, "audio": {"input": {"transcription": {"language": "zh"}}, "output": {"voice": "jana"}}}
    talk, asked = _converse(server, session, _pcm16(MANDARIN, "cmn-latn-pinyin"))
    assert not talk.of("error"), talk.of("error")
    updated = talk.of("session.updated")[0]["session"]
    assert updated["audio"]["input"]["transcription"]["language"] == "zh"
    assert updated["audio"]["output"]["voice"] == "长乐"  # the voice named was German: the Mandarin one speaks
    assert [n["param"] for n in updated["lyre"]["refused"]] == ["session.audio.output.voice"]
    # Transcribed as Mandarin: told the language, Whisper writes Han characters (left to detect it, it takes
    # this espeak-ng speech for English or Thai).
    (transcribed,) = talk.of("conversation.item.input_audio_transcription.completed")
    assert re.search(r"[\u4e00-\u9fff]", transcribed["transcript"]), transcribed["transcript"]
    assert talk.of("response.done")[-1]["response"]["audio"]["output"]["voice"] == "长乐"
    assert asked and all(request[0]["content"].endswith("Reply in Chinese (Mandarin).") for request in asked)


class _GermanTTS:
    """A stand-in pipeline with the German finetune's voices (the session asks no more of it here)."""

    voices = Voices.with_aliases(("jana", "thomas"), languages={"jana": "de", "thomas": "de"})
    max_tokens_limit = 1200

    def check_voice(self, voice: str | None) -> None:
        self.voices.resolve(voice)


def test_a_session_on_a_model_without_the_default_voice_starts_with_the_models_first() -> None:
    async def run() -> list[dict]:
        events: list[dict] = []
        session = AgentSession(object(), _GermanTTS(), object(), events.append)  # type: ignore[arg-type]
        await session.close()
        return events

    (created,) = asyncio.run(run())
    assert created["type"] == "session.created" and created["session"]["audio"]["output"]["voice"] == "jana"


def test_the_think_step_is_asked_for_the_language_unless_it_is_english() -> None:
    assert in_language("Be brief.", "de-AT") == "Be brief.\n\nReply in German."
    assert in_language("", "ko") == "Reply in Korean."
    assert in_language("Be brief.", "nl") == "Be brief.\n\nReply in the language whose ISO 639-1 code is 'nl'."
    assert in_language("Be brief.", "en") == in_language("Be brief.", None) == "Be brief."


def test_a_voice_of_another_language_gives_way_and_the_note_says_why() -> None:
    voices = Voices.with_aliases(("tara", "jana"), languages={"tara": "en", "jana": "de"})
    settings, note = fit_voice(AgentSettings(voice="alloy"), voices, "de")  # an alias of tara
    assert settings.voice == "jana" and note is not None and "'alloy' speaks English" in str(note)
    settings, note = fit_voice(AgentSettings(voice="tara"), voices, "fr")  # no French voice: tara goes on
    assert settings.voice == "tara" and note is not None and "no voice in French" in str(note)
    for voice, language in (("jana", "de"), ("a-clone", "de"), ("tara", None)):
        assert fit_voice(AgentSettings(voice=voice), voices, language) == (AgentSettings(voice=voice), None)
