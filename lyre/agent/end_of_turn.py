"""A semantic end-of-turn model's say at a pause: sure enough that the person is done, it ends the turn there,
before the VAD's full silence.

    end_of_turn: EndOfTurn = SmartTurn.load()     # any model: 16 kHz audio -> probability the turn is over
    await confirm_end(ear, item, end_of_turn, threshold=0.5)   # at a pause in ``item``, the open utterance
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np

from lyre.stt import RealtimeSession
from lyre.stt.utterances import Utterance

__all__ = ["EndOfTurn", "confirm_end", "threshold_for"]

EndOfTurn = Callable[[np.ndarray], Awaitable[float]]  # 16 kHz audio -> probability the turn is over
# semantic_vad's eagerness: how sure the model must be to end a turn at a pause (medium and auto: the
# session's configured threshold). Low waits for a surer end; high takes a likelier one.
_EAGERNESS_THRESHOLD = {"low": 0.8, "high": 0.3}


def threshold_for(eagerness: str | None, default: float) -> float:
    """The probability that ends a turn at a pause, for a ``semantic_vad`` ``eagerness`` (None: server_vad)."""
    return _EAGERNESS_THRESHOLD.get(eagerness or "", default)


async def confirm_end(ear: RealtimeSession, item: Utterance, model: EndOfTurn, threshold: float) -> None:
    """The ``model``'s view of the turn so far (``ear``'s open utterance, paused): at ``threshold`` or over,
    it ends the turn now."""
    audio = ear.utterance_audio()
    if audio is None:
        return
    probability = await model(audio)
    # Only if the person has not spoken again since (the same pause still holds).
    if probability >= threshold and ear.paused_item() is item:
        ear.end_turn()
