"""Listen, think, talk: a voice agent behind OpenAI's Realtime conversation protocol.

A session (`AgentSession`) listens with lyre.stt's realtime transcription,
thinks with a `Thinker` (lyre's chat model, or any OpenAI-compatible chat
endpoint) and speaks each reply with lyre.tts as the text is written; a reply
may start speculatively at a possible end of turn. No transport here: the
server feeds it the socket's events.
"""

from lyre.agent.end_of_turn import EndOfTurn
from lyre.agent.events import AgentSettings
from lyre.agent.reply import Reply, ReplySpec
from lyre.agent.session import AgentConfig, AgentSession
from lyre.agent.smart_turn import SmartTurn, find_smart_turn
from lyre.agent.think import LocalThinker, RemoteThinker, ThinkError, Thinker, ToolCallDelta

__all__ = [
    "AgentConfig",
    "AgentSession",
    "AgentSettings",
    "EndOfTurn",
    "LocalThinker",
    "RemoteThinker",
    "Reply",
    "ReplySpec",
    "SmartTurn",
    "ThinkError",
    "Thinker",
    "ToolCallDelta",
    "find_smart_turn",
]
