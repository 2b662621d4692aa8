"""The speech-to-text tests' shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lyre.stt import PhoneAligner


@pytest.fixture(scope="module")
def phones() -> Iterator[PhoneAligner]:
    """pocketsphinx's phone aligner, made once per test file."""
    aligner = PhoneAligner()
    yield aligner
    aligner.close()
