"""What the bench asks the server to say: a built-in mix of lengths, the lines of a file, or a public prompt set.

``seed-tts-en`` is the English target texts of seed-tts-eval (its ``en/meta.lst``: 1,088 Common Voice
sentences), the prompt set the 2026 serving comparisons report on. Its texts come with the test set, which
lyre cannot fetch or ship: build the list once from a local copy of it,

    lyre bench --build-texts seed-tts-en /path/to/seedtts_testset/en/meta.lst

which keeps each line's last field (``utt_id|prompt_text|prompt_wav|target_text``), in order, in lyre's
cache (``$LYRE_CACHE_DIR/bench/seed-tts-en.txt``); ``--texts seed-tts-en`` then reads it.
"""

from __future__ import annotations

from pathlib import Path

from lyre.common.files import cache_root, write_atomic

__all__ = ["BUILTIN_TEXTS", "PROMPT_SETS", "build_prompt_set", "load_texts", "named_or_file", "prompt_set_path"]

PROMPT_SETS = ("seed-tts-en",)

# Short, medium and long, interleaved so every few requests mix the three
# (a voice agent's turns vary the same way). Long ones stay under 187
# characters: at the default --max-seq-len the server speaks that as one
# segment (lyre.tts.budget), so each request is one generation and the figures
# compare across servers that split differently.
BUILTIN_TEXTS: tuple[str, ...] = (
    "Sure, I can help with that.",
    "Your table for four is booked for seven thirty tonight, and I've added a note about the birthday cake.",
    (
        "Before we start, let me check one thing. The parcel left our warehouse on Tuesday morning, went through "
        "the regional hub overnight, and should reach your door by Friday afternoon."
    ),
    "Got it, thanks!",
    "The next train to the airport leaves from platform two in about eleven minutes.",
    (
        "Here is a quick summary of your account. You have two open invoices, one due next week and one overdue "
        "by three days. Paying the overdue one today avoids the late fee."
    ),
    "Hmm, let me think about that for a second.",
    "I moved your dentist appointment to Thursday at ten, and the reminder will come the evening before.",
    (
        "Welcome back to the story. When we left our travellers, the storm had just broken over the mountain pass, "
        "and the old guide insisted they wait in the shepherd's hut until morning."
    ),
    "No problem at all, take your time.",
    "The weather today is mild and cloudy, with a light breeze from the west and a small chance of rain later.",
    (
        "To reset the router, hold the small button on the back for ten seconds until the lights blink orange. "
        "Then wait two minutes while it restarts, and open the setup page."
    ),
)


def load_texts(path: Path) -> tuple[str, ...]:
    """One text per non-blank line of a UTF-8 file."""
    texts = tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if not texts:
        raise ValueError(f"{path}: no texts (one per line expected)")
    return texts


def prompt_set_path(name: str) -> Path:
    """Where the prompt set ``name`` is kept once built."""
    if name not in PROMPT_SETS:
        raise ValueError(f"no prompt set {name!r}; there are {', '.join(PROMPT_SETS)}")
    return cache_root() / "bench" / f"{name}.txt"


def build_prompt_set(name: str, meta: Path) -> tuple[Path, int]:
    """The prompt set ``name`` from its meta file (seed-tts-eval's ``meta.lst``): its path and text count."""
    path = prompt_set_path(name)
    texts = []
    for number, line in enumerate(meta.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 4 or not fields[-1].strip():
            raise ValueError(f"{meta}:{number}: expected utt_id|prompt_text|prompt_wav|target_text, got {line!r}")
        texts.append(" ".join(fields[-1].split()))
    if not texts:
        raise ValueError(f"{meta}: no lines")
    write_atomic(path, "\n".join(texts) + "\n")
    return path, len(texts)


def named_or_file(given: str) -> tuple[str, ...]:
    """``--texts``: a prompt set's name (built before), else a file of one text per line."""
    if given in PROMPT_SETS:
        path = prompt_set_path(given)
        if not path.is_file():
            raise ValueError(f"--texts {given}: not built yet; build it from a local copy of the test set with "
                             f"lyre bench --build-texts {given} PATH/TO/en/meta.lst")
        return load_texts(path)
    return load_texts(Path(given))
