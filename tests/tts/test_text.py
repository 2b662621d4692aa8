"""Tests for lyre.tts.text: normalisation, segmentation and the incremental splitter."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyre.orpheus import EMOTIVE_TAGS
from lyre.tts.budget import chars_for_script
from lyre.tts.segments import IncrementalSplitter, split_segments
from lyre.tts.text import DEFAULT_SEGMENT_CHARS, MAX_INPUT_CHARS, TextError, normalize


def _squash(text: str) -> str:
    return re.sub(r"\s", "", text)


def _stream(pieces: list[str], max_chars: int = DEFAULT_SEGMENT_CHARS, min_chars: int = 0) -> list[list[str]]:
    """What each push returned, then what flush returned."""
    splitter = IncrementalSplitter(max_chars, min_chars)
    return [splitter.push(piece) for piece in pieces] + [splitter.flush()]


# ---- normalize ----------------------------------------------------------------


def test_limits_are_the_documented_values() -> None:
    assert MAX_INPUT_CHARS == 4096 and DEFAULT_SEGMENT_CHARS == 300


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("It\u2019s \u2018fine\u2019", "It's 'fine'"),
        ("\u201cHi,\u201d she said \u201eja\u201c", '"Hi," she said "ja"'),
        ("wait\u2026 what", "wait... what"),
        ("yes\u2014no", "yes - no"),
        ("yes \u2014 no", "yes - no"),
        ("pages 10\u201312", "pages 10-12"),
        ("red \u2013 blue", "red - blue"),
        ("well\u2010known \u22125", "well-known -5"),
        ("\u00bd cup", "1/2 cup"),
    ],
)
def test_typographic_punctuation_becomes_ascii(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_nfkc_folds_compatibility_forms() -> None:
    assert normalize("\uff28\uff49\uff01 \ufb01ne 25\u2103") == "Hi! fine 25°C"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Hello \U0001f44b world", "Hello world"),
        ("Great job!\U0001f389\U0001f389", "Great job!"),
        ("thumbs \U0001f44d\U0001f3fd up", "thumbs up"),  # skin-tone modifier
        ("family \U0001f468\u200d\U0001f469\u200d\U0001f467 time", "family time"),  # ZWJ sequence
        ("flag \U0001f1eb\U0001f1f7 here", "flag here"),
        ("I \u2764\ufe0f it", "I it"),  # variation selector goes with the heart
        ("press 1\ufe0f\u20e3 now", "press 1 now"),  # keycap: the digit stays
        ("\u2022 item \u2605 star \u2192 arrow", "item star arrow"),
    ],
)
def test_emoji_and_pictographs_are_removed(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Café déjà vu, naïve façade.",
        "Grüße aus Köln, Straße.",
        "你好、世界。我很好。",
        "こんにちは、元気ですか。",
        "안녕하세요. 반갑습니다.",
        "नमस्ते, आप कैसे हैं।",
        "¿Qué tal? ¡Muy bien!",
        "« Bonjour », dit-il.",
    ],
)
def test_letters_and_marks_of_every_script_are_kept(text: str) -> None:
    assert normalize(text) == text


def test_allowed_symbols_are_kept_and_others_dropped() -> None:
    kept = "$5 + €3 = 100% of £8 & ¥9 @home #1 at 20°"
    assert normalize(kept) == kept
    assert normalize("**bold** _x_ a|b ~c^ `code` \\n") == "bold x ab c code n"


def test_controls_and_format_characters() -> None:
    assert normalize("one\ntwo\tthree\r\nfour") == "one two three four"
    assert normalize("zero\u200bwidth co\u00adop \x00\x07bell\ufeff") == "zerowidth coop bell"
    assert normalize("  many    spaces \u00a0 here  ") == "many spaces here"


@pytest.mark.parametrize("tag", EMOTIVE_TAGS)
def test_every_emotive_tag_is_kept(tag: str) -> None:
    assert normalize(f"Well {tag} okay") == f"Well {tag} okay"
    assert normalize(f"Well {tag.upper()} okay") == f"Well {tag} okay"


def test_other_tags_and_stray_brackets_are_dropped() -> None:
    assert normalize("Hi <Sigh> there <|eot_id|> friend") == "Hi <sigh> there friend"
    assert normalize("<b>bold</b> and <custom_token_5>x<|begin_of_text|>") == "bold and x"
    assert normalize("a < b and c > d, 3<4") == "a b and c d, 34"
    assert normalize("\uff1claugh\uff1e ok") == "<laugh> ok"  # fullwidth brackets fold to a real tag
    assert normalize("<<laugh>>") == "<laugh>"
    assert normalize("<laughing> <laugh") == "laugh"


def test_limit_error_names_both_numbers() -> None:
    with pytest.raises(TextError, match=r"^input is 5000 characters, over the limit of 4096$"):
        normalize("a" * 5000)
    with pytest.raises(TextError, match="input is 11 characters, over the limit of 10"):
        normalize("hello world", max_chars=10)
    assert normalize("a" * MAX_INPUT_CHARS) == "a" * MAX_INPUT_CHARS
    # The limit applies to the raw text, before whitespace is collapsed.
    with pytest.raises(TextError, match="4097 characters"):
        normalize("a" + " " * 4096)


def test_empty_input_errors() -> None:
    assert issubclass(TextError, ValueError)
    for blank in ("", "   \n\t"):
        with pytest.raises(TextError, match="^input is empty$"):
            normalize(blank)
    for unspeakable in ("\U0001f389\U0001f389", "<|eot_id|>", "*** ~~~"):
        with pytest.raises(TextError, match="empty after normalisation"):
            normalize(unspeakable)
    with pytest.raises(ValueError, match="max_chars"):
        normalize("hi", max_chars=0)


_ANY_TEXT = st.lists(
    st.sampled_from(list("ab Z9.,!?<>|\n\t'\u2019\u201c\u2014\u2013\u2026\u00e9\u0301"))
    | st.sampled_from(list("\u4f60\u3002\U0001f389\u200d\ufe0f"))
    | st.sampled_from([*EMOTIVE_TAGS, "<LAUGH>", "<|eot_id|>", "<b>"]),
    max_size=60,
).map("".join)


@given(_ANY_TEXT)
@settings(max_examples=150, deadline=None)
def test_normalize_is_idempotent_and_clean(text: str) -> None:
    try:
        once = normalize(text)
    except TextError:
        return
    assert normalize(once) == once
    assert once == once.strip() and "  " not in once
    assert not re.search(r"[\n\t\u200d\ufe0f\U0001f389|]", once)
    # Angle brackets survive only as emotive tags.
    assert "<" not in re.sub("|".join(EMOTIVE_TAGS), "", once).replace(">", "<")


# ---- split_segments -------------------------------------------------------------


def test_short_text_is_one_segment() -> None:
    assert split_segments("Hello there. How are you?") == ["Hello there. How are you?"]
    assert split_segments("") == [] and split_segments("   ") == []


def test_sentences_merge_greedily_up_to_max_chars() -> None:
    text = "One two three. Four five six. Seven eight nine. Ten."
    assert split_segments(text, 30) == ["One two three. Four five six.", "Seven eight nine. Ten."]
    assert split_segments(text, 20) == ["One two three.", "Four five six.", "Seven eight nine.", "Ten."]


def test_every_end_mark_ends_a_sentence() -> None:
    text = "Is it? It is! Well... maybe. He said \"go.\" So we went."
    assert split_segments(text, 20) == ["Is it? It is!", "Well... maybe.", 'He said "go."', "So we went."]


def test_abbreviations_initials_and_decimals_do_not_end_sentences() -> None:
    text = "Mr. Smith met Dr. Jones at 3.5 p.m. today, e.g. for tea with J. R. Tolkien. Then they left."
    segments = split_segments(text, 90)
    assert segments == [
        "Mr. Smith met Dr. Jones at 3.5 p.m. today, e.g. for tea with J. R. Tolkien.",
        "Then they left.",
    ]


# Segments are sized for English: the English characters whose budget holds 20 of Mandarin (lyre.tts.budget).
_HAN_20 = next(n for n in range(1, 500) if chars_for_script("好", n) == 20)


def test_cjk_sentences_need_no_space() -> None:
    text = "你好。我很好！你呢？我也很好，谢谢你的关心，真的非常感谢你一直以来的帮助和支持。"
    assert split_segments(text, _HAN_20) == ["你好。我很好！你呢？", "我也很好，谢谢你的关心，", "真的非常感谢你一直以来的帮助和支持。"]
    # Full-width marks stay as written; "!" needs no space before Chinese text either.
    text = normalize("我们走吧！今天天气很好，我们去公园玩吧，然后一起吃饭好不好？")
    assert split_segments(text, _HAN_20) == ["我们走吧！", "今天天气很好，我们去公园玩吧，", "然后一起吃饭好不好？"]
    assert split_segments("我们走吧!今天天气很好,我们去公园玩吧,然后一起吃饭好不好?", _HAN_20) == [
        "我们走吧!", "今天天气很好,我们去公园玩吧,", "然后一起吃饭好不好?"]


def test_long_sentence_is_cut_at_clauses_before_spaces() -> None:
    text = "First we walk to the shop, then we buy some bread; after that: we go home - and eat it all"
    assert split_segments(text, 40) == [
        "First we walk to the shop,",
        "then we buy some bread; after that:",
        "we go home - and eat it all",
    ]


def test_clause_without_marks_is_cut_between_words() -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda"
    segments = split_segments(text, 25)
    assert segments == ["alpha beta gamma delta", "epsilon zeta eta theta", "iota kappa lambda"]


def test_only_an_overlong_word_is_cut_inside() -> None:
    word = "x" * 50
    assert split_segments(f"go {word} now", 20) == ["go", "x" * 20, "x" * 20, "x" * 10 + " now"]


def test_hard_cut_never_splits_an_emotive_tag() -> None:
    text = "y" * 18 + "<laugh>" + "z" * 10
    segments = split_segments(text, 20)
    assert segments == ["y" * 18, "<laugh>" + "z" * 10]


def test_max_chars_below_twenty_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars must be >= 20, got 19"):
        split_segments("hello", 19)


_WORDS = st.text(alphabet="abcdefghij", min_size=1, max_size=12)
_MARKS = st.sampled_from(["", "", "", ".", ",", "!", "?", ";", ":", "...", " -", " <sigh>", " Dr."])


@st.composite
def _prose(draw: st.DrawFn, word_sizes: st.SearchStrategy[str] = _WORDS) -> str:
    words = draw(st.lists(st.tuples(word_sizes, _MARKS), min_size=1, max_size=80))
    return " ".join(word + mark for word, mark in words)


@given(_prose(), st.integers(20, 120))
@settings(max_examples=150, deadline=None)
def test_segments_fit_and_rejoin_to_the_input(text: str, max_chars: int) -> None:
    segments = split_segments(text, max_chars)
    assert segments and all(0 < len(s) <= max_chars and s == s.strip() for s in segments)
    # Every word is shorter than max_chars, so every cut is at a space.
    assert " ".join(segments) == text
    for segment in segments:
        assert segment.count("<") == segment.count(">")


@given(_prose(st.text(alphabet="abc", min_size=1, max_size=45)), st.integers(20, 40))
@settings(max_examples=100, deadline=None)
def test_segments_with_overlong_words_lose_only_whitespace(text: str, max_chars: int) -> None:
    segments = split_segments(text, max_chars)
    assert all(0 < len(s) <= max_chars for s in segments)
    assert _squash("".join(segments)) == _squash(text)


# ---- IncrementalSplitter --------------------------------------------------------


def test_pieces_are_joined_verbatim_even_mid_word() -> None:
    assert _stream(["Hel", "lo the", "re. How", " are", " you? I'm", " fi", "ne"]) == [
        [],
        [],
        ["Hello there."],
        [],
        ["How are you?"],
        [],
        [],
        ["I'm fine"],
    ]


def test_a_sentence_is_complete_only_when_whitespace_follows() -> None:
    splitter = IncrementalSplitter()
    assert splitter.push("It costs 3.") == []
    assert splitter.push("5 dollars. ") == ["It costs 3.5 dollars."]
    assert splitter.push("Ask Dr. ") == []  # an abbreviation, not an end
    assert splitter.push("Who.\n") == ["Ask Dr. Who."]
    assert splitter.flush() == []


def test_sentence_aligned_pieces_give_the_batch_segments() -> None:
    sentences = ["One two three. ", "Four five six. ", "Seven eight nine. ", "Ten eleven twelve thirteen fourteen. "]
    batch = split_segments(normalize("".join(sentences)), 30)
    streamed = [s for out in _stream(sentences, 30, 30) for s in out]
    last = ["Ten eleven twelve thirteen", "fourteen."]
    assert streamed == batch == ["One two three. Four five six.", "Seven eight nine.", *last]
    # Without holding back, each sentence goes out as soon as it ends.
    assert _stream(sentences, 30) == [[s.strip()] for s in sentences[:3]] + [last, []]


def test_short_segments_wait_for_min_chars() -> None:
    outputs = _stream(["Hi. ", "Yes. ", "How are you doing? ", "Ok."], 100, 15)
    assert outputs == [[], [], ["Hi. Yes. How are you doing?"], [], ["Ok."]]


def test_long_pending_text_is_cut_before_its_sentence_ends() -> None:
    splitter = IncrementalSplitter(30)
    assert splitter.push("We went down to the river, and then we ") == ["We went down to the river,"]
    assert splitter.push("swam across it quickly") == []
    assert splitter.push(" before dark") == ["and then we swam across it"]
    assert splitter.flush() == ["quickly before dark"]


def test_segments_are_normalised_and_tags_may_span_pieces() -> None:
    outputs = _stream(["\u201cWow\u201d \U0001f389 <la", "ugh> that\u2019s it. <|eot", "_id|> Bye\u2026"])
    segments = [s for out in outputs for s in out]
    assert segments == ['"Wow" <laugh> that\'s it.', "Bye..."]
    assert all(normalize(s) == s for s in segments)


def test_a_tag_is_never_cut_while_its_end_may_still_come() -> None:
    # "<x。y>" is one (dropped) tag, though "。" could otherwise end a piece.
    assert _stream(["ok <x。", "y> fine. "]) == [[], ["ok fine."], []]


def test_cjk_stream_is_cut_at_cjk_marks() -> None:
    outputs = _stream(["你好", "。我很", "好。你"], _HAN_20, 0)
    assert outputs == [[], [], ["你好。"], ["我很好。你"]]


def test_flush_starts_afresh_and_unspeakable_text_yields_nothing() -> None:
    splitter = IncrementalSplitter()
    assert splitter.push("\U0001f389 ") == [] and splitter.flush() == []
    assert splitter.push("First.") == [] and splitter.flush() == ["First."]
    assert splitter.push("Second. ") == ["Second."] and splitter.flush() == []


@pytest.mark.parametrize(
    ("max_chars", "min_chars", "message"),
    [
        (19, 0, "max_chars must be >= 20"),
        (30, 31, r"min_chars must be in \[0, max_chars=30\]"),
        (30, -1, "min_chars"),
    ],
)
def test_splitter_validates_its_limits(max_chars: int, min_chars: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        IncrementalSplitter(max_chars, min_chars)


_STREAM_TEXT = st.lists(
    st.sampled_from(
        [
            *("word", "Dr.", "3.5", ".", ". ", "! ", "?", ", ", " - ", "...", " ", "  ", "\n", "x" * 25),
            *("\u2019", "\u201d", "\u2014", "\U0001f389", "e\u0301", "<laugh>", "<LAUGH>", "<|eot_id|>", "<", ">"),
            *("\u4f60\u597d", "\u3002", "\uff01", "\uff0c"),
        ]
    ),
    min_size=1,
    max_size=60,
).map("".join)


@given(_STREAM_TEXT, st.integers(20, 60), st.data())
@settings(max_examples=150, deadline=None)
def test_any_chunking_streams_the_batch_segments(text: str, max_chars: int, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    try:
        expected = split_segments(normalize(text), max_chars)
    except TextError:
        expected = []
    streamed = [s for out in _stream(pieces, max_chars, max_chars) for s in out]
    assert streamed == expected
    # Without holding back, segments differ but the text and the bound do not.
    eager = [s for out in _stream(pieces, max_chars) for s in out]
    assert all(0 < len(s) <= max_chars for s in eager)
    assert _squash("".join(eager)) == _squash("".join(expected))
