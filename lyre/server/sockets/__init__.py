"""The server's WebSockets: the streaming TTS socket (Cartesia's shape) and the Realtime socket (transcription,
or a conversation with the agent)."""
