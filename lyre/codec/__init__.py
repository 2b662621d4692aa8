"""The SNAC audio codec: codes in, PCM out."""

from lyre.codec.snac import SnacDecoder, load_snac

__all__ = ["SnacDecoder", "load_snac"]
