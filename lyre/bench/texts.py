"""What the bench asks the server to say: a built-in mix of lengths, or the lines of a file."""

from __future__ import annotations

from pathlib import Path

__all__ = ["BUILTIN_TEXTS", "load_texts"]

# Short, medium and long, interleaved so every few requests mix the three
# (a voice agent's turns vary the same way). Long ones stay under 300
# characters: the server speaks that as one segment, so each request is one
# generation and the figures compare across servers that split differently.
BUILTIN_TEXTS: tuple[str, ...] = (
    "Sure, I can help with that.",
    "Your table for four is booked for seven thirty tonight, and I've added a note about the birthday cake.",
    (
        "Before we start, let me check one thing. The parcel left our warehouse on Tuesday morning, went through "
        "the regional hub overnight, and should reach your door by Friday afternoon. If nobody is home, the driver "
        "will leave it with a neighbour and put a card through your letterbox."
    ),
    "Got it, thanks!",
    "The next train to the airport leaves from platform two in about eleven minutes.",
    (
        "Here is a quick summary of your account. You have two open invoices, one due next week and one overdue "
        "by three days. Paying the overdue one today avoids the late fee, and I can set up automatic payments so "
        "this does not happen again, if you would like that."
    ),
    "Hmm, let me think about that for a second.",
    "I moved your dentist appointment to Thursday at ten, and the reminder will come the evening before.",
    (
        "Welcome back to the story. When we left our travellers, the storm had just broken over the mountain pass, "
        "and the old guide insisted they wait in the shepherd's hut until morning. Nobody slept. Somewhere above "
        "them, a door that should not have existed kept knocking in the wind."
    ),
    "No problem at all, take your time.",
    "The weather today is mild and cloudy, with a light breeze from the west and a small chance of rain later.",
    (
        "To reset the router, hold the small button on the back for ten seconds until the lights blink orange. "
        "Then wait two minutes while it restarts, connect to the network printed on the label, and open the setup "
        "page in your browser. I will stay on the line while you do it."
    ),
)


def load_texts(path: Path) -> tuple[str, ...]:
    """One text per non-blank line of a UTF-8 file."""
    texts = tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if not texts:
        raise ValueError(f"{path}: no texts (one per line expected)")
    return texts
