"""The SNAC audio codec: codes in, PCM out, batched across streams by a shared service."""

from lyre.codec.service import BatchPolicy, CodecService, CodecServiceClosed, CodecStats, CodecStream
from lyre.codec.snac import CodecWindow, SnacDecoder, load_snac

__all__ = [
    "BatchPolicy",
    "CodecService",
    "CodecServiceClosed",
    "CodecStats",
    "CodecStream",
    "CodecWindow",
    "SnacDecoder",
    "load_snac",
]
