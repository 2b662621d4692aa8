"""A transcript written out in each of OpenAI's ``response_format``s: json, text, verbose_json, srt, vtt.

    verbose_json(transcript, words=True, segments=True)  # the dict OpenAI's verbose_json returns
    srt(transcript.segments)                             # "1\\n00:00:00,000 --> 00:00:02,620\\nHello.\\n\\n"
"""

from __future__ import annotations

from collections.abc import Iterable

from lyre.stt import Segment, Transcript

__all__ = ["RESPONSE_FORMATS", "language_name", "srt", "timestamp", "verbose_json", "vtt"]

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")

# OpenAI's verbose_json names the language in English words ("english"), not by its code.
# These are Whisper's own names for the languages it knows.
_LANGUAGE_NAMES = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian", "ko": "korean",
    "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish", "pl": "polish", "ca": "catalan",
    "nl": "dutch", "ar": "arabic", "sv": "swedish", "it": "italian", "id": "indonesian", "hi": "hindi",
    "fi": "finnish", "vi": "vietnamese", "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay",
    "cs": "czech", "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian", "la": "latin",
    "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak", "te": "telugu", "fa": "persian",
    "lv": "latvian", "bn": "bengali", "sr": "serbian", "az": "azerbaijani", "sl": "slovenian", "kn": "kannada",
    "et": "estonian", "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian", "sw": "swahili",
    "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala", "km": "khmer", "sn": "shona",
    "yo": "yoruba", "so": "somali", "af": "afrikaans", "oc": "occitan", "ka": "georgian", "be": "belarusian",
    "tg": "tajik", "sd": "sindhi", "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek",
    "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk", "mt": "maltese",
    "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan", "tl": "tagalog", "mg": "malagasy",
    "as": "assamese", "tt": "tatar", "haw": "hawaiian", "ln": "lingala", "ha": "hausa", "ba": "bashkir",
    "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}
_FRAMES_PER_SECOND = 100  # Whisper's mel frames: the unit of a segment's seek


def language_name(code: str) -> str:
    """``"en"`` -> ``"english"``; a code Whisper does not name is returned as it is."""
    return _LANGUAGE_NAMES.get(code, code)


def verbose_json(transcript: Transcript, *, segments: bool = True, words: bool = False) -> dict[str, object]:
    """OpenAI's verbose_json body; ``segments`` and ``words`` as the timestamp granularities ask."""
    body: dict[str, object] = {
        "task": "transcribe",
        "language": language_name(transcript.language),
        "duration": float(transcript.duration),
        "text": transcript.text,
    }
    if segments:
        body["segments"] = [_segment(s) for s in transcript.segments]
    if words:
        body["words"] = [{"word": w.word.strip(), "start": float(w.start), "end": float(w.end)}
                         for s in transcript.segments for w in s.words]
    return body


def _segment(s: Segment) -> dict[str, object]:
    return {
        # faster-whisper does not report the decoding window's offset; the segment's own start,
        # in the same frames, is what a client can use it for (seeking to the segment).
        "id": s.id, "seek": round(s.start * _FRAMES_PER_SECOND), "start": float(s.start), "end": float(s.end),
        "text": s.text, "tokens": list(s.tokens), "temperature": float(s.temperature),
        "avg_logprob": float(s.avg_logprob), "compression_ratio": float(s.compression_ratio),
        "no_speech_prob": float(s.no_speech_prob),
    }


def timestamp(seconds: float, decimal: str) -> str:
    """``HH:MM:SS<decimal>mmm``: SubRip separates milliseconds with a comma, WebVTT with a point."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def _cues(segments: Iterable[Segment]) -> Iterable[tuple[float, float, str]]:
    for s in segments:
        # A blank line ends a cue in both formats, so a cue's text is kept on one line.
        text = " ".join(s.text.split())
        if text:
            yield s.start, s.end, text


def srt(segments: Iterable[Segment]) -> str:
    """SubRip subtitles, one numbered cue per segment with text."""
    return "".join(f"{i}\n{timestamp(start, ',')} --> {timestamp(end, ',')}\n{text}\n\n"
                   for i, (start, end, text) in enumerate(_cues(segments), start=1))


def vtt(segments: Iterable[Segment]) -> str:
    """WebVTT subtitles: the header, then one cue per segment with text."""
    return "WEBVTT\n\n" + "".join(f"{timestamp(start, '.')} --> {timestamp(end, '.')}\n{text}\n\n"
                                  for start, end, text in _cues(segments))
