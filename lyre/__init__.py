"""lyre: serve LLM-backbone speech models to real-time voice agents."""

__version__ = "0.1.0"
