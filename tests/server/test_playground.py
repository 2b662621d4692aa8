"""The playground page in headless Chromium: it loads, a click starts a request, audio arrives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from browser import chromium
from serving import Server, running_server

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # A small KV cache keeps the page's request (no max_tokens: the server's cap) short.
    with running_server("--max-streams", "2", "--max-seq-len", "396") as s:
        yield s


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    driver = chromium(tmp_path / "profile")
    yield driver
    driver.quit()


def test_the_page_speaks_while_the_audio_streams(server: Server, browser: webdriver.Chrome) -> None:
    browser.get(f"{server.url}/")
    assert browser.title == "lyre playground"
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: len(Select(d.find_element(By.ID, "voice")).options) >= 8)
    Select(browser.find_element(By.ID, "voice")).select_by_value("leo")
    browser.find_element(By.ID, "speak").click()
    wait.until(lambda d: d.execute_script("return window.lyreFirstAudioMs !== null && window.lyreFirstAudioMs !== undefined"))
    first_ms = browser.execute_script("return window.lyreFirstAudioMs")
    assert first_ms > 0
    assert "first audio after" in browser.find_element(By.ID, "status").text
    wait.until(lambda d: d.execute_script("return window.lyreDone === true"))
    received = browser.execute_script("return window.lyreBytes")
    assert received > 0 and received % 2 == 0
    assert "s of audio" in browser.find_element(By.ID, "status").text
