"""A conversation's replies: the one the client hears, and each, once over, in the history cut to what was heard.

    replies = Replies(conversation, aligner, send, report, spawn)
    replies.start(reply)            # a new Reply runs
    replies.ended(reply)            # its response.done went out: it joins the history, cut to what was heard
    replies.replace(reply)          # the client hears ``reply`` from now on; the one before it is cancelled
    replies.barge_in()              # the person speaks over the reply playing
    replies.truncate(item_id, content_index, audio_end_ms)   # the client's conversation.item.truncate

Barge-in: speech starting while a released reply is still playing cancels it
(``interrupt_response``), and the assistant item keeps the text of the audio
the client had time to play (by the server's playback clock, or the client's
own ``conversation.item.truncate``): the words that end by then, placed in the
audio by forced alignment of the one segment playing at the cut (until that
is done, a cut by the text's length stands in). A truncation's
``conversation.item.truncated`` goes out at once; when the words are placed,
lyre's own ``lyre.conversation.item.heard`` follows with them (``transcript``,
what the history now holds, and ``words``), unless the item was cut elsewhere
meanwhile: a later cut is never overwritten by an earlier one's words.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from lyre.agent.conversation import Conversation
from lyre.agent.heard import SpokenReplies, word_objects
from lyre.agent.reply import Reply
from lyre.stt import AlignedWord, RealtimeError, WordAligner

__all__ = ["Replies"]

_SPOKEN_KEPT = 8  # replies whose audio is kept for a later conversation.item.truncate


class Replies:
    """One conversation's replies; see the module docstring."""

    def __init__(self, conversation: Conversation, aligner: WordAligner, send: Callable[..., None],
                 report: Callable[[RealtimeError], None], spawn: Callable[[Awaitable[None]], Any]) -> None:
        """``send(kind, **fields)`` and ``report(error)`` send server events; ``spawn`` runs work beside the
        session's, cancelled when it closes; ``aligner`` places a cut reply's words in its audio."""
        self.current: Reply | None = None  # the reply the client hears (or is about to)
        self._conversation = conversation
        self._aligner = aligner
        self._send = send
        self._report = report
        self._spawn = spawn
        self._spoken = SpokenReplies(_SPOKEN_KEPT)

    def start(self, reply: Reply) -> None:
        """Run ``reply``."""
        reply.start()

    def replace(self, reply: Reply) -> None:
        """The client hears ``reply`` from now on; the reply it replaces is cancelled."""
        if self.current is not None and self.current is not reply:
            self.current.cancel()
        self.current = reply

    def barge_in(self) -> None:
        """Speech while the client still plays the current reply: stop it, and keep only what was heard."""
        reply = self.current
        if reply is None or reply.held:
            return
        if not reply.over:
            reply.cancel()  # its history entry is cut when it is over
        elif (played := reply.played_ms()) < reply.audio_ms:  # all made, not all played yet
            self._conversation.cut(reply.item_id, played)
            self._spawn(self._cut_by_words(reply, played))

    def truncate(self, item_id: object, content_index: object, audio_end_ms: object) -> None:
        """The client played only ``audio_end_ms`` of an item (RealtimeError naming a bad field)."""
        self._conversation.truncate(item_id, content_index, audio_end_ms)
        # At once: placing the words may take a while, or never happen (no aligner, or it fails).
        self._send("conversation.item.truncated", item_id=item_id, content_index=content_index,
                   audio_end_ms=audio_end_ms)
        reply = self._spoken.get(item_id)
        if reply is None or audio_end_ms >= reply.audio_ms:  # type: ignore[operator]  # nothing to place
            return

        async def placed() -> None:  # the socket reads on meanwhile
            text, words, kept = await self._cut_by_words(reply, float(audio_end_ms))  # type: ignore[arg-type]
            if kept:
                self._send("lyre.conversation.item.heard", item_id=item_id, content_index=content_index,
                           audio_end_ms=audio_end_ms, transcript=text, words=word_objects(words))
        self._spawn(placed())

    def ended(self, reply: Reply) -> None:
        """A reply's ``response.done`` went out (a held one's never does if it is thrown away): its message
        in the conversation takes what was played of it."""
        if reply.status == "failed":  # response.done says it too; an error event names it for simple clients
            self._report(RealtimeError(f"response {reply.id} failed: {reply.error}", "response_failed",
                                       kind="server_error"))
        heard = reply.played_ms() if reply.status == "cancelled" else reply.audio_ms
        self._conversation.add_reply(reply.item_id, reply.text, reply.audio_ms, heard)
        if reply.text and reply.audio_samples:
            self._spoken.add(reply.item_id, reply)
            if heard < reply.audio_ms:
                self._spawn(self._cut_by_words(reply, heard))

    async def _cut_by_words(self, reply: Reply, heard_ms: float) -> tuple[str, list[AlignedWord], bool]:
        """Cut a reply's history entry, already cut by its length at ``heard_ms``, at the words the aligner
        places in the audio heard (a reply started meanwhile has the first cut); whether the history took them
        (not if the entry was cut at another point since)."""
        text, words = await reply.heard(heard_ms, self._aligner)
        return text, words, self._conversation.heard(reply.item_id, heard_ms, text)
