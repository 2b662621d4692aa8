"""A session's conversation: its items in the order the client sees them, as the think step's messages, cut to
what was heard.

Items are plain dicts: ``{"id", "type": "message", "role", "text"}`` (a user
item the person spoke has ``"audio": True`` and ``text`` None until its
transcript comes; an assistant reply also keeps ``full_text``, ``audio_ms``,
``status`` and ``modality``: what it said, how long, whether it is over and
whether it was spoken), ``{"type": "function_call", "call_id", "name",
"arguments"}`` and ``{"type": "function_call_output", "call_id", "output"}``.
An item joins where the client sees it join: a spoken turn when it is
committed, a reply when its ``response.created`` goes out, a client's item
after its ``previous_item_id``. The oldest fall out past ``MAX_ITEMS``, a
tool's output with its call: a chat endpoint refuses a tool message that
answers no call it can see.
"""

from __future__ import annotations

from typing import Any

from lyre.agent.events import EventNames
from lyre.stt.realtime_events import RealtimeError
from lyre.stt.words import UNSPACED_LANGUAGES, joined, script_language, written_words

__all__ = ["LAST", "MAX_ITEMS", "Conversation", "heard_text", "item_object"]

MAX_ITEMS = 64
LAST = object()  # `add`'s place: after the last item


class Conversation:
    """One session's items, oldest first."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    @property
    def last_id(self) -> str | None:
        return self.items[-1]["id"] if self.items else None

    def add(self, item: dict[str, Any], after: object = LAST) -> str | None:
        """``item`` after the item ``after`` names (None: first; `LAST`: last); the id of the item before it
        (RealtimeError if ``after`` names none)."""
        if after is LAST:
            at = len(self.items)
        elif after is None:
            at = 0
        elif (before := self.find(after)) is not None:
            at = self.items.index(before) + 1
        else:
            raise RealtimeError(f"previous_item_id {after!r} names no item of this conversation",
                                param="previous_item_id")
        previous = self.items[at - 1]["id"] if at else None
        self.items.insert(at, item)
        if len(self.items) > MAX_ITEMS:
            del self.items[:-MAX_ITEMS]
            # An output whose call fell out would be an orphan tool message: an OpenAI-compatible endpoint
            # answers 400 to it, on this turn and every later one. It goes with its call.
            calls = {item["call_id"] for item in self.items if item["type"] == "function_call"}
            self.items[:] = [item for item in self.items
                             if item["type"] != "function_call_output" or item["call_id"] in calls]
        return previous

    def find(self, item_id: object) -> dict[str, Any] | None:
        return next((item for item in self.items if item["id"] == item_id), None)

    def remove(self, item_id: object) -> bool:
        """Delete the item ``item_id`` names; False if there is none."""
        item = self.find(item_id)
        if item is None:
            return False
        self.items.remove(item)
        return True

    def has_call(self, call_id: str) -> bool:
        return any(item["type"] == "function_call" and item["call_id"] == call_id for item in self.items)

    def open_reply(self, item_id: str, modality: str) -> str | None:
        """A reply's message joins, in progress; the id of the item before it."""
        return self.add({"id": item_id, "type": "message", "role": "assistant", "text": "", "full_text": "",
                         "audio_ms": 0.0, "status": "in_progress", "modality": modality})

    def add_call(self, call: dict[str, Any]) -> str | None:
        """A reply's function call joins, the reply's own item (lyre.agent.calls: its arguments may still be
        streaming in); the id of the item before it."""
        return self.add(call)

    def add_reply(self, item_id: str, text: str, audio_ms: float, heard_ms: float) -> None:
        """An assistant reply is over: it was heard for ``heard_ms`` of its ``audio_ms`` (a written one is
        all read). Its message is updated where it joined, unless the client deleted it meanwhile."""
        if (item := self.find(item_id)) is not None:
            item.update(full_text=text, audio_ms=audio_ms, text=heard_text(text, heard_ms, audio_ms),
                        heard_ms=heard_ms, status="completed" if heard_ms >= audio_ms else "incomplete")

    def cut(self, item_id: str, heard_ms: float) -> None:
        """Keep of an assistant item only what was heard in its first ``heard_ms`` (by the text's length
        until `heard` gives the words the audio placed)."""
        item = self.find(item_id)
        # An assistant item the client made has no audio ("full_text" and "audio_ms" are a spoken reply's).
        if item is not None and item.get("role") == "assistant" and "full_text" in item:
            item["text"] = heard_text(item["full_text"], heard_ms, item["audio_ms"])
            item["heard_ms"] = heard_ms
            item["status"] = "incomplete" if heard_ms < item["audio_ms"] else item["status"]

    def heard(self, item_id: str, heard_ms: float, text: str) -> bool:
        """The words of a spoken reply heard in its first ``heard_ms``, placed in its audio; ignored (False)
        if the item is gone or has been cut at another point since."""
        item = self.find(item_id)
        if item is None or "full_text" not in item or item.get("heard_ms") != heard_ms:
            return False
        item["text"] = text
        return True

    def truncate(self, item_id: object, content_index: object, end_ms: object) -> None:
        """``conversation.item.truncate``: checked, then `cut` (RealtimeError naming what is wrong)."""
        item = self.find(item_id)
        if item is None or item.get("role") != "assistant":
            raise RealtimeError(f"item_id {item_id!r} names no assistant item of this conversation",
                                "item_truncate_invalid_item_id", "item_id")
        if type(content_index) is not int or content_index != 0:
            raise RealtimeError(f"content_index must be 0 (an assistant item has one content part), got "
                                f"{content_index!r}", param="content_index")
        if isinstance(end_ms, bool) or not isinstance(end_ms, int) or end_ms < 0:
            raise RealtimeError(f"audio_end_ms must be a whole number of milliseconds, got {end_ms!r}",
                                "invalid_type", "audio_end_ms")
        if end_ms > item.get("audio_ms", 0) + 1:
            raise RealtimeError(f"audio_end_ms {end_ms} is past the item's audio ({item.get('audio_ms', 0):.0f} ms)",
                                param="audio_end_ms")
        self.cut(item["id"], end_ms)

    def messages(self, instructions: str, then: dict[str, Any] | None = None,
                 items: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """OpenAI chat messages: the instructions, every item (or ``items``), and ``then`` (an item not added
        yet). A message with no words yet (a turn not transcribed, a reply not begun) is left out."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
        for item in [*(self.items if items is None else items), *([then] if then else [])]:
            if item["type"] == "message":
                if item.get("text"):
                    messages.append({"role": item["role"], "content": item["text"]})
            elif item["type"] == "function_call":
                messages.append({"role": "assistant", "content": None, "tool_calls": [{
                    "id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}]})
            else:
                messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        return messages


def item_object(item: dict[str, Any], names: EventNames) -> dict[str, Any]:
    """An item as the ``conversation.item.*`` events show it, in the shape ``names`` are of."""
    shown: dict[str, Any] = {"id": item["id"], "object": "realtime.item", "type": item["type"]}
    if item["type"] == "function_call_output":
        return {**shown, "call_id": item["call_id"], "output": item["output"], "status": "completed"}
    if item["type"] == "function_call":
        return {**shown, "call_id": item["call_id"], "name": item["name"], "arguments": item["arguments"],
                "status": item.get("status", "completed")}
    shown.update(role=item["role"], status=item.get("status", "completed"))
    if item["role"] == "assistant":
        part = ({"type": names.audio_item_part, "transcript": item["text"]} if item.get("modality") == "audio"
                else {"type": names.text_item_part, "text": item["text"]})
    elif item.get("audio"):
        part = {"type": "input_audio", "transcript": item["text"]}
    else:
        part = {"type": "input_text", "text": item["text"]}
    return {**shown, "content": [part]}


def heard_text(text: str, heard_ms: float, audio_ms: float) -> str:
    """The part of ``text`` spoken in the first ``heard_ms`` of its ``audio_ms``, by its length, to a whole word
    (in a text written without spaces, such as Mandarin, to a whole word of `written_words`)."""
    if audio_ms <= 0 or heard_ms >= audio_ms:
        return text
    if script_language(text) in UNSPACED_LANGUAGES:
        words = written_words(text)
        budget, kept = max(0.0, heard_ms) / audio_ms * sum(len(w) for w in words), []
        for word in words:
            budget -= len(word)
            if budget < 0:
                break
            kept.append(word)
        return joined(kept)
    cut = int(len(text) * max(0.0, heard_ms) / audio_ms)
    while 0 < cut < len(text) and not text[cut].isspace():
        cut -= 1
    return text[:cut].rstrip()
