"""The baseline lyre is measured against: Orpheus served the way most users start
(transformers' generate per request, the reference sliding-window SNAC decode).

Needs ``transformers`` (lyre's test extra).
"""

from lyre.baseline.generate import Generation, NaiveEngine
from lyre.baseline.naive_stream import NaiveSpeechStream
from lyre.baseline.reference_decode import NaiveCodec, ReferenceWindows
from lyre.baseline.tts import NaiveTTS

__all__ = ["Generation", "NaiveCodec", "NaiveEngine", "NaiveSpeechStream", "NaiveTTS", "ReferenceWindows"]
