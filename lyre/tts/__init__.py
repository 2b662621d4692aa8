"""Text to speech on top of the engine and the codec."""

from lyre.tts.speech import AUDIO_CONSTRAINT, Speech, Synthesizer, speech_sampling

__all__ = ["AUDIO_CONSTRAINT", "Speech", "Synthesizer", "speech_sampling"]
