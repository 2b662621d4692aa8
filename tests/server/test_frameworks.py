"""Pipecat's ready-made services, pointed at a real `lyre serve --stt` by their URL alone.

Each test runs a real Pipecat pipeline (a worker and its runner, the service,
a sink where a transport's output would be) on frames shaped as an agent's
are, and checks that lyre's answers arrive as Pipecat's own frames with no
ErrorFrame anywhere on the way. The demo model speaks noise, so only the
audio's shape is checked; Whisper hears real espeak-ng speech.

PipelineWorker and WorkerRunner are what Pipecat 1.3 renamed PipelineTask and
PipelineRunner to; the old names still work, with a DeprecationWarning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

import httpx
import openai
import pytest
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.cartesia.tts import CartesiaTTSService
from pipecat.services.openai.stt import OpenAISTTService
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.workers.runner import WorkerRunner
from speech import SENTENCES, speak_pcm16, speak_wav, wer

from lyre.orpheus import SAMPLE_RATE
from serving import Server, running_server

pytestmark = pytest.mark.slow

F = TypeVar("F", bound=Frame)

# Pipecat's speech requests carry no max_tokens: a 384-position KV cache caps
# every request's default at 128 tokens (18 frames, 1.5 s of audio), quick on a CPU.
MAX_SEQ_LEN = 384
PIPELINE_TIMEOUT_S = 60.0
INPUT_RATE = 16_000  # Pipecat's default audio_in_sample_rate
INPUT_FRAME_BYTES = 2 * INPUT_RATE // 50  # 20 ms of pcm16, as a transport delivers it
MAX_WER = 0.2  # one word in seven
# Pipecat ends a speech context that sends nothing for 3 s. On a loaded 2-core machine (two test workers, a
# one-thread server) first audio can take longer; how fast it comes is benchmarks' business, not this file's.
QUIET_S = 20.0


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--stt", "--max-seq-len", str(MAX_SEQ_LEN)) as s:
        yield s


class _Sink(FrameProcessor, Generic[F]):
    """The pipeline's last processor, where a transport's output would be: keeps the frames of one kind."""

    def __init__(self, kind: type[F] | tuple[type[Frame], ...]) -> None:
        super().__init__()
        self.kind = kind
        self.frames: list[F] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, self.kind):
            self.frames.append(frame)
        await self.push_frame(frame, direction)


class _Errors(BaseObserver):
    """Every ErrorFrame pushed between any two processors; errors travel upstream, past the sink's view."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, ErrorFrame):
            self.messages.append(data.frame.error)


async def _run(processors: Sequence[FrameProcessor], frames: Sequence[Frame],
               keep: type[F] | tuple[type[Frame], ...]) -> tuple[list[F], list[str]]:
    """Run ``processors`` then a sink on ``frames`` and an EndFrame: the ``keep`` frames that reached the
    sink, and every error.

    Not the StartFrame: returned from ``asyncio.run``'s coroutine, its repr (taken by asyncio
    on the way out) reads fields Pipecat has deprecated, and each read warns.
    """
    sink, errors = _Sink(keep), _Errors()
    worker = PipelineWorker(Pipeline([*processors, sink]), observers=[errors])
    await worker.queue_frames([*frames, EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(runner.run(), PIPELINE_TIMEOUT_S)
    return sink.frames, errors.messages


def _openai_http() -> openai.DefaultAsyncHttpxClient:
    """An HTTP client for a Pipecat OpenAI service (its ``http_client`` argument), for the caller to close.

    Pipecat never closes the OpenAI client it builds itself: its socket would be
    closed by the garbage collector, after the event loop, with a ResourceWarning.
    """
    return openai.DefaultAsyncHttpxClient()


def _check_audio(audio: list[TTSAudioRawFrame]) -> None:
    assert audio
    assert {(f.sample_rate, f.num_channels) for f in audio} == {(SAMPLE_RATE, 1)}
    assert all(f.audio and len(f.audio) % 2 == 0 for f in audio)  # whole 16-bit samples


def test_cartesia_tts_speaks_an_llm_reply_and_says_which_words_were_spoken(server: Server) -> None:
    """Pipecat asks for word timestamps (add_timestamps) and turns them into the TTSTextFrames an agent's
    context is built from; the demo model's noise makes the times meaningless, the words must all come."""
    tts = CartesiaTTSService(
        api_key="unused",
        url=f"{server.ws_url}/v1/tts/websocket",
        sample_rate=SAMPLE_RATE,
        settings=CartesiaTTSService.Settings(voice="tara", model="orpheus"),
        stop_frame_timeout_s=QUIET_S,
    )
    pieces = ["Hello", " there.", " How", " are", " you", " today?"]
    reply = [LLMFullResponseStartFrame(), *map(LLMTextFrame, pieces), LLMFullResponseEndFrame()]
    frames, errors = asyncio.run(_run([tts], reply, (TTSAudioRawFrame, TTSTextFrame)))
    assert errors == []
    _check_audio([f for f in frames if isinstance(f, TTSAudioRawFrame)])
    spoken = [f.text.strip() for f in frames if isinstance(f, TTSTextFrame)]
    assert spoken == "".join(pieces).split()


def test_one_server_speaks_and_transcribes_side_by_side(server: Server) -> None:
    """The server these services share serves both models: the SDK reaches each on the same URL."""
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as client:
        speech = client.audio.speech.create(model="orpheus", voice="tara", input="Hello.", response_format="wav",
                                            extra_body={"max_tokens": 70, "seed": 1})
        assert speech.read()[:4] == b"RIFF"
        said = SENTENCES[2]  # "Please cancel my appointment with the dentist."
        transcript = client.audio.transcriptions.create(model="whisper-1", file=("speech.wav", speak_wav(said)),
                                                        language="en")
        assert wer([said], [transcript.text]) <= 0.3, transcript.text
    models = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == ["orpheus", "whisper-1"]


def test_openai_tts_speaks_with_an_openai_voice_name(server: Server) -> None:
    async def speak() -> tuple[list[TTSAudioRawFrame], list[str]]:
        async with _openai_http() as http:
            tts = OpenAITTSService(
                api_key="unused",
                base_url=f"{server.url}/v1",
                http_client=http,
                sample_rate=SAMPLE_RATE,
                settings=OpenAITTSService.Settings(voice="alloy", model="orpheus"),
                stop_frame_timeout_s=QUIET_S,
            )
            return await _run([tts], [TTSSpeakFrame("Hello there.")], TTSAudioRawFrame)

    audio, errors = asyncio.run(speak())
    assert errors == []
    _check_audio(audio)


def test_openai_stt_transcribes_what_the_vad_heard(server: Server) -> None:
    said = SENTENCES[2]  # "Please cancel my appointment with the dentist."
    pcm = speak_pcm16(said, INPUT_RATE) + bytes(2 * INPUT_RATE)  # then a second of silence: the VAD hears the end
    heard = [InputAudioRawFrame(pcm[i:i + INPUT_FRAME_BYTES], INPUT_RATE, 1)
             for i in range(0, len(pcm), INPUT_FRAME_BYTES)]

    async def transcribe() -> tuple[list[TranscriptionFrame], list[str]]:
        async with _openai_http() as http:
            stt = OpenAISTTService(
                api_key="unused",
                base_url=f"{server.url}/v1",
                http_client=http,
                settings=OpenAISTTService.Settings(model="whisper-1"),
            )
            # The segmented STT uploads, as a wav, what lies between the VAD's start and stop frames.
            return await _run([VADProcessor(vad_analyzer=SileroVADAnalyzer()), stt], heard, TranscriptionFrame)

    transcripts, errors = asyncio.run(transcribe())
    assert errors == []
    text = " ".join(t.text for t in transcripts)
    assert wer([said], [text]) <= MAX_WER, text
