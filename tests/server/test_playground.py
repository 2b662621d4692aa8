"""The playground page in headless Chromium against a real server: it speaks as the audio streams, lights its
captions word by word from the server's word times, clones a voice from the microphone, shows the server's
figures from /metrics, and switches between dark and light. (Its Talk button: tests/agent/test_agent.py.)"""

from __future__ import annotations

import wave
from collections.abc import Iterator

import httpx
import pytest
from browser import chromium
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait
from serving import Server, running_server
from speech import SENTENCES, speak_pcm16

pytestmark = pytest.mark.slow

ADMIN_KEY = "playground-admin"
# Two sentences: the first one's words are sent once it is made, while its audio still plays.
CAPTIONED = ("Good morning to you, my dear friend, how are you doing today? "
             "The tea is ready in the kitchen, come and get it.")
SEED = 3  # the demo model's noise, and so the words its aligner places, much the same from run to run
MAX_TOKENS = 60  # per sentence: 8 frames, 0.7 s of audio
READ = SENTENCES[0]  # what the fake microphone says, and the page is told it says
STATUS = "return document.getElementById('status').textContent"  # what a failed wait shows
CLONE_STATUS = "return document.getElementById('cloneStatus').textContent"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # --max-seq-len: room for the recorded clip's turn (4.5 s, about 370 tokens) and a short reply.
    with running_server("--max-streams", "2", "--max-seq-len", "768", "--admin-key", ADMIN_KEY) as s:
        yield s


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    folder = tmp_path_factory.mktemp("playground")
    # Chromium's fake microphone plays this file in a loop: someone reading a sentence, with a breath after it
    # (short, so that any 4.5 s of it holds more than the 3 s of speech a voice needs).
    reading = folder / "reading.wav"
    with wave.open(str(reading), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24_000)
        out.writeframes(speak_pcm16(READ) + bytes(2 * 12_000))
    driver = chromium(folder / "profile", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                      f"--use-file-for-fake-audio-capture={reading}")
    yield driver
    driver.quit()


def _open(browser: webdriver.Chrome, server: Server) -> WebDriverWait[webdriver.Chrome]:
    browser.get(f"{server.url}/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: len(Select(d.find_element(By.ID, "voice")).options) >= 8)
    return wait


def _fill(browser: webdriver.Chrome, element_id: str, value: object) -> None:
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(str(value))


def _options(browser: webdriver.Chrome, seed: int | None = None) -> None:
    """Opens the page's options and caps each sentence at MAX_TOKENS (and the seed, when given)."""
    browser.find_element(By.CSS_SELECTOR, "#speakCard summary").click()
    _fill(browser, "maxTokens", MAX_TOKENS)
    if seed is not None:
        _fill(browser, "seed", seed)


def _until(browser: webdriver.Chrome, script: str, failing: str, timeout_s: float = 60) -> None:
    """Waits for ``script`` to return true; on a timeout, fails with what ``failing`` returns."""
    try:
        WebDriverWait(browser, timeout_s).until(lambda d: d.execute_script(script))
    except TimeoutException:
        pytest.fail(f"{script!r} never held: {browser.execute_script(failing)!r}")


def _written_in_order(words: list[str], text: str) -> bool:
    """Whether ``words`` are words of ``text`` as written, in its order, each once."""
    written = iter(text.split())
    return all(word in written for word in words)


def _metric(server: Server, name: str) -> float:
    """The sum of /metrics' samples of ``name`` (with its labels, if it gives them); 0 when there are none yet."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or ("{" not in name and line.startswith(name + "{")))


def _theme(browser: webdriver.Chrome) -> str:
    return browser.execute_script("return document.documentElement.dataset.theme")


def _background(browser: webdriver.Chrome) -> str:
    return browser.execute_script("return getComputedStyle(document.body).backgroundColor")


def test_the_page_speaks_while_the_audio_streams(server: Server, browser: webdriver.Chrome) -> None:
    wait = _open(browser, server)
    assert browser.title == "lyre playground"
    Select(browser.find_element(By.ID, "voice")).select_by_value("leo")
    _options(browser)
    browser.find_element(By.ID, "speak").click()
    wait.until(lambda d: d.execute_script("return window.lyreFirstAudioMs != null"))
    first_ms = browser.execute_script("return window.lyreFirstAudioMs")
    assert first_ms > 0
    assert "first audio after" in browser.find_element(By.ID, "status").text
    wait.until(lambda d: d.execute_script("return window.lyreDone === true"))
    received = browser.execute_script("return window.lyreBytes")
    assert received > 0 and received % 2 == 0
    assert "s of audio" in browser.find_element(By.ID, "status").text


def test_captions_light_each_word_the_server_timed_in_order_when_it_plays(server: Server,
                                                                           browser: webdriver.Chrome) -> None:
    timed_before = _metric(server, 'lyre_word_timestamps_audio_seconds_total{api="sse"}')
    _open(browser, server)
    _fill(browser, "text", CAPTIONED)
    _options(browser, seed=SEED)
    Select(browser.find_element(By.ID, "voice")).select_by_value("leo")
    browser.find_element(By.ID, "speak").click()
    # Paused as the first audio comes: the words' times arrive meanwhile, and none the paused clock has not
    # reached is lit.
    _until(browser, "return window.lyreFirstAudioMs != null", STATUS)
    browser.find_element(By.ID, "pause").click()
    _until(browser, "return window.lyreCaptions.pausedAt != null && window.lyreDone === true", STATUS)
    paused = browser.execute_script("return window.lyreCaptions")
    assert all(paused["words"][w["index"]]["start"] <= paused["pausedAt"] for w in paused["lit"]), paused
    assert len(paused["lit"]) < len(paused["words"]), paused
    browser.find_element(By.ID, "pause").click()
    _until(browser, "return window.lyreCaptions.done", STATUS)
    WebDriverWait(browser, 10).until(  # the server timed them: counted as its request ends
        lambda _: _metric(server, 'lyre_word_timestamps_audio_seconds_total{api="sse"}') > timed_before)
    captions = browser.execute_script("return window.lyreCaptions")
    sent = captions["words"]  # as the page read them from the server's speech.word_timestamps events
    assert len(sent) >= 2 and _written_in_order([w["text"] for w in sent], CAPTIONED), sent
    # Each word lit once, in the order spoken, and never before the audio reached its start.
    lit = captions["lit"]
    assert [w["index"] for w in lit] == list(range(len(sent))), (lit, sent)
    assert [w["text"] for w in lit] == [w["text"] for w in sent]
    assert all(w["at"] >= s["start"] for w, s in zip(lit, sent)), (lit, sent)
    said = [span.text for span in browser.find_elements(By.CSS_SELECTOR, "#captions .w.said")]
    assert said == [w["text"] for w in sent]
    assert not browser.find_elements(By.CSS_SELECTOR, "#captions .w.now")  # the last one let go at the end
    assert f"{len(sent)} words timed" in browser.find_element(By.ID, "status").text


def test_a_voice_cloned_from_the_microphone_is_made_on_the_server_and_speaks(server: Server,
                                                                            browser: webdriver.Chrome) -> None:
    _open(browser, server)
    _fill(browser, "cloneText", READ)
    _fill(browser, "cloneName", "from-the-mic")
    _fill(browser, "adminKey", ADMIN_KEY)
    browser.find_element(By.ID, "record").click()
    _until(browser, "return window.lyreClone.seconds >= 4.5", CLONE_STATUS)
    browser.find_element(By.ID, "record").click()
    clone = browser.execute_script("return window.lyreClone")
    assert not clone["recording"] and clone["bytes"] > 44 + 2 * 36_000  # 4.5 s of 16-bit samples at 8 kHz or more
    assert browser.find_element(By.ID, "clip").get_attribute("src").startswith("blob:")
    browser.find_element(By.ID, "cloneSave").click()
    _until(browser, "return window.lyreClone.voice !== null", CLONE_STATUS)
    assert "is ready" in browser.find_element(By.ID, "cloneStatus").text

    voices = httpx.get(f"{server.url}/v1/audio/voices", timeout=10).json()["voices"]
    made = [v for v in voices if v["id"] == "from-the-mic"]
    assert made and made[0]["kind"] == "reference" and made[0]["text"] == READ, voices
    assert made[0]["duration_s"] >= 3  # speech heard in the recording, not silence
    # The new voice is listed and picked; it speaks.
    assert Select(browser.find_element(By.ID, "voice")).first_selected_option.get_attribute("value") == "from-the-mic"
    _fill(browser, "text", "Hi there.")
    _options(browser)
    browser.find_element(By.ID, "speak").click()
    _until(browser, "return window.lyreDone === true", STATUS)
    assert browser.execute_script("return window.lyreBytes") > 0
    assert "s of audio" in browser.find_element(By.ID, "status").text


def test_the_live_view_shows_the_servers_figures_from_metrics(server: Server, browser: webdriver.Chrome) -> None:
    _open(browser, server)
    _until(browser, "return window.lyreMetrics.polls >= 1", "return window.lyreMetrics")
    before = browser.execute_script("return window.lyreMetrics.figures.requests")
    assert browser.find_element(By.ID, "mRequests").text == str(round(before))
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
        "model": "orpheus", "input": "Hi there.", "voice": "tara", "response_format": "pcm", "max_tokens": MAX_TOKENS})
    assert response.status_code == 200
    _until(browser, f"return window.lyreMetrics.figures.requests > {before}", "return window.lyreMetrics")
    after = browser.execute_script("return window.lyreMetrics.figures")
    assert after["requests"] == _metric(server, "lyre_requests_total") == before + 1
    assert browser.find_element(By.ID, "mRequests").text == str(round(after["requests"]))
    assert after["ttfaMs"] > 0 and browser.find_element(By.ID, "mTtfa").text == f"{round(after['ttfaMs'])} ms"
    assert browser.find_element(By.ID, "mUnderruns").text == str(round(after["underruns"]))


def test_the_theme_toggle_switches_dark_and_light_and_is_remembered(server: Server,
                                                                     browser: webdriver.Chrome) -> None:
    _open(browser, server)
    first, first_background = _theme(browser), _background(browser)
    assert first in ("dark", "light")
    toggle = browser.find_element(By.ID, "theme")
    toggle.click()
    second = _theme(browser)
    assert {first, second} == {"dark", "light"}
    assert _background(browser) != first_background
    assert toggle.get_attribute("aria-pressed") == str(second == "dark").lower()
    _open(browser, server)
    assert _theme(browser) == second  # the choice outlasts a reload
