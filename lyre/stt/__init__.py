"""Speech to text: Whisper (faster-whisper) behind a fair worker, for files and live audio.

    stt = Transcriber.load()            # the demo, Whisper base, when no model is named
    transcript = await stt.transcribe(decode_file(data), TranscribeOptions(), session="rest")

Live audio goes through a `RealtimeSession` (voice activity detection, partial
transcripts by LocalAgreement-2, a final pass per utterance), which speaks the
OpenAI Realtime transcription events and knows nothing of the transport.

Word times of known text (forced alignment): `PhoneAligner` for English
(pocketsphinx), the `Transcriber`'s Whisper for other languages; `WordTimer`
times a speech stream's segments as they end.
"""

from lyre.stt.agreement import LocalAgreement
from lyre.stt.align import AlignedWord, Alignment, TextTooLongToAlign
from lyre.stt.audio import SAMPLE_RATE, AudioError, AudioTooLong, PcmResampler, decode_file
from lyre.stt.job_queue import TranscriberBusy, TranscriberClosed
from lyre.stt.model import demo_whisper, resolve_whisper
from lyre.stt.phone_align import PhoneAligner, PhoneAlignerBusy, PhoneAlignerStats, PhoneAlignmentFailed
from lyre.stt.realtime import RealtimeConfig, RealtimeSession
from lyre.stt.realtime_events import DEFAULT_MODEL, RealtimeError, error_event
from lyre.stt.transcriber import (
    MAX_ALIGN_SECONDS,
    MAX_PARTIAL_SECONDS,
    PartialPolicy,
    STTConfig,
    STTStats,
    Transcriber,
    TranscriptionFailed,
)
from lyre.stt.turns import TurnListener
from lyre.stt.vad import SpeechEvent, StreamingVAD, VADConfig
from lyre.stt.word_timer import WordAligner, WordTimer
from lyre.stt.words import written_words
from lyre.stt.whisper import MAX_PROMPT_CHARS, Segment, TranscribeOptions, Transcript, Word
from lyre.stt.window import FULL_WINDOW, FinalWindow

__all__ = [
    "DEFAULT_MODEL",
    "MAX_ALIGN_SECONDS",
    "AlignedWord",
    "Alignment",
    "TextTooLongToAlign",
    "FULL_WINDOW",
    "MAX_PROMPT_CHARS",
    "MAX_PARTIAL_SECONDS",
    "SAMPLE_RATE",
    "AudioError",
    "AudioTooLong",
    "FinalWindow",
    "LocalAgreement",
    "PartialPolicy",
    "PhoneAligner",
    "PhoneAlignerBusy",
    "PhoneAlignerStats",
    "PhoneAlignmentFailed",
    "PcmResampler",
    "RealtimeConfig",
    "RealtimeError",
    "RealtimeSession",
    "STTConfig",
    "STTStats",
    "Segment",
    "SpeechEvent",
    "StreamingVAD",
    "TurnListener",
    "TranscribeOptions",
    "Transcriber",
    "TranscriberBusy",
    "TranscriberClosed",
    "TranscriptionFailed",
    "Transcript",
    "VADConfig",
    "Word",
    "WordAligner",
    "WordTimer",
    "decode_file",
    "demo_whisper",
    "error_event",
    "resolve_whisper",
    "written_words",
]
