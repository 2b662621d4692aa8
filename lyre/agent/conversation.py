"""A session's conversation: its items in order, as the think step's messages, cut to what was heard.

Items are plain dicts: ``{"id", "type": "message", "role", "text"}`` (an
assistant message also keeps ``full_text`` and ``audio_ms``, what it said and
how long), ``{"type": "function_call", "call_id", "name", "arguments"}`` and
``{"type": "function_call_output", "call_id", "output"}``. The oldest fall out
past ``MAX_ITEMS``, a tool's output with its call: a chat endpoint refuses a
tool message that answers no call it can see.
"""

from __future__ import annotations

from typing import Any

from lyre.stt.realtime_events import RealtimeError

__all__ = ["MAX_ITEMS", "Conversation", "heard_text", "item_object"]

MAX_ITEMS = 64


class Conversation:
    """One session's items, oldest first."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    @property
    def last_id(self) -> str | None:
        return self.items[-1]["id"] if self.items else None

    def add(self, item: dict[str, Any]) -> None:
        self.items.append(item)
        if len(self.items) > MAX_ITEMS:
            del self.items[:-MAX_ITEMS]
            # An output whose call fell out would be an orphan tool message: an OpenAI-compatible endpoint
            # answers 400 to it, on this turn and every later one. It goes with its call.
            calls = {item["call_id"] for item in self.items if item["type"] == "function_call"}
            self.items[:] = [item for item in self.items
                             if item["type"] != "function_call_output" or item["call_id"] in calls]

    def find(self, item_id: object) -> dict[str, Any] | None:
        return next((item for item in self.items if item["id"] == item_id), None)

    def has_call(self, call_id: str) -> bool:
        return any(item["type"] == "function_call" and item["call_id"] == call_id for item in self.items)

    def add_reply(self, item_id: str, text: str, audio_ms: float, heard_ms: float,
                  calls: list[dict[str, Any]]) -> None:
        """An assistant reply that was heard for ``heard_ms`` of its ``audio_ms``, and the functions it called."""
        if text:  # a reply that only called functions says nothing
            self.add({"id": item_id, "type": "message", "role": "assistant", "full_text": text,
                      "audio_ms": audio_ms, "text": heard_text(text, heard_ms, audio_ms), "heard_ms": heard_ms})
        for call in calls:
            self.add({"id": call["id"], "type": "function_call", "call_id": call["call_id"], "name": call["name"],
                      "arguments": call["arguments"]})

    def cut(self, item_id: str, heard_ms: float) -> None:
        """Keep of an assistant item only what was heard in its first ``heard_ms`` (by the text's length
        until `heard` gives the words the audio placed)."""
        item = self.find(item_id)
        # An assistant item the client made has no audio ("full_text" and "audio_ms" are a spoken reply's).
        if item is not None and item.get("role") == "assistant" and "full_text" in item:
            item["text"] = heard_text(item["full_text"], heard_ms, item["audio_ms"])
            item["heard_ms"] = heard_ms

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

    def messages(self, instructions: str, then: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """OpenAI chat messages: the instructions, every item, and ``then`` (an item not added yet)."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
        for item in [*self.items, *([then] if then else [])]:
            if item["type"] == "message":
                messages.append({"role": item["role"], "content": item["text"]})
            elif item["type"] == "function_call":
                messages.append({"role": "assistant", "content": None, "tool_calls": [{
                    "id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}]})
            else:
                messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        return messages


def item_object(item: dict[str, Any]) -> dict[str, Any]:
    """A user-given item as the conversation.item events show it."""
    if item["type"] == "function_call_output":
        return {"id": item["id"], "type": "function_call_output", "call_id": item["call_id"],
                "output": item["output"], "status": "completed"}
    part = "output_text" if item["role"] == "assistant" else "input_text"
    return {"id": item["id"], "type": "message", "role": item["role"], "status": "completed",
            "content": [{"type": part, "text": item["text"]}]}


def heard_text(text: str, heard_ms: float, audio_ms: float) -> str:
    """The part of ``text`` spoken in the first ``heard_ms`` of its ``audio_ms``, to a whole word."""
    if audio_ms <= 0 or heard_ms >= audio_ms:
        return text
    cut = int(len(text) * max(0.0, heard_ms) / audio_ms)
    while 0 < cut < len(text) and not text[cut].isspace():
        cut -= 1
    return text[:cut].rstrip()
