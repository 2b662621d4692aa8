"""Text to speech on top of the engine and the codec.

    tts = TTS.load()
    async for chunk in tts.stream("Hello there.", voice="tara"):
        ...  # int16 PCM chunks, 24 kHz mono, as they are made
"""

from lyre.tts.speech import AUDIO_CONSTRAINT, speech_sampling
from lyre.tts.stream import TTS, SpeechStream, TTSConfig
from lyre.tts.text import TextError
from lyre.tts.trim import TrimConfig
from lyre.tts.voices import OPENAI_VOICES, Voices, load_voices, parse_alias
from lyre.tts.windows import WindowPolicy

__all__ = [
    "AUDIO_CONSTRAINT",
    "OPENAI_VOICES",
    "TTS",
    "SpeechStream",
    "TTSConfig",
    "TextError",
    "TrimConfig",
    "Voices",
    "WindowPolicy",
    "load_voices",
    "parse_alias",
    "speech_sampling",
]
