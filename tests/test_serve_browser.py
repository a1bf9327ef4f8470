"""The web chat page in a real headless browser (Debian's chromium, driven by Selenium): a reply streams in,
and Stop cancels a reply mid-stream, on the page and on the server.

Set TINYLM_DOCS_SCREENSHOT=docs/img/serve-chat.png to save the screenshot the docs show.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from browser_support import headless_chromium  # skips this module where no browser is installed
from serve_support import GREETING, make_greeter_checkpoint, serving
from tinylm.serve.metrics import metric_value

pytestmark = pytest.mark.usefixtures("one_thread")

STEP_DELAY_S = 0.0


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    yield from headless_chromium(1100, 640)


def throttled(scheduler) -> None:
    """Each step waits STEP_DELAY_S first, so the test can press Stop while a reply is still streaming."""
    step = scheduler.step

    def slowed() -> None:
        if STEP_DELAY_S:
            time.sleep(STEP_DELAY_S)
        step()

    scheduler.step = slowed


def test_a_reply_streams_in_and_stop_cancels_the_next(browser: webdriver.Chrome, tmp_path: Path) -> None:
    global STEP_DELAY_S
    wait = WebDriverWait(browser, 30)
    with serving(make_greeter_checkpoint(tmp_path), wrap=throttled) as (url, served, _):
        browser.get(url + "/")
        wait.until(lambda d: "micro" in d.find_element(By.ID, "model").text)
        browser.find_element(By.ID, "temperature").clear()
        browser.find_element(By.ID, "temperature").send_keys("0")

        # a whole reply, streamed
        STEP_DELAY_S = 0.02
        browser.find_element(By.ID, "input").send_keys(GREETING[0]["content"])
        browser.find_element(By.ID, "send").click()
        replies = lambda d: d.find_elements(By.CSS_SELECTOR, ".message.assistant .text")  # noqa: E731
        wait.until(lambda d: replies(d) and replies(d)[0].text)
        partial = replies(browser)[0].text
        wait.until(lambda d: "finished" in d.find_element(By.ID, "status").text)
        reply = replies(browser)[0].text
        assert reply.startswith("Hi! I am a tiny model") and len(partial) < len(reply)  # it arrived in pieces
        assert browser.find_element(By.ID, "status").text == "finished: stop"

        # the second reply is stopped mid-stream
        STEP_DELAY_S = 0.2
        browser.find_element(By.ID, "input").send_keys("Tell me more about yourself, please.")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: len(replies(d)) == 2 and replies(d)[1].text)
        browser.find_element(By.ID, "stop").click()
        wait.until(lambda d: d.find_element(By.ID, "status").text == "stopped")
        assert "stopped" in browser.find_elements(By.CSS_SELECTOR, ".message.assistant")[1].get_attribute("class")
        assert browser.find_element(By.ID, "send").is_enabled()
        if os.environ.get("TINYLM_DOCS_SCREENSHOT"):
            browser.save_screenshot(os.environ["TINYLM_DOCS_SCREENSHOT"])

        def metric(name: str) -> float:
            return metric_value(httpx.get(url + "/metrics").text, name)

        deadline = time.monotonic() + 10
        while metric('tinylm_requests_finished_total{reason="cancelled"}') < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric('tinylm_requests_finished_total{reason="cancelled"}') == 1
        assert metric("tinylm_requests_running") == 0
        STEP_DELAY_S = 0.0
