"""The HTTP and WebSocket server: OpenAI speech and transcription APIs, streaming contexts, metrics.

No torch here: the server talks to the TTS pipeline and the transcriber only.
"""

from lyre.server.app import create_app
from lyre.server.config import ServerConfig
from lyre.server.registration import start_draining

__all__ = ["ServerConfig", "create_app", "start_draining"]
