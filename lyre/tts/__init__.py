"""Text to speech on top of the engine and the codec.

    tts = TTS.load()
    async for chunk in tts.stream("Hello there.", voice="tara"):
        ...  # int16 PCM chunks, 24 kHz mono, as they are made

Text that arrives in pieces (a language model writing) goes through
`TTS.open`: ``stream.push(piece)`` as it comes, ``stream.end()`` at the end.
Servers type against `Synthesizer`, which the naive baseline implements too.
"""

from lyre.tts.adapter_voices import AdapterBusy, AdapterError, AdapterInUse, AdapterVoices, UnknownAdapter
from lyre.tts.clock import PlaybackClock
from lyre.tts.facts import TTSFacts
from lyre.tts.intake import IdleStream
from lyre.tts.options import PipelineBusy, ServingConfig, SpeechOptions
from lyre.tts.pacing import PacingPolicy
from lyre.tts.reading import TextFront, TextOptions
from lyre.tts.sampling import AUDIO_CONSTRAINT, speech_sampling
from lyre.tts.spoken import SpokenSegment
from lyre.tts.stream import SpeechStream
from lyre.tts.context import PROMPT_ROOM, TTSConfig
from lyre.tts.synthesizer import TTS, Synthesizer
from lyre.tts.text import TextError
from lyre.tts.trim import TrimConfig
from lyre.tts.voices import OPENAI_VOICES, VoiceNameTaken, Voices, load_voices, parse_alias

__all__ = [
    "AdapterBusy",
    "AdapterError",
    "AdapterInUse",
    "AdapterVoices",
    "UnknownAdapter",
    "AUDIO_CONSTRAINT",
    "OPENAI_VOICES",
    "PROMPT_ROOM",
    "PacingPolicy",
    "PipelineBusy",
    "TTS",
    "IdleStream",
    "PlaybackClock",
    "ServingConfig",
    "SpeechOptions",
    "SpeechStream",
    "SpokenSegment",
    "Synthesizer",
    "TTSConfig",
    "TTSFacts",
    "TextError",
    "TextFront",
    "TextOptions",
    "TrimConfig",
    "VoiceNameTaken",
    "Voices",
    "load_voices",
    "parse_alias",
    "speech_sampling",
]
