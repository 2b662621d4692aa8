"""Debian's Chromium, headless, driven through its chromedriver (selenium), for the tests that load lyre's pages.

    driver = chromium(tmp_path / "profile", "--use-fake-device-for-media-stream")

Started as a probe on this machine found it must be: no sandbox (root), no GPU, and none of the background
networking a closed network refuses; autoplay allowed, since a test has no hand to click.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

__all__ = ["CHROMEDRIVER", "CHROMIUM", "chromium"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--autoplay-policy=no-user-gesture-required")


def chromium(profile: Path, *flags: str) -> webdriver.Chrome:
    """A new headless Chromium with its own ``profile`` folder and ``flags`` besides the usual ones."""
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*_FLAGS, *flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
