"""The server's HTTP routes: OpenAI's speech, voices, transcriptions and chat completions, lyre's alignments
and adapter administration."""
