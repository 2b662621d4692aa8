"""How many tokens a segment's words need: the budget that ends a segment when end-of-speech never comes.

The rule: a segment may run for ``LEADING_S`` (the breath and silence the model often opens with) plus its
spoken characters at ``SLOWEST_CHARS_PER_S`` (a slow, deliberate delivery) plus ``TAG_S`` for each emotive tag
(a laugh or a sigh takes time and no characters), in whole frames, and never past the positions a request has
after its prompt. Natural English runs at 13-16 characters a second. benchmarks/speaking_rate.py measures
espeak-ng at 120-175 words a minute on six sentences: medians 12.7-18.8 characters a second over the voiced audio
(13.1-19.6 over Whisper's word times), the slowest clip 10.3 (a short reply at 120 words a minute). A segment
slower than 9 characters a second throughout is a model stuck, not a slow speaker, so the budget cuts it and
the cut is reported (lyre.tts.cuts).

Other languages have their own rate (``LANGUAGE_CHARS_PER_S``, by the request's BCP-47 tag), measured the same
way (espeak-ng's voice for each, five everyday sentences at 120, 150 and 175 words a minute, characters over the
voiced audio) and set with English's margin below the slowest clip (9 / 10.3):

    language   measured chars/s   slowest clip   budget rate
    de         11.3-20.7          11.3           9.8
    fr         13.3-23.2          13.3           11.6
    es         11.0-19.8          11.0           9.6
    it         10.6-18.2          10.6           9.2
    zh         2.6-5.0            2.6            2.3      (one character a syllable; spoken from pinyin)
    ko         4.5-7.6            4.5            3.9      (one character a syllable, spaces between words)
    hi         9.7-15.9           9.7            8.5

espeak-ng is a formant synthesiser, not a person. Its ``cmn`` voice reads many Han characters as spelled-out
pinyin with tone numbers, far slower than speech, so Mandarin is measured from the same sentences written in
pinyin and spoken by ``cmn-latn-pinyin`` (a syllable for each character): 4.0-5.0 characters a second at its
normal rate, as people speak. A request without a language tag, or with one that has
no rate here, is budgeted by its text's script: mostly Han, Hangul or Devanagari letters take Mandarin's,
Korean's or Hindi's rate, anything else English's.

Segments are sized the other way round: the most characters whose budget fits the room a request has, so a
sentence too long for one request is split at a clause or a word, never cut short.
"""

from __future__ import annotations

import math
import re
import unicodedata

from lyre.orpheus import FRAME_TOKENS, TOKENS_PER_SECOND

__all__ = ["LANGUAGE_CHARS_PER_S", "LEADING_S", "SLOWEST_CHARS_PER_S", "TAG_S", "chars_for_script",
           "chars_per_second", "chars_within", "speech_seconds", "speech_tokens"]

SLOWEST_CHARS_PER_S = 9.0  # English's, and every language's without a rate of its own
# By a language tag's primary subtag ("zh-CN": "zh"); benchmarks/speaking_rate.py measures them.
LANGUAGE_CHARS_PER_S = {"en": SLOWEST_CHARS_PER_S, "de": 9.8, "fr": 11.6, "es": 9.6, "it": 9.2, "zh": 2.3,
                        "cmn": 2.3, "ko": 3.9, "hi": 8.5}
# The scripts whose letters set a text's rate when its language does not: the language each is measured in.
_SCRIPT_LANGUAGES = (("CJK UNIFIED IDEOGRAPH", "zh"), ("HANGUL", "ko"), ("DEVANAGARI", "hi"))
LEADING_S = 1.0
TAG_S = 1.5
# An emotive tag as cleaning leaves it (lyre.tts.text): whatever its language, a tag takes time and no characters.
_TAG = re.compile(r"<[^\s<>]+>")


def _tags(text: str) -> tuple[int, int]:
    """(emotive tags in ``text``, the characters they take)."""
    found = _TAG.findall(text)
    return len(found), sum(map(len, found))


def _script_language(text: str) -> str | None:
    """The language measured for the script most of ``text``'s letters are in (Han, Hangul, Devanagari), or
    None when most are in another script."""
    counts = dict.fromkeys([language for _, language in _SCRIPT_LANGUAGES] + [""], 0)
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            counts[next((language for script, language in _SCRIPT_LANGUAGES if name.startswith(script)), "")] += 1
    best = max(counts, key=counts.__getitem__)
    return best if best and counts[best] > counts[""] else None


def chars_per_second(language: str | None, text: str = "") -> float:
    """The slowest rate a segment in ``language`` (a BCP-47 tag) is spoken at; for no tag, or one without a rate
    of its own, the rate of the script of ``text``'s letters (English's for a script without one)."""
    primary = language.split("-")[0].split("_")[0].lower() if language else ""
    if primary not in LANGUAGE_CHARS_PER_S:
        primary = _script_language(text) or "en"
    return LANGUAGE_CHARS_PER_S[primary]


def speech_seconds(text: str, language: str | None = None) -> float:
    """The longest a reasonable delivery of ``text`` (one segment) in ``language`` takes, by the rule above."""
    tags, tag_chars = _tags(text)
    spoken = max(0, len(text.strip()) - tag_chars)
    return LEADING_S + spoken / chars_per_second(language, text) + tags * TAG_S


def speech_tokens(text: str, room: int, language: str | None = None) -> int:
    """``text``'s budget in tokens: whole frames covering `speech_seconds`, at most ``room`` (in whole frames,
    at least one)."""
    frames = math.ceil(speech_seconds(text, language) * TOKENS_PER_SECOND / FRAME_TOKENS)
    return max(1, min(frames, room // FRAME_TOKENS)) * FRAME_TOKENS


def chars_within(tokens: int, language: str | None = None, text: str = "") -> int:
    """The most characters (no tags) in ``language`` (or, without a rate for it, in ``text``'s script) whose
    budget fits in ``tokens``; 0 when not even the lead-in fits."""
    return max(0, int((tokens / TOKENS_PER_SECOND - LEADING_S) * chars_per_second(language, text)))


def chars_for_script(text: str, english_chars: int) -> int:
    """The characters of ``text``'s script whose budget fits in that of ``english_chars`` English ones (no more
    than ``english_chars``, at least one): how segments sized for English shrink for a slower script."""
    rate = chars_per_second(None, text)
    return max(1, min(english_chars, int(english_chars * rate / SLOWEST_CHARS_PER_S)))
