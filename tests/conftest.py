"""Shared fixtures: the demo model every test uses instead of real weights."""

from __future__ import annotations

import pytest

from lyre.demo_model import DemoPaths, demo_model


@pytest.fixture(scope="session")
def demo() -> DemoPaths:
    """The cached demo model (created on first use)."""
    return demo_model()
