"""The HTTP and WebSocket server: OpenAI speech API, streaming contexts, metrics.

No torch here: the server talks to the TTS pipeline only.
"""

from lyre.server.app import create_app
from lyre.server.config import ServerConfig

__all__ = ["ServerConfig", "create_app"]
