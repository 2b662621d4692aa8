"""What every route needs, held on ``app.state.lyre`` for the app's lifetime."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException

from lyre.agent import EndOfTurn, Thinker
from lyre.llm import Chat
from lyre.server.admission import Admission
from lyre.server.aligner import Aligner
from lyre.server.config import ServerConfig
from lyre.server.inline_references import InlineReferences
from lyre.server.metrics import Metrics
from lyre.stt import Transcriber, WordTimer
from lyre.tts import Synthesizer

if TYPE_CHECKING:
    from lyre.fleet.voices import FleetVoices  # Redis is imported only by a server that joins a fleet

__all__ = ["AGENT_OFF", "CHAT_OFF", "STT_OFF", "TTS_OFF", "ServerState"]

TTS_OFF = "text-to-speech is not served by this server (it was started with --no-tts)"
STT_OFF = "speech-to-text is not enabled on this server (start it with --stt)"
CHAT_OFF = "chat completions are not served by this server (start it with --llm PATH, or --llm demo)"
AGENT_OFF = ("this server cannot hold a conversation: that needs speech to text (--stt), text to speech and a think "
             "step (--llm or --llm-url); for live transcription connect with ?intent=transcription")


@dataclass
class ServerState:
    config: ServerConfig
    tts: Synthesizer | None  # None: started without text to speech
    admission: Admission
    metrics: Metrics
    stt: Transcriber | None = None  # None: started without speech to text
    chat: Chat | None = None  # None: started without a chat model
    thinker: Thinker | None = None  # the voice agent's think step: the chat model's, or --llm-url's
    end_of_turn: EndOfTurn | None = None  # the agent's semantic end-of-turn model (Smart Turn), if loaded
    aligner: Aligner | None = None  # word times and /v1/audio/alignments; None only in an app not started
    fleet_voices: FleetVoices | None = None  # reference voices shared with the fleet (--register)
    chat_active: int = 0  # chat completions in flight (a draining server waits for them)
    ready: bool = False  # models loaded and warmed up
    draining: bool = False  # shutting down: admit nothing new
    # Speech requests' own reference voices: cached, and made no more than config.max_inline_references at once
    inline_references: InlineReferences = field(init=False)

    def __post_init__(self) -> None:
        self.inline_references = InlineReferences(self.config.max_inline_references, self.metrics.inline_references)

    @property
    def converses(self) -> bool:
        """It can hold a /v1/realtime conversation: it hears, thinks and speaks."""
        return self.stt is not None and self.tts is not None and self.thinker is not None

    def word_timer(self, session: Hashable, language: str | None = None) -> WordTimer | None:
        """Word times for one speech stream; None where they are off (``--aligner off``). ``language``: the
        text's tag ("de", "zh-CN"; None: each segment's by its script, else English)."""
        if self.aligner is None or self.aligner.off:
            return None
        return WordTimer(self.aligner, session, language=language.split("-")[0].split("_")[0].lower()
                         if language else None)

    def require_tts(self) -> Synthesizer:
        """The TTS pipeline; a 404 when text to speech is off."""
        if self.tts is None:
            raise HTTPException(404, TTS_OFF)
        return self.tts

    def require_stt(self) -> Transcriber:
        """The transcriber; a 404 when speech to text is off."""
        if self.stt is None:
            raise HTTPException(404, STT_OFF)
        return self.stt

    def require_chat(self) -> Chat:
        """The chat model; a 404 when none is served."""
        if self.chat is None:
            raise HTTPException(404, CHAT_OFF)
        return self.chat
