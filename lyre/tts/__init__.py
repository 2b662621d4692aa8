"""Text to speech on top of the engine and the codec.

    tts = TTS.load()
    async for chunk in tts.stream("Hello there.", voice="tara"):
        ...  # int16 PCM chunks, 24 kHz mono, as they are made
"""

from lyre.tts.speech import AUDIO_CONSTRAINT, load_voices, speech_sampling
from lyre.tts.stream import TTS, SpeechStream, TTSConfig
from lyre.tts.text import TextError
from lyre.tts.trim import TrimConfig
from lyre.tts.windows import WindowPolicy

__all__ = [
    "AUDIO_CONSTRAINT",
    "TTS",
    "SpeechStream",
    "TTSConfig",
    "TextError",
    "TrimConfig",
    "WindowPolicy",
    "load_voices",
    "speech_sampling",
]
